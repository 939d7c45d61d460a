"""Writing a revocation: the approver withdraws an approval record, with a reason.

What a revocation is and how a trainer's open finds and judges it is
`trainvault.approval.revocation`; this module signs and publishes one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainvault.approval.dsse import Envelope, sign_envelope, unverified_payload
from trainvault.approval.keys import SigningKey, load_signing_keys
from trainvault.approval.record import PREDICATE_TYPE
from trainvault.approval.revocation import REVOCATIONS_FOLDER, Revocation, revocation_statement, revocation_uri
from trainvault.canonical import canonical_json, loads_strict, sha256_hex
from trainvault.errors import ApprovalError, ObjectNotFoundError, TrainVaultError
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri

#: The longest reason a revocation carries.
MAX_REASON = 4000


@dataclass(frozen=True)
class WrittenRevocation(Referenced):
    """A revocation as written: its reference, the document and the keys that signed it."""

    revocation: Revocation
    signers: tuple[str, ...]


def revoke(
    storage: StorageSource,
    approval_uri: str,
    *,
    reason: str,
    signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | None = None,
    prefix: str | None = None,
) -> WrittenRevocation:
    """Sign and publish (create-only) the revocation of the approval record at `approval_uri`,
    with `reason`, under `prefix` (default: ``revocations/`` beside the record). `signing_keys`:
    the approver's keys, PEM data or paths; None reads ``$TRAINVAULT_SIGNING_KEY``. Signatures are
    deterministic: revoking again with the same reason and keys writes nothing new."""
    uri = normalize_uri(approval_uri)
    store = storage_of(storage)
    try:
        raw = store.get_document(uri)
    except ObjectNotFoundError:
        raise ApprovalError(f"there is no approval record at {uri} to revoke; pass the record's URI") from None
    _check_is_approval(raw, uri)
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON:
        raise ApprovalError(
            f"a revocation needs a reason of 1 to {MAX_REASON} characters, not blank (got {reason!r:.60}): say why "
            "the approval is withdrawn"
        )
    approval_sha256 = sha256_hex(raw)
    document = Revocation(approval_sha256=approval_sha256, approval_uri=uri, reason=reason)
    keys = load_signing_keys(signing_keys)
    data = sign_envelope(canonical_json(revocation_statement(document)), keys).to_json_bytes()
    digest = sha256_hex(data)
    folder = prefix if prefix is not None else f"{uri.rsplit('/', 1)[0]}/{REVOCATIONS_FOLDER}"
    out = revocation_uri(folder, approval_sha256, digest)
    store.put_create(out, data)
    return WrittenRevocation(ObjectRef(uri=out, sha256=digest, size=len(data)), document, tuple(k.keyid for k in keys))


def _check_is_approval(raw: bytes, uri: str) -> None:
    """Refuse to revoke what is not an approval record (a data manifest given by mistake)."""
    try:
        statement = loads_strict(unverified_payload(Envelope.from_json_bytes(raw, source=uri), source=uri), source=uri)
    except (TrainVaultError, ValueError):
        statement = None
    if not isinstance(statement, dict) or statement.get("predicateType") != PREDICATE_TYPE:
        raise ApprovalError(f"{uri} is not a signed approval record; revoke the approval record itself")
