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

    def inflate_block(self, data: bytes, block_index: int, context: Any) -> Any:
        """The codec work on one verified block; raises `DecodeError` for bytes that do not decode."""

    def block_records(self, inflated: Any, block_index: int) -> list[dict[str, Any]]:
        """The records of an inflated block; raises `DecodeError` for a payload that does not parse."""

    def decode_block(self, data: bytes, block_index: int, context: Any) -> list[dict[str, Any]]:
        """The records of one verified block."""
        return self.block_records(self.inflate_block(data, block_index, context), block_index)


@dataclass
class EncodedShard:
    data: bytearray
    sha256: str
    record_count: int
    blocks: list[BlockRef]
    trailer: ByteRange | None = None
    raw_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _compress_job(job: Callable[[], bytes], whole: Any) -> tuple[bytes, str]:
    """Run a detached block's compression and hash it; on the shard's one worker thread."""
    data = job()
    # The single worker runs blocks in order, so the whole-shard digest can advance here.
    whole.update(data)
    return data, hashlib.sha256(data).hexdigest()


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
    once the shard passes `max_bytes`.

    An encoder with ``cut_block`` has each block compressed and hashed on one worker
    thread while the next block's records are encoded: the codecs release the GIL, so
    the two overlap. Blocks still complete in order, so the bytes are the same.
    """
    if block_bytes < 1:
        raise EncodeError(f"{name}: block_bytes is {block_bytes}; it must be a positive number of bytes")
    encoder = fmt.new_encoder()
    out = bytearray()
    whole = hashlib.sha256()
    blocks: list[BlockRef] = []
    pending = 0
    first = 0
    count = 0
    raw_total = 0
    cut_block = getattr(encoder, "cut_block", None)
    pool = ThreadPoolExecutor(1, thread_name_prefix="trainvault-encode") if cut_block else None
    # Blocks handed to the worker and not yet placed: (first record, record count, future).
    inflight: deque[tuple[int, int, Future[tuple[bytes, str]]]] = deque()

    def place(start: int, n: int, data: bytes, digest: str) -> None:
        blocks.append(BlockRef(offset=len(out), length=len(data), sha256=digest, first_record=start, record_count=n))
        out.extend(data)
        if max_bytes is not None and len(out) > max_bytes:
            raise ObjectTooLargeError(
                f"{name}: more than {max_bytes} bytes after {start + n} records; a create-only shard must stay "
                "under the single-put limit, so spread the records over more shard ids"
            )

    def place_oldest() -> None:
        start, n, future = inflight.popleft()
        try:
            data, digest = future.result()
        except EncodeError as exc:
            raise EncodeError(f"{name}: records {start}-{start + n - 1}: {exc}") from None
        place(start, n, data, digest)

    def emit_block() -> None:
        nonlocal pending, first
        start, n = first, count - first
        pending = 0
        first = count
        if pool is not None:
            inflight.append((start, n, pool.submit(_compress_job, cut_block(), whole)))
            # One block compresses while the next fills; waiting here bounds memory to two blocks.
            while len(inflight) > 1:
                place_oldest()
            return
        try:
            data = encoder.flush_block()
        except EncodeError as exc:  # columnar formats find bad values per block
            raise EncodeError(f"{name}: records {start}-{start + n - 1}: {exc}") from None
        whole.update(data)
        place(start, n, data, hashlib.sha256(data).hexdigest())

    try:
        for record in records:
            if type(record) is not dict and not isinstance(record, Mapping):
                raise EncodeError(
                    f"{name}: record {count} is a {type(record).__name__}, not a mapping; records are dicts"
                )
            try:
                size = encoder.add(record)
            except EncodeError as exc:
                raise EncodeError(f"{name}: record {count}: {exc}") from None
            except (TypeError, ValueError, OverflowError) as exc:
                raise EncodeError(f"{name}: record {count} cannot be encoded: {exc}") from None
            count += 1
            pending += size
            raw_total += size
            if pending >= block_bytes:
                emit_block()
        if count > first:
            emit_block()
        while inflight:
            place_oldest()
    finally:
        if pool is not None:
            # On an error, drop blocks not started and let the running one finish.
            pool.shutdown(wait=True, cancel_futures=True)
    trailer_bytes = encoder.finish() if count else b""
    trailer = None
    if trailer_bytes:
        trailer = ByteRange(
            offset=len(out), length=len(trailer_bytes), sha256=hashlib.sha256(trailer_bytes).hexdigest()
        )
        out.extend(trailer_bytes)
        whole.update(trailer_bytes)
    return EncodedShard(
        data=out, sha256=whole.hexdigest(), record_count=count, blocks=blocks, trailer=trailer, raw_bytes=raw_total
    )


def check_record_keys(record: Mapping[str, Any]) -> None:
    for key in record:
        if not isinstance(key, str):
            raise EncodeError(f"field name {key!r} is a {type(key).__name__}; field names must be strings")
