"""Signed approval records: an in-toto Statement about the data manifest, in a DSSE envelope.

Subject: the data manifest digest. Predicate: the approval request (every artifact by
uri + sha256), the gate's verification summary, and free-form provenance (the Dagster
run id and asset key go there). A trainer opens a record by URI and SHA-256 with the
public keys it trusts, and the gate runs again on the request inside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainvault.approval.amendment import check_removals, read_amendments
from trainvault.approval.approved import ApprovalRecordRef, ApprovedDataset, issue
from trainvault.approval.dsse import STATEMENT_TYPE, Envelope, sign_envelope, trusted_key_set, verify_envelope
from trainvault.approval.gate import coerce_request, run_gate
from trainvault.approval.hashing import HashProgressCallback
from trainvault.approval.keys import SigningKey, load_signing_keys
from trainvault.approval.opening import open_bound
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.request import ApprovalRequest
from trainvault.approval.revocation import RevocationSource, RevocationWatch
from trainvault.canonical import canonical_json, is_sha256_hex, loads_strict, sha256_hex
from trainvault.errors import (
    ApprovalError,
    ManifestError,
    ObjectNotFoundError,
    TrainVaultError,
)
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri

PREDICATE_TYPE = "https://trainvault.invalid/approval/v1"
APPROVAL_NAME = "approval-v1.dsse.json"


@dataclass(frozen=True)
class WrittenApproval(Referenced):
    """An approval record as written: its reference (``.sha256`` is what a trainer pins) and
    who signed it."""

    signers: tuple[str, ...]


def approval_statement(approved: ApprovedDataset, provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The in-toto Statement for an approved dataset."""
    request = approved.request
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": request.data_manifest.uri, "digest": {"sha256": request.data_manifest.sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "request": request.model_dump(mode="json"),
            # Summary fields a v1 chain does not use are left out, so its records keep their bytes.
            "verification": approved.summary.model_dump(mode="json", exclude_none=True),
            "provenance": dict(provenance or {}),
        },
    }


def write_approval(
    storage: StorageSource,
    uri: str,
    approved: ApprovedDataset,
    *,
    signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> WrittenApproval:
    """Sign and publish (create-only) the approval record of a dataset that passed the gate.

    `signing_keys`: keys, PEM data or paths; None reads ``$TRAINVAULT_SIGNING_KEY``.
    `provenance` is free-form JSON (run id, asset key, approver). Ed25519 signatures are
    deterministic, so writing the same record again is a no-op.
    """
    if not isinstance(approved, ApprovedDataset):
        raise ApprovalError(f"write_approval signs an ApprovedDataset from the gate, not a {type(approved).__name__}")
    keys = load_signing_keys(signing_keys)
    try:
        payload = canonical_json(approval_statement(approved, provenance))
    except (TypeError, ValueError) as exc:
        raise ApprovalError(f"provenance must be plain JSON (no NaN, no objects): {exc}") from None
    data = sign_envelope(payload, keys).to_json_bytes()
    uri = normalize_uri(uri)
    storage_of(storage).put_create(uri, data)
    return WrittenApproval(ObjectRef(uri=uri, sha256=sha256_hex(data), size=len(data)), tuple(k.keyid for k in keys))


def _field(obj: Any, name: str, kind: type, where: str) -> Any:
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, kind):
        raise ApprovalError(f"{where}: field {name!r} is missing or not a {kind.__name__}; not a trainvault approval")
    return value


def open_approved(
    storage: StorageSource,
    approval_uri: str,
    sha256: str,
    *,
    trusted_keys: Iterable[object],
    threshold: int = 1,
    policy: ApprovalPolicy | None = None,
    audit: bool = False,
    progress: HashProgressCallback | None = None,
    revocations: RevocationSource | None = None,
    amendments: RevocationSource | None = None,
) -> ApprovedDataset:
    """Verify the approval record at `approval_uri` (its bytes must hash to `sha256`;
    at least `threshold` of `trusted_keys` must have signed it), then check what it approved
    under the trainer's `policy` at the cost of its metadata (`trainvault.approval.opening`:
    every bound document by sha256, the shards' sizes by listing; no shard byte is read, and
    the loader verifies every block before decoding it). `audit=True` runs the full gate on
    the record's request instead (every byte hashed, a re-scan; `progress` reports it).
    `revocations` (a storage prefix, or a list of revocation files) is where the trainer looks
    for revocations (`trainvault.approval.revocation`): one signed by `threshold` of
    `trusted_keys` is a `RevokedError`, here and when a loader of the dataset resumes.
    `amendments` (a prefix, or amendment files) gives the amended view
    (`trainvault.approval.amendment`): its loaders never deal a removed record; a chain that
    does not hold, or removes more than the policy's `max_removed_fraction` of the records, is
    an `AmendmentError`.
    Raises `ApprovalError` saying what failed (`ManifestError` for an envelope or signed
    statement with a duplicated key, or a file in `revocations` that is not a revocation)."""
    if not isinstance(audit, bool):
        raise ApprovalError(f"audit must be True or False, got {audit!r}")
    trainer = _policy(policy)
    if revocations is not None or amendments is not None:
        trusted_keys = trusted_key_set(trusted_keys, threshold)  # read again: revocations, amendments
    request, record, signed = _read_record(storage, approval_uri, sha256, trusted_keys, threshold)
    store = storage_of(storage)
    watch = None if revocations is None else RevocationWatch(store, revocations, sha256, trusted_keys, threshold)
    if watch is not None:
        watch.check()  # before the bound documents: a withdrawn approval costs nothing more
    if audit:
        result = run_gate(store, request, policy=policy, progress=progress)
    else:
        result = open_bound(store, request, signed, trainer, record_uri=record.uri)
    chain = None
    if amendments is not None:
        chain = read_amendments(
            store, amendments, sha256, request.data_manifest.sha256, trusted_keys=trusted_keys, threshold=threshold
        )
        if chain is not None:
            check_removals(chain.removed, result.publication.manifest, trainer.max_removed_fraction)
    return issue(result, store.config, record, revocations=watch, amendments=chain)


