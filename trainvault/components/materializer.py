"""The component range materializer: declared ranges of packed records as isolated sequences.

A range at component offset ``c`` with ``n`` tokens emits ``n + (c > 0)`` rows. When
``c > 0``, row 0 is the token at ``c - 1`` of the same frame (context: ``loss_mask``
False, position 0) and the range's tokens follow at positions 1..n. When ``c == 0``, row
0 is the range's first token, context only (it has no causal row). Other rows take the
record's ``loss_mask``. ``target_row_indices[k]`` is the row before the k-th loss-bearing
row: the trainer's loss is CE(``logits[t]``, ``input_ids[t + 1]``) over those ``t``, and
``ce_valid`` is true for each. Nothing after a range enters an output.

``unpack`` yields one logical record per range; ``group`` one per packed record that has
ranges (records declaring none yield nothing), its ranges in ledger order under
``component_sequences`` with ``cu_seqlens``. Order: manifest, record, frame, range.

The gate checked every range's tokens against its sha256 when it approved the ledger;
each block read here is checked against the approved descriptor, so ranges are not
hashed again. Records reach a user as fresh arrays, never views of the packed record
(`iter_records`, or a loader whose collate is not ``collate_sequences``); the loader hands
``collate_sequences`` lazy ranges (`LazyRanges`) that it writes straight into its batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.components.collate import collate_sequences
from trainvault.components.custody import (
    CheckedLedger,
    CompiledShard,
    check_max_rows,
    read_record,
)
from trainvault.components.ledger import ledger_sidecar_name
from trainvault.components.sequences import LazyRanges, owned_sequences
from trainvault.errors import ApprovalError, ConfigurationError, CustodyError, SelectionError
from trainvault.publication.manifest import DataManifest, ShardDescriptor, ShardEntry
from trainvault.storage.readable import ReadableStorage

MODES = ("unpack", "group")
_ISSUE = object()


class ComponentRangeMaterializer:
    """Materialises one split's approved component ledger (get one from
    ``ApprovedDataset.component_range_materializer``). Pass it to
    ``approved.loader_factory(..., materializer=m)`` to batch its logical records."""

    split: str
    mode: str
    max_rows: int | None
    manifest_sha256: str
    ledger_uri: str
    ledger_sha256: str
    #: What the loader's resume state binds: another ledger or mode counts other records.
    view_sha256: str
    _shards: dict[str, CompiledShard]
    _storage: ReadableStorage
    _data_format: str
    _entries: tuple[ShardEntry, ...]
    _descriptors: tuple[ShardDescriptor, ...]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("get a ComponentRangeMaterializer from ApprovedDataset.component_range_materializer(split)")

    @classmethod
    def _issue(
        cls,
        token: object,
        *,
        checked: CheckedLedger,
        mode: str,
        max_rows: int | None,
        manifest_sha256: str,
        storage: ReadableStorage,
        data_format: str,
        shards: Sequence[ShardEntry],
        descriptors: Sequence[ShardDescriptor],
    ) -> ComponentRangeMaterializer:
        if token is not _ISSUE:
            raise TypeError("a ComponentRangeMaterializer is issued by an ApprovedDataset only")
        self = object.__new__(cls)
        self.split = checked.ledger.split
        self.mode = mode
        self.max_rows = max_rows
        self.manifest_sha256 = manifest_sha256
        self.ledger_uri = checked.uri
        self.ledger_sha256 = checked.sha256
        self._shards = {s.key: s for s in checked.shards}
        self._storage = storage
        self._data_format = data_format
        self._entries = tuple(shards)
        self._descriptors = tuple(descriptors)
        self.view_sha256 = sha256_hex(canonical_json({"ledger_sha256": self.ledger_sha256, "mode": mode}))
        return self

    def __repr__(self) -> str:
        return (
            f"ComponentRangeMaterializer(split={self.split!r}, mode={self.mode!r}, ledger sha256={self.ledger_sha256})"
        )

    # -- counts (from the ledger alone) ----------------------------------------------

    def _record_counts(self, shard: CompiledShard) -> list[int]:
        if self.mode == "unpack":
            return [len(r.ranges) for r in shard.records]
        return [1 if r.ranges else 0 for r in shard.records]

    def _shard(self, entry: ShardEntry) -> CompiledShard:
        shard = self._shards.get(entry.key)
        if shard is None or shard.uri != entry.uri:
            raise CustodyError(
                f"shard {entry.key} ({entry.uri}) is not a shard of the approved split {self.split!r} this ledger "
                "covers; load the split the materializer was made for"
            )
        return shard

    def block_counts(self, entry: ShardEntry, descriptor: ShardDescriptor) -> list[int]:
        """Logical records in each block of a shard, from the ledger alone (no data read)."""
        per_record = self._record_counts(self._shard(entry))
        return [sum(per_record[b.first_record : b.first_record + b.record_count]) for b in descriptor.blocks]

    @property
    def logical_records(self) -> int:
        """Logical records of the split (ranges, or packed records with ranges): the positions a
        loader with this materializer counts, and the total to size a `PositionBudget` with."""
        return sum(sum(self._record_counts(s)) for s in self._shards.values())

    def describe(self) -> str:
        """What this materializer yields, for people."""
        records = sum(len(s.records) for s in self._shards.values())
        ranges = sum(len(r.ranges) for s in self._shards.values() for r in s.records)
        rows = sum(g.row_hi - g.row_lo for s in self._shards.values() for r in s.records for g in r.ranges)
        logical = self.logical_records
        limit = f", at most {self.max_rows} rows a range" if self.max_rows is not None else ""
        return (
            f"component ranges of split {self.split!r}, mode {self.mode!r}: {logical:,} logical records from "
            f"{ranges:,} ranges ({rows:,} rows{limit}) of {records:,} packed records in {len(self._shards)} shard(s); "
            f"ledger {self.ledger_uri} sha256 {self.ledger_sha256}, data manifest sha256 {self.manifest_sha256}"
        )

    # -- materialising ----------------------------------------------------------------

    def expand(self, entry: ShardEntry, first_record: int, records: list[Any]) -> list[LazyRanges]:
        """The logical records of a verified block whose first record is `first_record`, as lazy
        ranges (`LazyRanges.owned` makes them records). The whole block is checked first."""
        shard = self._shard(entry)
        out: list[LazyRanges] = []
        for k, record in enumerate(records):
            pid, ids, mask, ranges = read_record(shard, first_record + k, record)
            if self.mode == "group":
                out.extend([LazyRanges(pid, ids, mask, ranges, True)] if ranges else [])
            else:
                out.extend(LazyRanges(pid, ids, mask, (r,), False) for r in ranges)
        return out

    def collate(self, collate_fn: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """What the loader collates logical records with: ``collate_sequences`` takes lazy ranges;
        any other collate gets owned records (fresh arrays, nothing shared)."""
        return collate_fn if collate_fn is collate_sequences else _Owned(collate_fn)

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """Every logical record of the split in order (fresh arrays), read through custody (blocks verified)."""
        from trainvault.publication.reader import ShardReader

        for entry, desc in zip(self._entries, self._descriptors, strict=False):
            counts = self.block_counts(entry, desc)
            wanted = [j for j, n in enumerate(counts) if n]
            if not wanted:
                continue
            reader = ShardReader(self._storage, entry, self._data_format, desc)
            for j, records in reader.iter_blocks(wanted):
                yield from (r.owned() for r in self.expand(entry, desc.blocks[j].first_record, records))


class _Owned:
    """A user's collate, given owned records (picklable into DataLoader workers when it is)."""

    def __init__(self, collate_fn: Callable[[list[Any]], Any]):
        self.collate_fn = collate_fn

    def __call__(self, batch: list[LazyRanges]) -> Any:
        return self.collate_fn([r.owned() for r in batch])


