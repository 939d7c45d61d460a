"""The custody checks of a component ledger: what is refused, with which error.

At construction (`open_ledger`): the ledger must be the approval's sidecar for this split
and manifest (`ApprovalError`), every part must match its digest (`IntegrityError`), every
shard of the approved split must be listed once, every record once, frames and ranges
must fit (`ManifestError`), and each range's predecessor token must lie in its own frame
and each record index in its shard (`CustodyError`). The gate runs these when it approves
the ledger, and then, for every record (`check_read`): the stored record must be the one
the ledger describes (`CustodyError`), and each range's tokens must match their digest
(`IntegrityError`, `trainvault.components.verify`). Later reads repeat `check_read` only.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainvault.canonical import sha256_hex
from trainvault.components.ledger import (
    ComponentLedger,
    ComponentLedgerPart,
    LedgerFrame,
    LedgerRecord,
    ledger_sidecar_name,
    range_id,
)
from trainvault.errors import ApprovalError, CustodyError, IntegrityError, ManifestError
from trainvault.publication.manifest import ShardEntry
from trainvault.storage import Storage
from trainvault.uris import normalize_uri, parent_uri, resolve_uri


@dataclass(frozen=True, slots=True)
class CompiledRange:
    """One range, compiled for reading. Rows ``[row_lo, row_hi)`` are in record coordinates,
    the predecessor token included."""

    range_id: str
    component_id: str
    component_offset: int
    length: int
    row_lo: int
    row_hi: int
    sha256: str


@dataclass(frozen=True)
class CompiledRecord:
    packed_record_id: str
    token_count: int
    ranges: tuple[CompiledRange, ...]


@dataclass(frozen=True)
class CompiledShard:
    """A shard's part, checked: its records in record order."""

    key: str
    uri: str
    part_uri: str
    records: tuple[CompiledRecord, ...]


@dataclass(frozen=True)
class CheckedLedger:
    uri: str
    sha256: str
    ledger: ComponentLedger
    shards: tuple[CompiledShard, ...]


def where(shard_key: str, record_index: int, packed_record_id: str, rid: str | None = None) -> str:
    """How errors name a range, record and shard."""
    head = f"range {rid} of " if rid is not None else ""
    return f"{head}record {record_index} ({packed_record_id!r}) of shard {shard_key}"


def rows_of(component_offset: int, length: int) -> int:
    """Rows a range emits: its tokens plus the predecessor when it starts mid-component."""
    return length + (1 if component_offset > 0 else 0)


def check_record(rec: LedgerRecord, shard_key: str, max_rows: int | None = None) -> tuple[CompiledRange, ...]:
    """Check one record's frames and ranges; return its ranges compiled for reading.

    Shared by the builder and the materializer, so both refuse the same declarations.
    """
    _check_frames(rec, shard_key)
    out: list[CompiledRange] = []
    seen: set[str] = set()
    for f in rec.frames:
        out.extend(_compile_frame(rec, f, shard_key, max_rows, seen))
    return tuple(out)


def _check_frames(rec: LedgerRecord, shard_key: str) -> None:
    """Each frame holds tokens of the record, and no two frames overlap."""
    frames = sorted(rec.frames, key=lambda f: (f.start, f.end))
    prev = None
    for f in frames:
        at = (
            where(shard_key, rec.record_index, rec.packed_record_id)
            + f", frame {f.component_id!r} [{f.start}, {f.end})"
        )
        if f.end <= f.start:
            raise ManifestError(f"{at}: a frame must hold at least one token; fix the declaration")
        if f.end > rec.token_count:
            raise ManifestError(f"{at} runs past the record's {rec.token_count} tokens; fix the declaration")
        if prev is not None and f.start < prev.end:
            raise ManifestError(
                f"{at} overlaps frame {prev.component_id!r} [{prev.start}, {prev.end}): a token belongs to one "
                "component; fix the declaration"
            )
        prev = f


