"""The rollout documents on storage: archive index, pool owner record, metadata sidecar."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from trainvault.documents import Document, StrictModel
from trainvault.formats.blocks import BlockRef
from trainvault.publication.manifest import Producer
from trainvault.refs import Sha256

#: Owner record names: `<sha256 of the archive URI, 32 hex>-<32 hex nonce>`.
OWNER_NAME = r"^[0-9a-f]{32}-[0-9a-f]{32}$"


class ArchiveChunk(StrictModel):
    """One pool object: a block-framed msgpack.zst run of consecutive samples."""

    sha256: Sha256
    size_bytes: int = Field(ge=1)
    sample_count: int = Field(ge=1)
    blocks: list[BlockRef] = Field(min_length=1)

    @model_validator(mode="after")
    def _blocks_tile_the_chunk(self) -> ArchiveChunk:
        # Decoding slices the chunk by these refs, so they must cover it exactly, in order.
        pos = first = 0
        for b in self.blocks:
            if b.offset != pos or b.first_record != first:
                raise ValueError("blocks must be contiguous and in record order")
            pos += b.length
            first += b.record_count
        if pos != self.size_bytes or first != self.sample_count:
            raise ValueError("blocks do not cover the chunk's bytes and samples exactly")
        return self


class ArchiveEntry(StrictModel):
    """Where one sample lives, and the keys that select it."""

    sample_key: str = Field(pattern=r"^(sample|position):.+$")
    task_key: str | None
    chunk: int = Field(ge=0)
    offset: int = Field(ge=0)


class ArchiveIndex(Document):
    """`trainvault.rollout-archive` v1: written last, create-only; it is the archive."""

    KIND = "trainvault.rollout-archive"

    format: Literal["trainvault.rollout-archive"] = "trainvault.rollout-archive"
    version: Literal[1] = 1
    rollout_id: int | str
    evaluation: bool
    pool: str = Field(min_length=1)
    owner: str = Field(pattern=OWNER_NAME)
    chunks: list[ArchiveChunk]
    samples: list[ArchiveEntry]
    #: One small mapping per sample, in archive order; None when written without metadata.
    sample_metadata: list[dict[str, Any]] | None
    producer: Producer

    @model_validator(mode="after")
    def _entries_match_chunks(self) -> ArchiveIndex:
        seen: set[tuple[int, int]] = set()
        for i, e in enumerate(self.samples):
            if e.chunk >= len(self.chunks) or e.offset >= self.chunks[e.chunk].sample_count:
                raise ValueError(f"samples.{i} points outside its chunk")
            seen.add((e.chunk, e.offset))
        if len(seen) != len(self.samples) or len(seen) != sum(c.sample_count for c in self.chunks):
            raise ValueError("every stored sample must have exactly one entry")
        if self.sample_metadata is not None and len(self.sample_metadata) != len(self.samples):
            raise ValueError("sample_metadata must have one mapping per sample")
        return self


class OwnerRecord(Document):
    """`trainvault.rollout-pool-owner` v1: an archive's claim on pool objects (retention)."""

    KIND = "trainvault.rollout-pool-owner"

    format: Literal["trainvault.rollout-pool-owner"] = "trainvault.rollout-pool-owner"
    version: Literal[1] = 1
    archive: str = Field(min_length=1)
    objects: list[Sha256]
    created_unix: float


class MetadataSidecar(Document):
    """`trainvault.rollout-archive-metadata` v1: metadata for an archive written without it."""

    KIND = "trainvault.rollout-archive-metadata"

    format: Literal["trainvault.rollout-archive-metadata"] = "trainvault.rollout-archive-metadata"
    version: Literal[1] = 1
    #: SHA-256 of the archive index bytes this metadata describes.
    index_sha256: Sha256
    samples: list[dict[str, Any]]


class GcMarker(Document):
    """`trainvault.rollout-pool-gc` v1: a collector is running; writers wait it out."""

    KIND = "trainvault.rollout-pool-gc"

    format: Literal["trainvault.rollout-pool-gc"] = "trainvault.rollout-pool-gc"
    version: Literal[1] = 1
    started_unix: float
    #: The collector deletes nothing after this time (its own clock).
    deadline_unix: float
