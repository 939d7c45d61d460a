"""The block-framed shard: a sequence of independently decodable blocks plus an index.

Every format plugs a `BlockEncoder` (records in, block bytes out) and its block decoding
into the shared writer here, so block cutting, offsets, digests and size limits are
decided in one place for all formats.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trainvault.errors import EncodeError, ObjectTooLargeError
from trainvault.formats.columns import ColumnBlock, from_records

DEFAULT_BLOCK_BYTES = 1 << 20


class ByteRange(BaseModel):
    """A region of a shard's bytes, bound by its SHA-256."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    offset: int = Field(ge=0)
    length: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class BlockRef(ByteRange):
    """One block: where its bytes are and which records it holds."""

    first_record: int = Field(ge=0)
    record_count: int = Field(ge=1)


class BlockEncoder(Protocol):
    """Per-shard encoding state of one format."""

    def add(self, record: Mapping[str, Any]) -> int:
        """Buffer one record; return the approximate raw bytes it adds."""

    def flush_block(self) -> bytes:
        """Encode the buffered records as one block and clear the buffer."""

    # Optional: ``cut_block() -> Callable[[], bytes]`` detaches the buffered records and
    # returns a job that encodes them as one block, safe to run on another thread while
    # `add` fills the next block. Formats whose block encoding releases the GIL have it.

    def finish(self) -> bytes:
        """Bytes that follow the last block (a format's footer), or b""."""


class ShardFormat(Protocol):
    """One shard format: its encoder and the decoding of one verified block.

    Decoding is two steps so that a reader can put each where it is cheapest:
    `inflate_block` does the codec work, which releases the GIL (run it on read threads);
    `block_records` builds the Python records, which holds it (run it on the thread that
    consumes them). `decode_block` is both, for callers on one thread.
    """

    name: str
    extension: str

    def settings(self) -> dict[str, Any]:
        """Codec settings that, with the library version, fix the encoded bytes."""

    def new_encoder(self) -> BlockEncoder: ...

    def open_context(self, trailer: bytes | None, size_bytes: int) -> Any:
        """Per-shard decoding context built from the trailer (None for most formats)."""

    def inflate_block(self, data: bytes | memoryview, block_index: int, context: Any) -> Any:
        """The codec work on one verified block; raises `DecodeError` for bytes that do not decode."""

    def block_records(self, inflated: Any, block_index: int) -> list[dict[str, Any]]:
        """The records of an inflated block; raises `DecodeError` for a payload that does not parse."""

    def decode_block(self, data: bytes, block_index: int, context: Any) -> list[dict[str, Any]]:
        """The records of one verified block."""
        return self.block_records(self.inflate_block(data, block_index, context), block_index)

    def block_columns(self, inflated: Any, block_index: int) -> ColumnBlock:
        """The records of an inflated block as columns. This default builds the records first
        (msgpack.zst, jsonl.gz); a columnar format overrides it to skip them."""
        return from_records(self.block_records(inflated, block_index))


@dataclass
class EncodedShard:
    data: bytearray
    sha256: str
    record_count: int
    blocks: list[BlockRef]
    trailer: ByteRange | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _ShardBytes:
    """A shard's bytes as its blocks are placed: offsets, the block index and the size limit.

    `whole`, the whole-shard digest, is advanced by whoever produces block bytes, in order.
    """

    name: str
    max_bytes: int | None
    out: bytearray = field(default_factory=bytearray)
    whole: Any = field(default_factory=hashlib.sha256)
    blocks: list[BlockRef] = field(default_factory=list)

    def place(self, start: int, n: int, data: bytes, digest: str) -> None:
        out = self.out
        self.blocks.append(
            BlockRef(offset=len(out), length=len(data), sha256=digest, first_record=start, record_count=n)
        )
        out.extend(data)
        if self.max_bytes is not None and len(out) > self.max_bytes:
            raise ObjectTooLargeError(
                f"{self.name}: more than {self.max_bytes} bytes after {start + n} records; a create-only shard must "
                "stay under the single-put limit, so spread the records over more shard ids"
            )

    def place_trailer(self, data: bytes) -> ByteRange | None:
        if not data:
            return None
        trailer = ByteRange(offset=len(self.out), length=len(data), sha256=hashlib.sha256(data).hexdigest())
        self.out.extend(data)
        self.whole.update(data)
        return trailer


def _block_error(name: str, start: int, n: int, exc: EncodeError) -> EncodeError:
    return EncodeError(f"{name}: records {start}-{start + n - 1}: {exc}")