def _policy(policy: ApprovalPolicy | None) -> ApprovalPolicy:
    if policy is not None and not isinstance(policy, ApprovalPolicy):
        raise TypeError(f"policy must be an ApprovalPolicy, not {type(policy).__name__}")
    return policy or ApprovalPolicy()


def with_record(
    storage: StorageSource,
    approved: ApprovedDataset,
    approval_uri: str,
    sha256: str,
    *,
    trusted_keys: Iterable[object],
    threshold: int = 1,
) -> ApprovedDataset:
    """`approved` (just returned by the gate) as opened from its signed record, without a second
    hash pass: the record is verified as `open_approved` verifies it (pinned by `sha256`, signed
    by `threshold` of `trusted_keys`) and must carry exactly the request the gate judged.

    For the approver that ran the gate under the policy a trainer will apply; a trainer opens
    the record with `open_approved`, which runs the full gate.
    """
    if not isinstance(approved, ApprovedDataset):
        raise ApprovalError(f"with_record takes an ApprovedDataset from the gate, not a {type(approved).__name__}")
    request, record, _ = _read_record(storage, approval_uri, sha256, trusted_keys, threshold)
    judged = approved.request
    if canonical_json(request.model_dump(mode="json")) != canonical_json(judged.model_dump(mode="json")):
        raise ApprovalError(
            f"{record.uri}: the record's request is not the one the gate just judged (it approves manifest "
            f"{request.data_manifest.sha256}, the gate judged {judged.data_manifest.sha256}); open it with "
            "open_approved, which runs the gate on its own request"
        )
    return issue(approved._result, storage_of(storage).config, record)


def _read_record(
    storage: StorageSource, approval_uri: str, sha256: str, trusted_keys: Iterable[object], threshold: int
) -> tuple[ApprovalRequest, ApprovalRecordRef, dict[str, Any]]:
    """The request inside the approval record at `approval_uri`, the record's reference and the
    verification summary it signs, once its bytes hash to `sha256` and `threshold` of
    `trusted_keys` signed it (`ApprovalError` otherwise)."""
    if not isinstance(sha256, str) or not is_sha256_hex(sha256):
        raise ApprovalError(f"pin the approval by its 64-character lowercase hex sha256, got {sha256!r}")
    uri = normalize_uri(approval_uri)
    try:
        raw = storage_of(storage).get_document(uri)
    except ObjectNotFoundError:
        raise ApprovalError(f"approval denied: there is no approval record at {uri}; no approval, no load") from None
    except TrainVaultError as exc:
        raise ApprovalError(f"approval denied: cannot read {uri}: {exc}") from exc
    got = sha256_hex(raw)
    if got != sha256:
        raise ApprovalError(
            f"approval denied: {uri} has sha256 {got}, not the pinned {sha256}: another (older or replaced) approval "
            "is stored there; open the approval you pinned"
        )
    envelope = Envelope.from_json_bytes(raw, source=uri)
    payload, signers = verify_envelope(envelope, trusted_keys, threshold, source=uri)
    try:
        statement = loads_strict(payload, source=f"{uri} (its signed statement)")
    except ManifestError:
        raise
    except ValueError:
        raise ApprovalError(f"{uri}: the signed payload is not JSON") from None
    if _field(statement, "_type", str, uri) != STATEMENT_TYPE:
        raise ApprovalError(f"{uri}: statement type {statement['_type']!r} is not {STATEMENT_TYPE!r}")
    if _field(statement, "predicateType", str, uri) != PREDICATE_TYPE:
        raise ApprovalError(
            f"{uri}: predicate type {statement['predicateType']!r} is not {PREDICATE_TYPE!r}; "
            "upgrade trainvault if it is a newer approval version"
        )
    predicate = _field(statement, "predicate", dict, uri)
    request = coerce_request(_field(predicate, "request", dict, uri))
    subjects = _field(statement, "subject", list, uri)
    digests = [s.get("digest", {}).get("sha256") if isinstance(s, dict) else None for s in subjects]
    if digests != [request.data_manifest.sha256]:
        raise ApprovalError(
            f"{uri}: the statement's subject {digests} is not the data manifest its request binds "
            f"({request.data_manifest.sha256})"
        )
    provenance = predicate.get("provenance", {})
    record = ApprovalRecordRef(
        ObjectRef(uri=uri, sha256=got, size=len(raw)), signers, provenance if isinstance(provenance, dict) else {}
    )
    return request, record, _field(predicate, "verification", dict, uri)
