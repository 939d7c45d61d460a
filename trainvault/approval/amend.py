"""Writing an amendment: the approver takes records down from an approval, each with a reason.

What an amendment is and how a trainer's open checks the chain is
`trainvault.approval.amendment`; this module signs and publishes the next one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainvault.approval.amendment import (
    AMENDMENTS_FOLDER,
    REASONS,
    Amendment,
    Removal,
    amendment_statement,
    amendment_uri,
    check_removals,
    signed_chain,
)
from trainvault.approval.approved import ApprovedDataset
from trainvault.approval.dsse import sign_envelope
from trainvault.approval.keys import SigningKey, load_signing_keys
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import AmendmentError
from trainvault.publication.reader import iter_shard
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of


@dataclass(frozen=True)
class WrittenAmendment(Referenced):
    """An amendment as written: its reference, the document and the keys that signed it."""

    amendment: Amendment
    signers: tuple[str, ...]


def amend(
    storage: StorageSource,
    approved: ApprovedDataset,
    removals: Iterable[Mapping[str, Any]],
    *,
    signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | None = None,
    prefix: str | None = None,
) -> WrittenAmendment:
    """Sign and publish (create-only) the next amendment of `approved` (opened from its record),
    removing `removals`: mappings with ``split``, ``reason`` (one of `REASONS`), an optional
    ``note``, and either ``shard`` (manifest shard key) and ``record_index``, or ``record_id``
    (the record's ``id`` field: found by reading the split's shards). It chains to the latest
    amendment under `prefix` (default: ``amendments/`` beside the record), once each one there is
    signed by one of `signing_keys` and the chain holds (`AmendmentError` otherwise)."""
    record = approved.approval
    if record is None:
        raise AmendmentError("amend an approval opened from its signed record (open_approved), not one just approved")
    store = storage_of(storage)
    folder = prefix if prefix is not None else f"{record.uri.rsplit('/', 1)[0]}/{AMENDMENTS_FOLDER}"
    keys = load_signing_keys(signing_keys)
    before = signed_chain(store, folder, record.sha256, approved.manifest_sha256, [k.public_key for k in keys])
    sequence = len(before) + 1
    earlier = list(before[-1].amendment.removed) if before else []
    new = _resolve(store, approved, list(removals), sequence)
    taken = {r.key: r.amendment for r in earlier}
    again = [f"{k[0]}/{k[1]}#{k[2]} (amendment {taken[k]})" for k in (r.key for r in new) if k in taken]
    if again:
        raise AmendmentError(f"already removed: {', '.join(again[:5])}; remove each record once")
    document = Amendment(
        approval_sha256=record.sha256,
        data_manifest_sha256=approved.manifest_sha256,
        sequence=sequence,
        previous_sha256=before[-1].sha256 if before else None,
        removed=sorted([*earlier, *new], key=lambda r: r.key),
    )
    check_removals(document.removed, approved.manifest, (1, 1))
    data = sign_envelope(canonical_json(amendment_statement(document, record.uri)), keys).to_json_bytes()
    digest = sha256_hex(data)
    out = amendment_uri(folder, record.sha256, sequence, digest)
    store.put_create(out, data)
    return WrittenAmendment(ObjectRef(uri=out, sha256=digest, size=len(data)), document, tuple(k.keyid for k in keys))


def _resolve(
    storage: Any, approved: ApprovedDataset, removals: list[Mapping[str, Any]], sequence: int
) -> list[Removal]:
    """`removals` as `Removal`s of amendment `sequence`, record ids looked up in their splits."""
    if not removals:
        raise AmendmentError("an amendment removes at least one record")
    out: list[Removal] = []
    by_id: dict[str, dict[Any, tuple[str, int]]] = {}
    for item in removals:
        if not isinstance(item, Mapping) or item.get("reason") not in REASONS:
            raise AmendmentError(f"each removal is a mapping with a reason in {REASONS}, got {item!r:.200}")
        split: Any = item.get("split")
        shard: Any
        index: Any
        if "record_id" in item:
            if split not in by_id:
                by_id[split] = _ids(storage, approved, split)
            where = by_id[str(split)].get(item["record_id"])
            if where is None:
                raise AmendmentError(f"split {split!r} holds no record with id {item['record_id']!r}; nothing removed")
            shard, index = where
        else:
            shard, index = item.get("shard"), item.get("record_index")
        try:
            out.append(
                Removal(
                    split=split,
                    shard=shard,
                    record_index=index,
                    reason=item["reason"],
                    note=item.get("note", ""),
                    amendment=sequence,
                )
            )
        except ValueError as exc:  # pydantic's ValidationError
            raise AmendmentError(f"removal {item!r:.200} is not valid: {exc}") from None
    keys = [r.key for r in out]
    if len(set(keys)) != len(keys):
        raise AmendmentError("a record is named twice in one amendment; remove each record once")
    return out


def _ids(storage: Any, approved: ApprovedDataset, split: Any) -> dict[Any, tuple[str, int]]:
    """Record id -> (shard key, index) over `split`, read from its shards (each block verified)."""
    manifest = approved.manifest
    if not isinstance(split, str) or split not in manifest.splits:
        raise AmendmentError(f"the approval holds no split {split!r}; name one of {sorted(manifest.splits)}")
    out: dict[Any, tuple[str, int]] = {}
    for entry in manifest.splits[split].shards:
        for i, rec in enumerate(iter_shard(manifest.data_format, entry, storage=storage)):
            rid = rec.get("id") if isinstance(rec, Mapping) else None
            if rid is not None and isinstance(rid, (str, int)):
                out.setdefault(rid, (entry.key, i))
    return out