def materialize_record(shard: CompiledShard, index: int, record: Any) -> list[dict[str, Any]]:
    """Record `index` of `shard` as unpack records (fresh arrays), in ledger order, after the custody checks."""
    pid, ids, mask, ranges = read_record(shard, index, record)
    return owned_sequences(pid, ids, mask, ranges) if ranges else []


def open_materializer(
    *,
    checked: CheckedLedger | None,
    custody: ReadableStorage,
    manifest: DataManifest,
    manifest_sha256: str,
    split: str,
    mode: str,
    max_rows: int | None,
) -> ComponentRangeMaterializer:
    """The materializer of `split`'s ledger, `checked` by the gate against the approved
    `manifest` (internal: ``ApprovedDataset.component_range_materializer`` calls it).
    `custody` reads the approved shards and descriptors."""
    from trainvault.publication.reader import parse_descriptor

    if mode not in MODES:
        raise ConfigurationError(
            f"mode must be 'unpack' (one record per range) or 'group' (one per packed record), got {mode!r}"
        )
    if max_rows is not None and (not isinstance(max_rows, int) or isinstance(max_rows, bool)):
        raise TypeError(f"max_rows must be an int or None, got {type(max_rows).__name__}")
    if max_rows is not None and max_rows < 1:
        raise ConfigurationError(f"max_rows must be a positive int or None, got {max_rows!r}")
    if split not in manifest.splits:
        raise SelectionError(
            f"split {split!r} is not in the approved manifest; splits: {', '.join(sorted(manifest.splits))}"
        )
    shards = manifest.splits[split].shards
    if checked is None:
        raise ApprovalError(
            f"the approval binds no component ledger for split {split!r} (no sidecar {ledger_sidecar_name(split)!r}); "
            "build one with TrainVault.build_component_ledger and bind it: ApprovalRequest(sidecars=binding.sidecars())"
        )
    if max_rows is not None:
        check_max_rows(checked, max_rows)
    # Custody serves each descriptor from the bytes the gate hashed; it has no bounded
    # `get_document` because those bytes were already read under the gate's bounds.
    descriptors = [parse_descriptor(entry, custody.get(entry.descriptor_uri)) for entry in shards]
    return ComponentRangeMaterializer._issue(
        _ISSUE,
        checked=checked,
        mode=mode,
        max_rows=max_rows,
        manifest_sha256=manifest_sha256,
        storage=custody,
        data_format=manifest.data_format,
        shards=shards,
        descriptors=descriptors,
    )


__all__ = [
    "MODES",
    "ComponentRangeMaterializer",
    "materialize_record",
    "open_materializer",
]
