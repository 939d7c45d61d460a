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
from trainvault.errors import ConfigurationError, ManifestError
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import ShardReader
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import join_uri, parent_uri


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
    if not isinstance(max_rows, int) or isinstance(max_rows, bool):
        raise TypeError(f"max_rows must be an int, got {type(max_rows).__name__}")
    if max_rows < 2:
        raise ConfigurationError(
            f"max_rows must be >= 2 (a mid-component range needs its predecessor row), got {max_rows}"
        )
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
class Binding(Referenced):
    """A written ledger: its reference (``.uri``, ``.sha256``) and sidecar name; `written` is False
    when an identical ledger was already there. Bind it: ``ApprovalRequest(sidecars=b.sidecars())``."""

    name: str
    written: bool

    def sidecars(self) -> dict[str, ObjectRef]:
        """``{name: ObjectRef}`` for `ApprovalRequest.sidecars`."""
        return {self.name: self.ref}


Declare = Callable[[Mapping[str, Any]], Iterable[Frame]]


def ledger_record(shard_key: str, index: int, record: Any, frames: Iterable[Frame]) -> LedgerRecord:
    """Record `index`'s ledger entry from its declared frames: checked, each range's digest computed."""
    pid = record.get("packed_record_id") if isinstance(record, Mapping) else None
    if not isinstance(pid, str) or not pid:
        raise ManifestError(
            f"record {index} of shard {shard_key} has no packed_record_id string; packed records carry one"
        )
    ids_any = record.get("input_ids")
    token_count = len(ids_any) if ids_any is not None else -1
    if token_count < 0:
        raise ManifestError(f"record {index} ({pid!r}) of shard {shard_key} has no input_ids")
    out_frames = []
    try:
        for f in frames:
            if not isinstance(f, Frame):
                raise TypeError(
                    f"declare() must return Frame objects, got {type(f).__name__} for record {index} ({pid!r})"
                )
            cid = str(f.component_id)
            ranges = [(operator.index(c), operator.index(n)) for c, n in f.ranges]
            out_frames.append(
                LedgerFrame(
                    component_id=cid,
                    start=operator.index(f.start),
                    end=operator.index(f.end),
                    component_start=operator.index(f.component_start),
                    ranges=[
                        LedgerRange(range_id=range_id(pid, cid, c), component_offset=c, length=n, sha256="0" * 64)
                        for c, n in ranges
                    ],
                )
            )
        draft = LedgerRecord(record_index=index, packed_record_id=pid, token_count=token_count, frames=out_frames)
    except ValidationError as exc:
        raise ManifestError(
            f"record {index} ({pid!r}) of shard {shard_key}: bad declaration: {describe_validation_error(exc)}"
        ) from None
    compiled = check_record(draft, shard_key)
    ids = check_read(shard_key, index, CompiledRecord(pid, token_count, compiled), record)
    digests = iter([token_digest(ids[r.row_lo : r.row_hi]) for r in compiled])
    frames_out = [
        f.model_copy(update={"ranges": [r.model_copy(update={"sha256": next(digests)}) for r in f.ranges]})
        for f in out_frames
    ]
    return draft.model_copy(update={"frames": frames_out})


def build_component_ledger(storage: StorageSource, manifest_uri: str, *, split: str, declare: Declare) -> Binding:
    """Build, write and return the binding of `split`'s component ledger (see the module doc)."""
    storage = storage_of(storage)
    from trainvault.publication.reader import read_descriptor

    publication = Publication.load(storage, manifest_uri)
    manifest, manifest_sha256 = publication.manifest, publication.sha256
    shards = publication.split(split).shards
    top_uri = ledger_uri(publication.uri, split)
    parts: list[tuple[str, bytes, LedgerPartRef]] = []
    for entry in shards:
        reader = ShardReader(storage, entry, manifest.data_format, read_descriptor(storage, entry))
        records = [ledger_record(entry.key, i, rec, declare(rec)) for i, rec in enumerate(reader.iter_records())]
        if len(records) != entry.record_count:
            raise ManifestError(
                f"shard {entry.key} yielded {len(records)} records, the manifest says {entry.record_count}"
            )
        part = ComponentLedgerPart(split=split, shard_key=entry.key, records=records)
        data = part.to_json_bytes()
        rel = part_relative_uri(entry.key)
        parts.append(
            (
                join_uri(parent_uri(top_uri), rel),
                data,
                LedgerPartRef(
                    shard_key=entry.key,
                    uri=rel,
                    sha256=sha256_hex(data),
                    record_count=len(records),
                    range_count=part.range_count(),
                ),
            )
        )
    top = ComponentLedger(data_manifest_sha256=manifest_sha256, split=split, parts=[p for _, _, p in parts])
    for uri, data, _ in parts:
        storage.put_create(uri, data)
    data = top.to_json_bytes()
    written = storage.put_create(top_uri, data)
    return Binding(ObjectRef(uri=top_uri, sha256=sha256_hex(data), size=len(data)), ledger_sidecar_name(split), written)


__all__ = ["Binding", "Frame", "build_component_ledger", "split_frame"]
