"""Verified reads of a published shard: descriptor first, then blocks checked before decoding."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence, Sized
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from trainvault.canonical import sha256_hex
from trainvault.errors import (
    DecodeError,
    IntegrityError,
    ManifestError,
    ObjectNotFoundError,
)
from trainvault.formats import get_format
from trainvault.formats.blocks import BlockRef
from trainvault.formats.columns import ColumnBlock
from trainvault.publication.manifest import DataManifest, ShardDescriptor, ShardEntry
from trainvault.storage import Storage
from trainvault.storage.readable import ReadableStorage
from trainvault.storage.store import StorageSource, storage_or_default

STREAM_CHUNK = 4 << 20

#: Told the seconds a read stage took: ``clock("fetch", 0.002)``.
Clock = Callable[[str, float], None]


def read_descriptor(storage: ReadableStorage, entry: ShardEntry) -> ShardDescriptor:
    """Read a shard's descriptor and check it against the manifest entry that binds it."""
    return parse_descriptor(entry, storage.get_document(entry.descriptor_uri))


def parse_descriptor(entry: ShardEntry, raw: bytes) -> ShardDescriptor:
    """Parse descriptor bytes already read and check them against the manifest entry."""
    if sha256_hex(raw) != entry.descriptor_sha256:
        raise IntegrityError(
            f"{entry.descriptor_uri}: descriptor sha256 does not match the manifest; the descriptor was altered "
            "after publication: do not train on this shard"
        )
    return check_descriptor(
        entry, ShardDescriptor.from_json_bytes(raw, source=entry.descriptor_uri), entry.descriptor_uri
    )


def check_descriptor(entry: ShardEntry, desc: ShardDescriptor, where: str) -> ShardDescriptor:
    """`desc`, if it agrees with the manifest entry (size, sha256, record count, key); `where`
    names the descriptor in the `IntegrityError` raised otherwise."""
    mismatched = [
        f"{name} {a!r} in the descriptor, {b!r} in the manifest"
        for name, a, b in (
            ("size_bytes", desc.size_bytes, entry.size_bytes),
            ("sha256", desc.sha256, entry.sha256),
            ("record_count", desc.record_count, entry.record_count),
            ("key", desc.key, entry.key),
        )
        if a != b
    ]
    if mismatched:
        raise IntegrityError(f"{where}: differs from the manifest entry: {'; '.join(mismatched)}")
    return desc


#: What a block decodes to: its records, or its columns.
Decoded = TypeVar("Decoded", bound=Sized)


@dataclass(frozen=True)
class DescriptorMismatch:
    """A manifest entry that its completion descriptor does not back."""

    split: str
    key: str
    problem: str


def check_descriptors(storage: Storage, manifest: DataManifest, threads: int = 16) -> list[DescriptorMismatch]:
    """Every shard entry whose descriptor is missing, altered, or disagrees with it (split, key,
    format, size, sha256, record count). Reads the small descriptors only, never shard data."""
    entries = [(name, entry) for name, split in sorted(manifest.splits.items()) for entry in split.shards]

    def check(item: tuple[str, ShardEntry]) -> DescriptorMismatch | None:
        split, entry = item
        try:
            desc = read_descriptor(storage, entry)
        except (IntegrityError, ManifestError, ObjectNotFoundError) as exc:
            return DescriptorMismatch(split, entry.key, str(exc))
        if (desc.split, desc.data_format) != (split, manifest.data_format):
            return DescriptorMismatch(
                split,
                entry.key,
                f"{entry.descriptor_uri}: describes split {desc.split!r} in {desc.data_format}, "
                f"but the manifest lists it in split {split!r} in {manifest.data_format}",
            )
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(entries)))) as pool:
        return [m for m in pool.map(check, entries) if m is not None]


