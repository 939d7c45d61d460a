"""Build a split's component ledger from the committed, verified shards and a declaration.

`declare(record)` says, per packed record, which component pieces (frames) it holds and
which ranges of them to train on. The builder reads every shard through `ShardReader`
(each block verified before decoding), checks each declaration with the same rules the
materializer applies, hashes exactly the tokens each range will emit, and writes the
parts, then the top, create-only. Building again with the same declaration is a no-op;
a different one is a `ConflictError`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from trainvault.canonical import sha256_hex
from trainvault.components.custody import CompiledRecord, check_read, check_record
from trainvault.components.ledger import (
    ComponentLedger,
    ComponentLedgerPart,
    LedgerFrame,
    LedgerPartRef,
    LedgerRange,
    LedgerRecord,
    ledger_sidecar_name,
    ledger_uri,
    part_relative_uri,
    range_id,
    token_digest,
)
from trainvault.documents import describe_validation_error
from trainvault.errors import ManifestError, SelectionError
from trainvault.manifest import DataManifest
from trainvault.reader import ShardReader
from trainvault.storage import Storage, join_uri, normalize_uri, parent_uri


@dataclass(frozen=True)
class Frame:
    """A component piece in a packed record: record tokens ``[start, end)`` are component
    tokens from `component_start` (> 0 for a later piece of a cut document). `ranges` are
    ``(component_offset, length)`` pairs to train on."""

    component_id: str
    start: int
    end: int
    component_start: int = 0
    ranges: tuple[tuple[int, int], ...] = field(default_factory=tuple)


def split_frame(frame: Frame, max_rows: int) -> Frame:
    """`frame` with its ranges (the whole frame when it declares none) cut into consecutive
    ranges of at most `max_rows` rows. A continuation frame's whole-frame range starts one
    token in: its first token's predecessor is in another record, so it is context only."""
    if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 2:
        raise ValueError(f"max_rows must be an int >= 2 (a mid-component range needs its predecessor row), got {max_rows!r}")
    if frame.ranges:
        spans = list(frame.ranges)
    else:
        first = frame.component_start + (1 if frame.component_start > 0 else 0)
        spans = [(first, frame.component_start + frame.end - frame.start - first)]
    out: list[tuple[int, int]] = []
    for c, n in spans:
        end = c + n
        while c < end:
            take = min(end - c, max_rows - (1 if c > 0 else 0))  # a mid-component range spends a row on its predecessor
            out.append((c, take))
            c += take
    return replace(frame, ranges=tuple(out))


@dataclass(frozen=True)
class Binding:
    """A written ledger: its sidecar name, URI and sha256; `written` is False when an
    identical ledger was already there. Bind it: ``ApprovalRequest(sidecars=b.sidecars())``."""

    name: str
    uri: str
    sha256: str
    written: bool

    def sidecars(self) -> dict[str, Any]:
        """``{name: ArtifactRef}`` for `ApprovalRequest.sidecars`."""
        from trainvault.approval.request import ArtifactRef

        return {self.name: ArtifactRef(uri=self.uri, sha256=self.sha256)}


Declare = Callable[[Mapping[str, Any]], Iterable[Frame]]


def ledger_record(shard_key: str, index: int, record: Any, frames: Iterable[Frame]) -> LedgerRecord:
    """Record `index`'s ledger entry from its declared frames: checked, each range's digest computed."""
    pid = record.get("packed_record_id") if isinstance(record, Mapping) else None
    if not isinstance(pid, str) or not pid:
        raise ManifestError(f"record {index} of shard {shard_key} has no packed_record_id string; packed records carry one")
    ids_any = record.get("input_ids")
    token_count = len(ids_any) if ids_any is not None else -1
    if token_count < 0:
        raise ManifestError(f"record {index} ({pid!r}) of shard {shard_key} has no input_ids")
    out_frames = []
    try:
        for f in frames:
            if not isinstance(f, Frame):
                raise TypeError(f"declare() must return Frame objects, got {type(f).__name__} for record {index} ({pid!r})")
            cid = str(f.component_id)
            ranges = [(operator.index(c), operator.index(n)) for c, n in f.ranges]
            out_frames.append(LedgerFrame(
                component_id=cid, start=operator.index(f.start), end=operator.index(f.end),
                component_start=operator.index(f.component_start),
                ranges=[LedgerRange(range_id=range_id(pid, cid, c), component_offset=c, length=n, sha256="0" * 64)
                        for c, n in ranges],
            ))
        draft = LedgerRecord(record_index=index, packed_record_id=pid, token_count=token_count, frames=out_frames)
    except ValidationError as exc:
        raise ManifestError(
            f"record {index} ({pid!r}) of shard {shard_key}: bad declaration: {describe_validation_error(exc)}"
        ) from None
    compiled = check_record(draft, shard_key)
    ids = check_read(shard_key, index, CompiledRecord(pid, token_count, compiled), record)
    digests = iter([token_digest(ids[lo:hi]) for _, _, _, _, lo, hi, _ in compiled])
    frames_out = [
        f.model_copy(update={"ranges": [r.model_copy(update={"sha256": next(digests)}) for r in f.ranges]})
        for f in out_frames
    ]
    return draft.model_copy(update={"frames": frames_out})


def build_component_ledger(storage: Storage, manifest_uri: str, *, split: str, declare: Declare) -> Binding:
    """Build, write and return the binding of `split`'s component ledger (see the module doc)."""
    from trainvault.client import resolve_manifest_uris
    from trainvault.reader import read_descriptor

    manifest_uri = normalize_uri(manifest_uri)
    raw = storage.get_document(manifest_uri)
    manifest_sha256 = sha256_hex(raw)
    manifest = resolve_manifest_uris(DataManifest.from_json_bytes(raw, source=manifest_uri), parent_uri(manifest_uri))
    if split not in manifest.splits:
        raise SelectionError(f"split {split!r} is not in {manifest_uri}; published splits: {', '.join(sorted(manifest.splits))}")
    top_uri = ledger_uri(manifest_uri, split)
    parts: list[tuple[str, bytes, LedgerPartRef]] = []
    for entry in manifest.splits[split].shards:
        reader = ShardReader(storage, entry, manifest.data_format, read_descriptor(storage, entry))
        records = [ledger_record(entry.key, i, rec, declare(rec)) for i, rec in enumerate(reader.iter_records())]
        if len(records) != entry.record_count:
            raise ManifestError(f"shard {entry.key} yielded {len(records)} records, the manifest says {entry.record_count}")
        part = ComponentLedgerPart(split=split, shard_key=entry.key, records=records)
        data = part.to_json_bytes()
        rel = part_relative_uri(entry.key)
        parts.append((join_uri(parent_uri(top_uri), rel), data, LedgerPartRef(
            shard_key=entry.key, uri=rel, sha256=sha256_hex(data), record_count=len(records),
            range_count=part.range_count())))
    top = ComponentLedger(data_manifest_sha256=manifest_sha256, split=split, parts=[p for _, _, p in parts])
    for uri, data, _ in parts:
        storage.put_create(uri, data)
    data = top.to_json_bytes()
    written = storage.put_create(top_uri, data)
    return Binding(ledger_sidecar_name(split), top_uri, sha256_hex(data), written)


__all__ = ["Binding", "Frame", "build_component_ledger", "split_frame"]
