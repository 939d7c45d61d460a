"""`msgpack.zst`: one zstd frame per block, each holding msgpack records back to back.

Plain tools read it: ``zstd -d`` then any msgpack stream reader. NumPy arrays travel as
msgpack extension type 1 (``[dtype, shape, raw bytes]``), so tokens decode without a
per-element Python loop; a reader without NumPy sees an `ExtType`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import msgpack
import zstandard

from trainvault.errors import DecodeError, EncodeError
from trainvault.extras import require
from trainvault.formats.blocks import ShardFormat, check_record_keys

ZSTD_LEVEL = 3
NDARRAY_EXT = 1


def _is_ndarray(value: Any) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _new_ext(data: bytes) -> msgpack.ExtType:
    # ExtType's own __new__ re-validates code and data in Python on every record; both
    # are known good here, so build the namedtuple directly (same type, same bytes).
    return tuple.__new__(msgpack.ExtType, (NDARRAY_EXT, data))


_header_packb = msgpack.Packer(use_bin_type=True, autoreset=True).pack
# (dtype.str, shape) -> packed header; token arrays repeat a few hundred shapes.
_headers: dict[tuple[str, tuple[int, ...]], bytes] = {}


def _pack_default(value: Any) -> Any:
    if _is_ndarray(value):
        dtype = value.dtype
        if dtype.hasobject:
            raise EncodeError("object arrays cannot be encoded; use a numeric dtype")
        key = (dtype.str, value.shape)
        header = _headers.get(key)
        if header is None:
            header = _header_packb([dtype.str, list(value.shape)])
            if len(_headers) < 4096:  # bounded: odd shapes must not grow it forever
                _headers[key] = header
        return _new_ext(header + value.tobytes(order="C"))
    module = type(value).__module__
    if module == "numpy" and hasattr(value, "item"):
        return value.item()  # NumPy scalars become plain numbers
    raise EncodeError(
        f"a {type(value).__name__} cannot be encoded; use str, bytes, numbers, lists, dicts or NumPy arrays"
    )


_np: Any = None
# Header prefix of a 1-D array (0x92, dtype fixstr, 0x91, first shape byte) -> (dtype,
# payload offset). The SHA-256-verified block was written by this encoder, so a known
# prefix means a known layout; the payload length then fixes the element count.
_FAST: dict[bytes, tuple[Any, int]] = {}
# The same for 3-character dtype strings, keyed by exactly 7 bytes: (dtype, payload offset, itemsize).
_FAST7: dict[bytes, tuple[Any, int, int]] = {}
_ndarray: Any = None
# msgpack uint markers after a one-element shape array (0x91): size of the length field.
_UINT_WIDTH = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}


def _numpy() -> Any:
    global _np, _ndarray
    if _np is None:
        _np = require("numpy", "torch")
        _ndarray = _np.ndarray
    return _np


def _learn(data: bytes, n: int) -> tuple[Any, int] | None:
    """Parse a 1-D array header by hand and remember its prefix; None for other shapes."""
    np = _numpy()
    if not (len(data) > n + 3 and data[n + 2] == 0x91):
        return None
    tag = data[n + 3]
    width = 0 if tag < 0x80 else _UINT_WIDTH.get(tag, -1)
    if width < 0:
        return None
    start = n + 4 + width
    length = tag if width == 0 else int.from_bytes(data[n + 4 : start], "big")
    dtype = np.dtype(data[2 : n + 2].decode("ascii"))
    if start + length * dtype.itemsize != len(data):
        raise DecodeError(f"an array's payload is not the {length} x {dtype} its header declares")
    _FAST[data[: n + 4]] = (dtype, start)
    if n == 3:  # "<i4", "<f8", "|u1"...: the prefix is 7 bytes, matched without parsing
        _FAST7[data[:7]] = (dtype, start, dtype.itemsize)
    return dtype, start


def _ext_hook(code: int, data: bytes) -> Any:
    # Runs once per array: a per-record Unpacker for the header would cost more than
    # decoding the rest of the record, so the common 1-D header is matched by prefix.
    # Fastest path first (a 3-character dtype string, e.g. "<i4"): one slice, one dict
    # lookup, and the ndarray constructor, which is cheaper than np.frombuffer for the
    # same read-only view of `data`.
    fast7 = _FAST7.get(data[:7])
    if fast7 is not None and code == 1:  # NDARRAY_EXT
        dtype, start, itemsize = fast7
        size = len(data) - start
        count = size // itemsize
        if count * itemsize != size:
            raise DecodeError(f"an array's payload of {size} bytes is not a whole number of {dtype} elements")
        return _ndarray((count,), dtype, data, start)
    return _ext_hook_parse(code, data)


def _ext_hook_parse(code: int, data: bytes) -> Any:
    if code != NDARRAY_EXT:
        return msgpack.ExtType(code, data)
    n = data[1] - 0xA0 if data[:1] == b"\x92" and len(data) > 1 else -1
    if 0 <= n < 32:
        fast = _FAST.get(data[: n + 4]) or _learn(data, n)
        if fast is not None:
            return _np.frombuffer(data, dtype=fast[0], offset=fast[1])
    np = _numpy()
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
        self._pack = self._packer.pack
        self._buf = bytearray()
        self._zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True, write_checksum=False)
        # Field names already checked: records of one shard nearly always share them.
        self._checked_keys: frozenset[Any] = frozenset()

    def add(self, record: Mapping[str, Any]) -> int:
        if type(record) is not dict:
            record = dict(record)
        if record.keys() != self._checked_keys:
            check_record_keys(record)
            self._checked_keys = frozenset(record)
        packed = self._pack(record)
        self._buf += packed
        return len(packed)

    def flush_block(self) -> bytes:
        data = self._zstd.compress(self._buf)
        self._buf.clear()
        return data

    def cut_block(self) -> Callable[[], bytes]:
        # zstd releases the GIL, so this job overlaps packing of the next block. One
        # worker runs the jobs in turn, so the one compressor is never used concurrently.
        payload, self._buf = self._buf, bytearray()
        return lambda: self._zstd.compress(payload)

    def finish(self) -> bytes:
        return b""


# One decompressor per thread, shared by every shard: a zstd context must not be used by
# two threads at once, and one per (shard, thread) would hold a context per shard.
_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


class MsgpackZstFormat(ShardFormat):
    name = "msgpack.zst"
    extension = "msgpack.zst"

    def settings(self) -> dict[str, Any]:
        return {"zstd_level": ZSTD_LEVEL, "ndarray_ext": NDARRAY_EXT}

    def new_encoder(self) -> _Encoder:
        return _Encoder()

    def open_context(self, trailer: bytes | None, size_bytes: int) -> Any:
        return None

    def inflate_block(self, data: bytes | memoryview, block_index: int, context: Any) -> bytes:
        """The block's msgpack payload (zstd releases the GIL)."""
        try:
            return _decompressor().decompress(data)
        except zstandard.ZstdError as exc:
            raise DecodeError(f"block {block_index} is not a valid msgpack.zst block: {exc}") from None

    def block_records(self, inflated: bytes, block_index: int) -> list[dict[str, Any]]:
        """Unpacked records; a NumPy array is a read-only view of its extension bytes, not an element-wise copy."""
        try:
            return unpack_records(inflated)
        except (DecodeError, msgpack.UnpackException, ValueError) as exc:
            raise DecodeError(f"block {block_index} is not a valid msgpack.zst block: {exc}") from None
