"""The component range materializer: declared ranges of packed records as isolated sequences.

A range at component offset ``c`` with ``n`` tokens emits ``n + (c > 0)`` rows. When
``c > 0``, row 0 is the token at ``c - 1`` of the same frame (context: ``loss_mask``
False, position 0) and the range's tokens follow at positions 1..n. When ``c == 0``, row
0 is the range's first token, context only (it has no causal row). Other rows take the
record's ``loss_mask``. ``target_row_indices[k]`` is the row before the k-th loss-bearing
row: the trainer's loss is CE(``logits[t]``, ``input_ids[t + 1]``) over those ``t``, and
``ce_valid`` is true for each. Nothing after a range enters an output or a digest; outputs
are fresh arrays, never views of the record.

``unpack`` yields one logical record per range; ``group`` one per packed record that has
ranges (records declaring none yield nothing), its ranges in ledger order under
``component_sequences`` with ``cu_seqlens``. Order: manifest, record, frame, range.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.components.custody import CheckedLedger, CompiledShard, check_read, open_ledger, read_mask, where
from trainvault.errors import CustodyError, IntegrityError
from trainvault.manifest import DataManifest, ShardDescriptor, ShardEntry
from trainvault.storage import Storage

MODES = ("unpack", "group")
_ISSUE = object()


class ComponentRangeMaterializer:
    """Materialises one split's approved component ledger (get one from
    ``ApprovedDataset.component_range_materializer``). Pass it to
    ``approved.split_data_loader(..., materializer=m)`` to batch its logical records."""

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
        storage: Storage,
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
        # What the loader's resume state binds: another ledger or mode counts other records.
        self.view_sha256 = sha256_hex(canonical_json({"ledger_sha256": self.ledger_sha256, "mode": mode}))
        return self

    def __repr__(self) -> str:
        return f"ComponentRangeMaterializer(split={self.split!r}, mode={self.mode!r}, ledger sha256={self.ledger_sha256})"

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

    def describe(self) -> str:
        """What this materializer yields, for people."""
        records = sum(len(s.records) for s in self._shards.values())
        ranges = sum(len(r.ranges) for s in self._shards.values() for r in s.records)
        rows = sum(hi - lo for s in self._shards.values() for r in s.records for *_, lo, hi, _ in r.ranges)
        logical = sum(sum(self._record_counts(s)) for s in self._shards.values())
        limit = f", at most {self.max_rows} rows a range" if self.max_rows is not None else ""
        return (
            f"component ranges of split {self.split!r}, mode {self.mode!r}: {logical:,} logical records from "
            f"{ranges:,} ranges ({rows:,} rows{limit}) of {records:,} packed records in {len(self._shards)} shard(s); "
            f"ledger {self.ledger_uri} sha256 {self.ledger_sha256}, data manifest sha256 {self.manifest_sha256}"
        )

    # -- materialising ----------------------------------------------------------------

    def expand(self, entry: ShardEntry, first_record: int, records: list[Any]) -> list[dict[str, Any]]:
        """The logical records of a verified block whose first record is `first_record`.

        The whole block is checked before anything is returned, so a refused range yields nothing.
        """
        shard = self._shard(entry)
        out: list[dict[str, Any]] = []
        for k, record in enumerate(records):
            sequences = materialize_record(shard, first_record + k, record)
            if self.mode == "unpack":
                out.extend(sequences)
            elif sequences:
                out.append(group_sequences(sequences))
        return out

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """Every logical record of the split in order, read through custody (blocks verified)."""
        from trainvault.reader import ShardReader

        for entry, desc in zip(self._entries, self._descriptors):
            counts = self.block_counts(entry, desc)
            wanted = [j for j, n in enumerate(counts) if n]
            if not wanted:
                continue
            reader = ShardReader(self._storage, entry, self._data_format, desc)
            for j, records in reader.iter_blocks(wanted):
                yield from self.expand(entry, desc.blocks[j].first_record, records)


#: Cached constants that outputs are copied from (never handed out): aranges for
#: positions and targets, all-true rows for masks and ``ce_valid``. Grown on demand.
_CACHE: dict[str, Any] = {}


def _constants(rows: int) -> tuple[Any, Any, Any]:
    """int32 and int64 aranges and an all-true bool array of at least `rows` entries."""
    import numpy as np

    cached = _CACHE.get("constants")
    if cached is None or len(cached[0]) < rows:
        size = max(rows, 8192 + 1, 0 if cached is None else 2 * len(cached[0]))
        cached = _CACHE["constants"] = (
            np.arange(size, dtype=np.int32), np.arange(-1, size - 1, dtype=np.int64), np.ones(size, dtype=np.bool_),
        )
        for a in cached:
            a.flags.writeable = False
    return cached


def materialize_record(shard: CompiledShard, index: int, record: Any) -> list[dict[str, Any]]:
    """Record `index` of `shard` as unpack records, in ledger order, after the custody checks.

    Every range's digest is checked before anything is returned, so a refused range (or a
    later one of the record) yields nothing of the record."""
    import numpy as np

    if index >= len(shard.records):
        raise CustodyError(
            f"record {index} of shard {shard.key} is not in the ledger's {len(shard.records)} records; the shard "
            "does not match its ledger"
        )
    expected = shard.records[index]
    ids = check_read(shard.key, index, expected, record)
    ranges = expected.ranges
    if not ranges:
        return []
    mask = read_mask(where(shard.key, index, expected.packed_record_id), record, expected.token_count)
    pid = expected.packed_record_id
    positions, shifted, true = _constants(max(hi - lo for *_, lo, hi, _ in ranges))
    sha256 = hashlib.sha256
    out = []
    for rid, cid, c, n, lo, hi, digest in ranges:
        rows = ids[lo:hi].copy()  # a copy: never a view of the record
        if sha256(rows).hexdigest() != digest:  # hashed from the fresh copy, still in cache
            raise IntegrityError(
                f"{where(shard.key, index, pid, rid)}: its {hi - lo} tokens do not match the ledger's sha256; "
                "the tokens or the ledger changed: nothing of the range is used. Rebuild the ledger and approve again"
            )
        m = hi - lo
        if mask is None:  # all true: every row after the first bears loss, row t's target is t - 1
            loss = true[:m].copy()
            loss[0] = False
            targets = shifted[1:m].copy()
            valid = true[: m - 1].copy()
        else:
            loss = mask[lo:hi].copy()
            loss[0] = False  # the predecessor, or the first token: context only
            targets = np.flatnonzero(loss).astype(np.int64, copy=False)
            targets -= 1
            valid = true[: len(targets)].copy()
        out.append({
            "packed_record_id": pid,
            "component_id": cid,
            "range_id": rid,
            "component_range": (c, c + n),
            "record_range": (hi - n, hi),  # record positions of the range's own tokens
            "input_ids": rows,
            "position_ids": positions[:m].copy(),
            "loss_mask": loss,
            "target_row_indices": targets,
            "ce_valid": valid,
        })
    return out


def group_sequences(sequences: list[dict[str, Any]]) -> dict[str, Any]:
    """One packed record's unpack records as a group record (``cu_seqlens`` from one cumsum)."""
    import numpy as np

    cu = np.zeros(len(sequences) + 1, dtype=np.int32)
    np.cumsum([len(s["input_ids"]) for s in sequences], out=cu[1:])
    return {
        "packed_record_id": sequences[0]["packed_record_id"],
        "component_sequences": sequences,
        "cu_seqlens": cu,
    }


