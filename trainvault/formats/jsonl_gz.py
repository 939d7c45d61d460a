"""`jsonl.gz`: one gzip member per block, each holding whole JSON lines.

``zcat`` reads the whole shard as one stream (concatenated gzip members are one gzip
file). Members carry mtime 0 and no file name, so the bytes are deterministic. NumPy
arrays are written as JSON lists; bytes have no JSON form and are refused.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from trainvault.errors import DecodeError, EncodeError
from trainvault.formats.blocks import ShardFormat, check_record_keys

GZIP_LEVEL = 6


def _json_default(value: Any) -> Any:
    module = type(value).__module__
    if module == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise EncodeError("bytes have no JSON form; use the msgpack.zst or parquet format, or encode them as text")
    raise EncodeError(f"a {type(value).__name__} has no JSON form")


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_json_default).encode


def gzip_member(payload: bytes | bytearray) -> bytes:
    """One gzip member with mtime 0, no file name, OS byte 255 (unknown): deterministic."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = compressor.compress(payload) + compressor.flush()
    # Header: magic, deflate, no flags, mtime 0, xfl per level, OS unknown.
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    trailer = (zlib.crc32(payload) & 0xFFFFFFFF).to_bytes(4, "little") + (len(payload) & 0xFFFFFFFF).to_bytes(
        4, "little"
    )
    return header + body + trailer


_loads = json.JSONDecoder().decode


class _Encoder:
    def __init__(self) -> None:
        self._buf = bytearray()

    def add(self, record: Mapping[str, Any]) -> int:
        check_record_keys(record)
        try:
            line = _dumps(record).encode("utf-8") + b"\n"
        except ValueError as exc:  # NaN / infinity
            raise EncodeError(f"not valid JSON: {exc}") from None
        self._buf.extend(line)
        return len(line)

    def flush_block(self) -> bytes:
        data = gzip_member(self._buf)
        self._buf.clear()
        return data

    def cut_block(self) -> Callable[[], bytes]:
        # zlib releases the GIL, so deflating this block overlaps encoding the next.
        payload, self._buf = self._buf, bytearray()
        return lambda: gzip_member(payload)

    def finish(self) -> bytes:
        return b""


class JsonlGzFormat(ShardFormat):
    name = "jsonl.gz"
    extension = "jsonl.gz"

    def settings(self) -> dict[str, Any]:
        return {"gzip_level": GZIP_LEVEL}

    def new_encoder(self) -> _Encoder:
        return _Encoder()

    def open_context(self, trailer: bytes | None, size_bytes: int) -> Any:
        return None

    def inflate_block(self, data: bytes | memoryview, block_index: int, context: Any) -> bytes:
        """The block's JSON lines (zlib releases the GIL)."""
        inflater = zlib.decompressobj(31)  # gzip wrapper
        try:
            payload = inflater.decompress(data)
        except zlib.error as exc:
            raise DecodeError(f"block {block_index} is not a valid jsonl.gz block: {exc}") from None
        if not inflater.eof or inflater.unused_data:
            raise DecodeError(f"block {block_index} is not a valid jsonl.gz block: it is not exactly one gzip member")
        return payload

    def block_records(self, inflated: bytes, block_index: int) -> list[dict[str, Any]]:
        try:
            # One UTF-8 decode for the block, not one per line; the encoder writes "\n" only between lines.
            return [_loads(line) for line in inflated.decode("utf-8").split("\n") if line]
        except ValueError as exc:
            raise DecodeError(f"block {block_index} is not a valid jsonl.gz block: {exc}") from None