def _compile_frame(
    rec: LedgerRecord, f: LedgerFrame, shard_key: str, max_rows: int | None, seen: set[str]
) -> list[CompiledRange]:
    """One frame's ranges, checked (ids, bounds, predecessor, rows, overlaps) and compiled.

    `seen` holds the range ids of the record's earlier frames; this frame's are added.
    """
    comp_end = f.component_start + (f.end - f.start)
    out: list[CompiledRange] = []
    for r in f.ranges:
        c, n = r.component_offset, r.length
        at = where(shard_key, rec.record_index, rec.packed_record_id, r.range_id)
        expected = range_id(rec.packed_record_id, f.component_id, c)
        if r.range_id != expected or r.range_id in seen:
            raise ManifestError(
                f"{at}: range ids are '<record>:<component>:<offset>' and unique, expected {expected!r}; "
                "rebuild the ledger with build_component_ledger"
            )
        seen.add(r.range_id)
        if c < f.component_start or c + n > comp_end:
            raise ManifestError(
                f"{at}: component tokens [{c}, {c + n}) lie outside its frame {f.component_id!r}, which holds "
                f"component tokens [{f.component_start}, {comp_end}); fix the declaration"
            )
        if c > 0 and c - 1 < f.component_start:
            raise CustodyError(
                f"{at}: its predecessor token (component offset {c - 1}) is not in its frame "
                f"{f.component_id!r} (component tokens from {f.component_start}): it is in another record, so "
                "custody of it is not proven. Start the range one token later (split_frame does)"
            )
        rows = rows_of(c, n)
        if max_rows is not None and rows > max_rows:
            raise too_many_rows(at, rows, max_rows)
        lo = f.start + (c - f.component_start)
        out.append(CompiledRange(r.range_id, f.component_id, c, n, lo - (rows - n), lo + n, r.sha256))
    spans = sorted((r.component_offset, r.component_offset + r.length, r.range_id) for r in out)
    for (_, a1, ra), (b0, _, rb) in itertools.pairwise(spans):
        if b0 < a1:
            raise ManifestError(
                f"{where(shard_key, rec.record_index, rec.packed_record_id, rb)} overlaps range {ra}: a token "
                "would bear loss twice; fix the declaration"
            )
    return out


def too_many_rows(at: str, rows: int, max_rows: int) -> ManifestError:
    return ManifestError(
        f"{at}: {rows} rows exceed max_rows={max_rows}; declare shorter ranges (split_frame) or raise max_rows"
    )


def check_max_rows(checked: CheckedLedger, max_rows: int) -> None:
    """Refuse (`ManifestError`) the first range of a checked ledger with more than `max_rows` rows."""
    for shard in checked.shards:
        for index, rec in enumerate(shard.records):
            for r in rec.ranges:
                if r.row_hi - r.row_lo > max_rows:
                    raise too_many_rows(
                        where(shard.key, index, rec.packed_record_id, r.range_id), r.row_hi - r.row_lo, max_rows
                    )


def _resolve_part(top_uri: str, uri: str) -> str:
    return resolve_uri(uri, parent_uri(top_uri), absolute="refuse", where=top_uri)


def _read_bound(storage: Storage, uri: str, sha256: str, what: str) -> bytes:
    raw = storage.get_document(uri)
    got = sha256_hex(raw)
    if got != sha256:
        raise IntegrityError(
            f"{what} {uri} has sha256 {got}, it is bound as {sha256}: it changed after it was bound; do not train "
            "on it: rebuild the ledger and approve again"
        )
    return raw


def open_ledger(
    storage: Storage,
    bindings: Mapping[str, Any],
    manifest_sha256: str,
    split: str,
    shards: Sequence[ShardEntry],
) -> CheckedLedger:
    """Read `split`'s ledger bound by the approval and check it against the approved `shards`."""
    uri, sha256, ledger = _read_ledger(storage, bindings, manifest_sha256, split)
    approved = {s.key: s for s in shards}
    _check_listing(ledger, uri, split, approved, shards)
    compiled: list[CompiledShard] = []
    for p in ledger.parts:
        entry = approved[p.shard_key]
        part_uri = _resolve_part(uri, p.uri)
        part_raw = _read_bound(storage, part_uri, p.sha256, f"component ledger part of shard {p.shard_key}")
        part = ComponentLedgerPart.from_json_bytes(part_raw, source=part_uri)
        compiled.append(_check_part(part, p.record_count, p.range_count, entry, part_uri, split))
    return CheckedLedger(uri, sha256, ledger, tuple(compiled))