class _InlineBlocks:
    """Encodes each block on the calling thread."""

    def __init__(self, encoder: BlockEncoder, shard: _ShardBytes):
        self._encoder, self._shard = encoder, shard

    def cut(self, start: int, n: int) -> None:
        try:
            data = self._encoder.flush_block()
        except EncodeError as exc:  # columnar formats find bad values per block
            raise _block_error(self._shard.name, start, n, exc) from None
        self._shard.whole.update(data)
        self._shard.place(start, n, data, hashlib.sha256(data).hexdigest())

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


def _compress_job(job: Callable[[], bytes], whole: Any) -> tuple[bytes, str]:
    """Run a detached block's compression and hash it; on the shard's one worker thread."""
    data = job()
    # The single worker runs blocks in order, so the whole-shard digest can advance here.
    whole.update(data)
    return data, hashlib.sha256(data).hexdigest()


@dataclass
class _Inflight:
    start: int
    count: int
    future: Future[tuple[bytes, str]]


class _PipelinedBlocks:
    """Compresses and hashes each block on one worker thread while the next block fills.

    The codecs release the GIL, so the two overlap; blocks complete in order, so the
    bytes are the same as `_InlineBlocks` gives.
    """

    def __init__(self, cut_block: Callable[[], Callable[[], bytes]], shard: _ShardBytes):
        self._cut_block, self._shard = cut_block, shard
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="trainvault-encode")
        self._inflight: deque[_Inflight] = deque()

    def cut(self, start: int, n: int) -> None:
        self._inflight.append(
            _Inflight(start, n, self._pool.submit(_compress_job, self._cut_block(), self._shard.whole))
        )
        # One block compresses while the next fills; waiting here bounds memory to two blocks.
        while len(self._inflight) > 1:
            self._place_oldest()

    def drain(self) -> None:
        while self._inflight:
            self._place_oldest()

    def close(self) -> None:
        # On an error, drop blocks not started and let the running one finish.
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _place_oldest(self) -> None:
        job = self._inflight.popleft()
        try:
            data, digest = job.future.result()
        except EncodeError as exc:
            raise _block_error(self._shard.name, job.start, job.count, exc) from None
        self._shard.place(job.start, job.count, data, digest)


def _add_records(
    encoder: BlockEncoder,
    records: Iterable[Mapping[str, Any]],
    blocks: _InlineBlocks | _PipelinedBlocks,
    block_bytes: int,
    name: str,
) -> int:
    """Feed `records` to `encoder`, cutting a block whenever `block_bytes` of raw payload are buffered;
    returns the number of records."""
    add = encoder.add
    pending = first = count = 0
    for record in records:
        if type(record) is not dict and not isinstance(record, Mapping):
            raise EncodeError(f"{name}: record {count} is a {type(record).__name__}, not a mapping; records are dicts")
        try:
            size = add(record)
        except EncodeError as exc:
            raise EncodeError(f"{name}: record {count}: {exc}") from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"{name}: record {count} cannot be encoded: {exc}") from None
        count += 1
        pending += size
        if pending >= block_bytes:
            blocks.cut(first, count - first)
            pending, first = 0, count
    if count > first:
        blocks.cut(first, count - first)
    blocks.drain()
    return count


def encode_shard(
    fmt: ShardFormat,
    records: Iterable[Mapping[str, Any]],
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    max_bytes: int | None = None,
    name: str = "shard",
) -> EncodedShard:
    """Encode `records` into one shard's bytes and block index, in memory.

    A block is cut once the buffered records reach `block_bytes` of raw payload, so
    cut points depend only on the records and the setting. Raises `EncodeError` naming
    the record index for a record the format cannot hold, and `ObjectTooLargeError`
    once the shard passes `max_bytes`. An encoder with ``cut_block`` has each block
    compressed on a worker thread while the next one fills (same bytes).
    """
    if block_bytes < 1:
        raise EncodeError(f"{name}: block_bytes is {block_bytes}; it must be a positive number of bytes")
    encoder = fmt.new_encoder()
    shard = _ShardBytes(name, max_bytes)
    cut_block = getattr(encoder, "cut_block", None)
    blocks = _PipelinedBlocks(cut_block, shard) if cut_block else _InlineBlocks(encoder, shard)
    try:
        record_count = _add_records(encoder, records, blocks, block_bytes, name)
    finally:
        blocks.close()
    trailer = shard.place_trailer(encoder.finish() if record_count else b"")
    return EncodedShard(
        data=shard.out,
        sha256=shard.whole.hexdigest(),
        record_count=record_count,
        blocks=shard.blocks,
        trailer=trailer,
    )


def check_record_keys(record: Mapping[str, Any]) -> None:
    for key in record:
        if not isinstance(key, str):
            raise EncodeError(f"field name {key!r} is a {type(key).__name__}; field names must be strings")
