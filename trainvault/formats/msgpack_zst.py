"""`msgpack.zst`: one zstd frame per block, each holding msgpack records back to back.

Plain tools read it: ``zstd -d`` then any msgpack stream reader. NumPy arrays travel as
msgpack extension type 1 (``[dtype, shape, raw bytes]``), so tokens decode without a
per-element Python loop; a reader without NumPy sees an `ExtType`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
import zstandard

from trainvault.errors import DecodeError, EncodeError
from trainvault.extras import require
from trainvault.formats.blocks import check_record_keys

ZSTD_LEVEL = 3
NDARRAY_EXT = 1


def _is_ndarray(value: Any) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _pack_default(value: Any) -> Any:
    if _is_ndarray(value):
        if value.dtype.hasobject:
            raise EncodeError("object arrays cannot be encoded; use a numeric dtype")
        header = msgpack.packb([value.dtype.str, list(value.shape)])
        return msgpack.ExtType(NDARRAY_EXT, header + value.tobytes(order="C"))
    module = type(value).__module__
    if module == "numpy" and hasattr(value, "item"):
        return value.item()  # NumPy scalars become plain numbers
    raise EncodeError(f"a {type(value).__name__} cannot be encoded; use str, bytes, numbers, lists, dicts or NumPy arrays")


def _ext_hook(code: int, data: bytes) -> Any:
    if code != NDARRAY_EXT:
        return msgpack.ExtType(code, data)
    np = require("numpy", "torch")
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    dtype, shape = unpacker.unpack()
    offset = unpacker.tell()
    return np.frombuffer(data, dtype=np.dtype(dtype), offset=offset).reshape(shape)


def unpack_records(payload: bytes) -> list[dict[str, Any]]:
    """Decode msgpack records laid back to back."""
    unpacker = msgpack.Unpacker(raw=False, ext_hook=_ext_hook, max_buffer_size=max(len(payload), 1 << 20))
    unpacker.feed(payload)
    return list(unpacker)


class _Encoder:
    def __init__(self) -> None:
        self._packer = msgpack.Packer(default=_pack_default, use_bin_type=True, autoreset=True)
        self._buf = bytearray()
        self._zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True, write_checksum=False)

    def add(self, record: Mapping[str, Any]) -> int:
        check_record_keys(record)
        packed = self._packer.pack(record if type(record) is dict else dict(record))
        self._buf.extend(packed)
        return len(packed)

    def flush_block(self) -> bytes:
        data = self._zstd.compress(self._buf)
        self._buf.clear()
        return data

    def finish(self) -> bytes:
        return b""


class MsgpackZstFormat:
    name = "msgpack.zst"
    extension = "msgpack.zst"

    def settings(self) -> dict[str, Any]:
        return {"zstd_level": ZSTD_LEVEL, "ndarray_ext": NDARRAY_EXT}

    def new_encoder(self) -> _Encoder:
        return _Encoder()

    def open_context(self, trailer: bytes | None, size_bytes: int) -> Any:
        return zstandard.ZstdDecompressor()

    def decode_block(self, data: bytes, block_index: int, context: Any) -> list[dict[str, Any]]:
        try:
            payload = context.decompress(data)
            return unpack_records(payload)
        except (zstandard.ZstdError, msgpack.UnpackException, ValueError) as exc:
            raise DecodeError(f"block {block_index} is not a valid msgpack.zst block: {exc}") from None