def _read_ledger(
    storage: Storage, bindings: Mapping[str, Any], manifest_sha256: str, split: str
) -> tuple[str, str, ComponentLedger]:
    """The ledger the approval binds for `split`: (uri, sha256, ledger), built for this manifest and split."""
    name = ledger_sidecar_name(split)
    ref = bindings.get(name)
    if ref is None:
        raise ApprovalError(
            f"the approval binds no component ledger for split {split!r} (no sidecar {name!r}); build one with "
            "TrainVault.build_component_ledger and bind it: ApprovalRequest(sidecars=binding.sidecars())"
        )
    uri = normalize_uri(ref.uri)
    raw = _read_bound(storage, uri, ref.sha256, f"component ledger (sidecar {name!r})")
    try:
        ledger = ComponentLedger.from_json_bytes(raw, source=uri)
    except ManifestError as exc:
        raise ApprovalError(f"sidecar {name!r} is not a component ledger ({exc}); bind the ledger's Binding") from None
    if ledger.data_manifest_sha256 != manifest_sha256:
        raise ApprovalError(
            f"component ledger {uri} was built for data manifest {ledger.data_manifest_sha256}, the approval binds "
            f"{manifest_sha256}: it is another dataset's ledger; build the ledger for this manifest and approve again"
        )
    if ledger.split != split:
        raise ApprovalError(
            f"component ledger {uri} is for split {ledger.split!r}, not {split!r}; bind that split's ledger"
        )
    return uri, ref.sha256, ledger


def _check_listing(
    ledger: ComponentLedger, uri: str, split: str, approved: Mapping[str, ShardEntry], shards: Sequence[ShardEntry]
) -> None:
    """The ledger lists every approved shard once, nothing else, in the manifest's order."""
    listed: set[str] = set()
    for p in ledger.parts:
        if p.shard_key not in approved:
            raise CustodyError(
                f"component ledger {uri} lists shard {p.shard_key}, which is not in the approved split {split!r}: "
                "its ranges are outside custody; rebuild the ledger for the approved manifest"
            )
        if p.shard_key in listed:
            raise ManifestError(
                f"component ledger {uri} lists shard {p.shard_key} twice: its records would be read twice"
            )
        listed.add(p.shard_key)
    missing = [k for k in approved if k not in listed]
    if missing:
        raise ManifestError(
            f"component ledger {uri} does not list shard {missing[0]} of split {split!r} ({len(missing)} missing): "
            "split records are missing; rebuild the ledger"
        )
    if [p.shard_key for p in ledger.parts] != [s.key for s in shards]:
        raise ManifestError(
            f"component ledger {uri} lists its parts out of the manifest's shard order; rebuild the ledger"
        )


