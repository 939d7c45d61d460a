"""The block-framed shard: a sequence of independently decodable blocks plus an index.

Every format plugs a `BlockEncoder` (records in, block bytes out) and a block decoder
into the shared writer here, so block cutting, offsets, digests and size limits are
decided in one place for all formats.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
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

    def finish(self) -> bytes:
        """Bytes that follow the last block (a format's footer), or b""."""


class ShardFormat(Protocol):
    name: str
    extension: str

    def settings(self) -> dict[str, Any]:
        """Codec settings that, with the library version, fix the encoded bytes."""

    def new_encoder(self) -> BlockEncoder: ...

    def open_context(self, trailer: bytes | None, size_bytes: int) -> Any:
        """Per-shard decoding context built from the trailer (None for most formats)."""

    def decode_block(self, data: bytes, block_index: int, context: Any) -> list[dict[str, Any]]: ...


@dataclass
class EncodedShard:
    data: bytearray
    sha256: str
    record_count: int
    blocks: list[BlockRef]
    trailer: ByteRange | None = None
    raw_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


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
    as soon as the shard passes `max_bytes`.
    """
    if block_bytes < 1:
        raise ValueError("block_bytes must be positive")
    encoder = fmt.new_encoder()
    out = bytearray()
    whole = hashlib.sha256()
    blocks: list[BlockRef] = []
    pending = 0
    first = 0
    count = 0
    raw_total = 0

    def emit_block() -> None:
        nonlocal pending, first
        data = encoder.flush_block()
        blocks.append(
            BlockRef(
                offset=len(out),
                length=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                first_record=first,
                record_count=count - first,
            )
        )
        out.extend(data)
        whole.update(data)
        pending = 0
        first = count
        if max_bytes is not None and len(out) > max_bytes:
            raise ObjectTooLargeError(
                f"{name}: more than {max_bytes} bytes after {count} records; a create-only shard must stay "
                "under the single-put limit, so spread the records over more shard ids"
            )

    for record in records:
        if not isinstance(record, Mapping):
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