def open_materializer(
    *,
    storage: Storage,
    custody: Storage,
    bindings: Mapping[str, Any],
    manifest: DataManifest,
    manifest_sha256: str,
    split: str,
    mode: str,
    max_rows: int | None,
) -> ComponentRangeMaterializer:
    """Check `split`'s bound ledger against the approved `manifest` and make its materializer
    (internal: ``ApprovedDataset.component_range_materializer`` calls it). `storage` reads the
    ledger (bound by sha256), `custody` the approved shards and descriptors."""
    from trainvault.errors import SelectionError
    from trainvault.reader import read_descriptor

    if mode not in MODES:
        raise ValueError(f"mode must be 'unpack' (one record per range) or 'group' (one per packed record), got {mode!r}")
    if max_rows is not None and (not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 1):
        raise ValueError(f"max_rows must be a positive int or None, got {max_rows!r}")
    if split not in manifest.splits:
        raise SelectionError(f"split {split!r} is not in the approved manifest; splits: {', '.join(sorted(manifest.splits))}")
    shards = manifest.splits[split].shards
    checked = open_ledger(storage, bindings, manifest_sha256, split, shards, max_rows)
    descriptors = [read_descriptor(custody, entry) for entry in shards]
    return ComponentRangeMaterializer._issue(
        _ISSUE, checked=checked, mode=mode, max_rows=max_rows, manifest_sha256=manifest_sha256, storage=custody,
        data_format=manifest.data_format, shards=shards, descriptors=descriptors,
    )


__all__ = ["MODES", "ComponentRangeMaterializer", "group_sequences", "materialize_record", "open_materializer"]