def _check_part(
    part: ComponentLedgerPart,
    record_count: int,
    range_count: int,
    entry: ShardEntry,
    part_uri: str,
    split: str,
) -> CompiledShard:
    key = entry.key
    if part.split != split or part.shard_key != key:
        raise ManifestError(
            f"{part_uri} is the part of {part.split}/{part.shard_key}, the ledger binds it for {split}/{key}"
        )
    if len(part.records) != record_count or part.range_count() != range_count:
        raise ManifestError(
            f"{part_uri} holds {len(part.records)} records and {part.range_count()} ranges, the ledger says "
            f"{record_count} and {range_count}; the ledger is inconsistent: rebuild it"
        )
    n = entry.record_count
    by_index: list[CompiledRecord | None] = [None] * n
    for rec in part.records:
        if rec.record_index >= n:
            first = next((r.range_id for f in rec.frames for r in f.ranges), None)
            raise CustodyError(
                f"{where(key, rec.record_index, rec.packed_record_id, first)}: record_index {rec.record_index} is "
                f"outside the shard's {n} approved records; the ledger does not describe this shard: rebuild it"
            )
        if by_index[rec.record_index] is not None:
            raise ManifestError(
                f"{where(key, rec.record_index, rec.packed_record_id)} is listed twice in {part_uri}; rebuild the ledger"
            )
        by_index[rec.record_index] = CompiledRecord(rec.packed_record_id, rec.token_count, check_record(rec, key))
    absent = [i for i, r in enumerate(by_index) if r is None]
    if absent:
        raise ManifestError(
            f"record {absent[0]} of shard {key} ({len(absent)} records) is missing from {part_uri}: every split record "
            "is listed once (with no frames when nothing is trained on); rebuild the ledger"
        )
    return CompiledShard(key, entry.uri, part_uri, tuple(r for r in by_index if r is not None))


def check_read(shard_key: str, record_index: int, expected: CompiledRecord, record: Any) -> Any:
    """The record's tokens as int32 once it is proven to be the record the ledger describes."""
    import numpy as np

    first = expected.ranges[0].range_id if expected.ranges else None
    at = where(shard_key, record_index, expected.packed_record_id, first)
    if not isinstance(record, Mapping):
        raise CustodyError(f"{at}: the stored record is a {type(record).__name__}, not a packed record")
    got = record.get("packed_record_id")
    if got != expected.packed_record_id:
        raise CustodyError(
            f"{at}: the stored record's packed_record_id is {got!r}: the ledger describes another record; nothing "
            "of it is yielded. Rebuild the ledger from this manifest"
        )
    ids = record.get("input_ids")
    if isinstance(ids, np.ndarray):
        if ids.dtype != np.int32 or ids.ndim != 1:
            raise ManifestError(
                f"{at}: input_ids are {ids.dtype} with shape {ids.shape}; the ledger declares 1-D int32"
            )
        ids = ids.astype("<i4", copy=False)
    else:
        try:
            ids = np.asarray(ids, dtype="<i4")
        except (TypeError, ValueError, OverflowError):
            raise ManifestError(f"{at}: input_ids are not a list of int32 tokens") from None
        if ids.ndim != 1:
            raise ManifestError(f"{at}: input_ids are not a 1-D list of tokens")
    if len(ids) != expected.token_count:
        raise CustodyError(
            f"{at}: the stored record holds {len(ids)} tokens, the ledger {expected.token_count}: it describes "
            "another record; rebuild the ledger"
        )
    return ids


def read_mask(at: str, record: Mapping[str, Any], token_count: int) -> Any:
    """The record's loss mask as bool, or None when absent (all true)."""
    import numpy as np

    mask = record.get("loss_mask")
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (token_count,):
        raise ManifestError(f"{at}: loss_mask must be {token_count} bools, got {mask.dtype} with shape {mask.shape}")
    return mask


__all__ = [
    "CheckedLedger",
    "CompiledRecord",
    "CompiledShard",
    "check_max_rows",
    "check_read",
    "check_record",
    "open_ledger",
    "rows_of",
]


def read_record(shard: CompiledShard, index: int, record: Any) -> tuple[str, Any, Any, tuple[CompiledRange, ...]]:
    """Record `index` of `shard` after the custody checks: its id, int32 tokens, loss mask
    (None: all true) and compiled ranges. The tokens are the record's own array, not a copy."""
    if index >= len(shard.records):
        raise CustodyError(
            f"record {index} of shard {shard.key} is not in the ledger's {len(shard.records)} records; the shard "
            "does not match its ledger"
        )
    expected = shard.records[index]
    ids = check_read(shard.key, index, expected, record)
    if not expected.ranges:
        return expected.packed_record_id, ids, None, ()
    mask = read_mask(where(shard.key, index, expected.packed_record_id), record, expected.token_count)
    return expected.packed_record_id, ids, mask, expected.ranges