class ShardReader:
    """Reads one shard's blocks, verifying each block's SHA-256 before it is decoded. `storage`
    is a `Storage` or the custody storage of an approved dataset (which reads like one)."""

    def __init__(
        self,
        storage: ReadableStorage,
        entry: ShardEntry,
        data_format: str,
        descriptor: ShardDescriptor | None = None,
    ):
        self.storage = storage
        self.entry = entry
        self.format = get_format(data_format)
        self.descriptor = descriptor or read_descriptor(storage, entry)
        if self.descriptor.data_format != data_format:
            raise IntegrityError(
                f"{entry.uri}: descriptor says {self.descriptor.data_format}, the manifest says {data_format}"
            )
        self._context: Any = None

    @property
    def blocks(self) -> list[BlockRef]:
        return self.descriptor.blocks

    def _decode_context(self) -> Any:
        if self._context is None:
            trailer = self.descriptor.trailer
            data = None
            if trailer is not None:
                data = self.storage.get_range(self.entry.uri, trailer.offset, trailer.offset + trailer.length)
                self._verify(data, trailer.sha256, "footer")
            self._context = self.format.open_context(data, self.descriptor.size_bytes)
        return self._context

    def _verify(self, data: bytes | memoryview, expected: str, what: str) -> None:
        if hashlib.sha256(data).hexdigest() != expected:
            raise IntegrityError(
                f"{self.entry.uri}: {what} sha256 does not match the descriptor; the shard was changed after "
                "it was published: nothing from it is used"
            )

    def iter_block_bytes(self, indices: Sequence[int] | None = None) -> Iterator[tuple[int, bytes]]:
        """Verified raw bytes of the chosen blocks (all by default), in the given order.

        Runs of consecutive blocks are streamed as one ranged read.
        """
        blocks = self.blocks
        order = list(range(len(blocks))) if indices is None else list(indices)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and order[j + 1] == order[j] + 1:
                j += 1
            run = order[i : j + 1]
            yield from self._stream_run(run)
            i = j + 1

    def _stream_run(self, run: list[int]) -> Iterator[tuple[int, bytes]]:
        blocks = self.blocks
        start = blocks[run[0]].offset
        end = blocks[run[-1]].offset + blocks[run[-1]].length
        if len(run) == 1:
            # One ranged read is the block itself: verified and handed on without a copy.
            data = self.storage.get_range(self.entry.uri, start, end)
            self._verify(data, blocks[run[0]].sha256, f"block {run[0]}")
            yield run[0], data
            return
        chunks = self.storage.stream(self.entry.uri, start=start, end=end, chunk_size=STREAM_CHUNK)
        buf = bytearray()
        pos = start
        k = 0
        for chunk in chunks:
            buf.extend(chunk)
            while k < len(run):
                b = blocks[run[k]]
                skip = b.offset - pos
                if len(buf) < skip + b.length:
                    break
                with memoryview(buf) as view:  # one copy out of the buffer, not two
                    data = bytes(view[skip : skip + b.length])
                del buf[: skip + b.length]
                pos = b.offset + b.length
                self._verify(data, b.sha256, f"block {run[k]}")
                yield run[k], data
                k += 1
        if k < len(run):
            raise IntegrityError(
                f"{self.entry.uri}: the object ended before block {run[k]}; it is truncated: re-publish the shard"
            )

    def read_blocks(self, run: Sequence[int], clock: Clock | None = None) -> list[tuple[int, memoryview]]:
        """Verified bytes of the blocks `run`, read in one `Storage.get_ranges` call (an object
        store coalesces neighbours into one request), as views of the read buffers, not copies.

        `clock(stage, seconds)` is told the time spent reading ("fetch") and hashing ("verify").
        """
        blocks = self.blocks
        t0 = time.perf_counter()
        parts = self.storage.get_ranges(
            self.entry.uri, [(blocks[i].offset, blocks[i].offset + blocks[i].length) for i in run]
        )
        t1 = time.perf_counter()
        for i, data in zip(run, parts, strict=False):
            self._verify(data, blocks[i].sha256, f"block {i}")
        if clock is not None:
            clock("fetch", t1 - t0)
            clock("verify", time.perf_counter() - t1)
        return list(zip(run, parts, strict=False))

    def inflate(self, index: int, data: bytes | memoryview) -> Any:
        """The codec step of decoding verified block bytes; releases the GIL, so it suits read threads."""
        try:
            return self.format.inflate_block(data, index, self._decode_context())
        except DecodeError as exc:
            raise DecodeError(f"{self.entry.uri}: {exc}") from None

    def records(self, index: int, inflated: Any) -> list[dict[str, Any]]:
        """The records of an inflated block, as many as its descriptor declares (`check_count`);
        holds the GIL, so run it where the records are consumed."""
        return self._decoded(self.format.block_records, index, inflated)

    def columns(self, index: int, inflated: Any) -> ColumnBlock:
        """`records`, as columns (`ShardFormat.block_columns`), with the same count check."""
        return self._decoded(self.format.block_columns, index, inflated)

    def _decoded(self, decode: Callable[[Any, int], Decoded], index: int, inflated: Any) -> Decoded:
        """Block `index` decoded by `decode`, a decode error naming the shard, its count checked."""
        try:
            decoded = decode(inflated, index)
        except DecodeError as exc:
            raise DecodeError(f"{self.entry.uri}: {exc}") from None
        self.check_count(index, len(decoded))
        return decoded

    def check_count(self, index: int, decoded: int) -> None:
        """Refuse block `index` unless it decoded to the record count its descriptor declares.

        Positions and exclusions are planned from the declared counts (which sum to the shard's
        total, see `ShardDescriptor`); a block's digest binds its bytes, not where a descriptor
        says its records begin, so a moved boundary shows only here, as the block is decoded."""
        declared = self.blocks[index].record_count
        if decoded != declared:
            raise IntegrityError(
                f"{self.entry.uri}: shard {self.entry.key} block {index} holds {decoded} records, its descriptor "
                f"declares {declared}; the descriptor does not describe the data: do not train on this shard"
            )

    def decode(self, index: int, data: bytes) -> list[dict[str, Any]]:
        """Decode verified block bytes."""
        return self.records(index, self.inflate(index, data))

    def iter_blocks(self, indices: Sequence[int] | None = None) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """(block index, records) for the chosen blocks, each verified before decoding."""
        for index, data in self.iter_block_bytes(indices):
            yield index, self.decode(index, data)

    def iter_records(self) -> Iterator[dict[str, Any]]:
        for _, records in self.iter_blocks():
            yield from records


def iter_shard(
    data_format: str,
    shard: ShardEntry,
    *,
    storage: StorageSource | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield a published shard's records in order, each block verified before decoding.

    For deriving new datasets from old ones: pass ``manifest.data_format`` and one entry
    of ``manifest.splits[split].shards``. `storage`: a `TrainVault` or a `Storage` (default:
    local paths and memory:// only).
    """
    if not isinstance(shard, ShardEntry):
        raise TypeError(f"iter_shard reads a manifest's ShardEntry, not {type(shard).__name__}")
    reader = ShardReader(storage_or_default(storage), shard, data_format)
    yield from reader.iter_records()
