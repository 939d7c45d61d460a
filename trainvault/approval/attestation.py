"""Attestations of the scan: the contamination report and the training scan manifest as
in-toto Statements in DSSE envelopes, signed by the scanner's Ed25519 key.

Subject: the data manifest the document was made for. Predicate: the document itself.
A gate reads the bound bytes with `read_attested`: an envelope must be signed by the
policy's trusted scanner keys (`UntrustedSignerError` names the keys that did sign); a
plain document (the unsigned v1 form) is read as unsigned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from trainvault.approval.dsse import STATEMENT_TYPE, Envelope, sign_envelope, unverified_payload, verify_envelope
from trainvault.approval.keys import SigningKey, load_signing_keys
from trainvault.approval.scan_manifest import TrainingScanManifest
from trainvault.canonical import canonical_json, loads_strict, sha256_hex
from trainvault.contamination.report import ContaminationReport
from trainvault.documents import Document
from trainvault.errors import ApprovalError, ManifestError, UntrustedSignerError
from trainvault.publication.bound import Bound
from trainvault.refs import ObjectRef
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri

D = TypeVar("D", bound=Document)
#: The documents a scanner attests.
A = TypeVar("A", ContaminationReport, TrainingScanManifest)

REPORT_ATTESTATION_NAME = "contamination-report-v1.dsse.json"
SCAN_ATTESTATION_NAME = "training-scan-manifest-v1.dsse.json"
PREDICATE_TYPES: dict[type[Document], str] = {
    ContaminationReport: "https://trainvault.invalid/contamination-report/v1",
    TrainingScanManifest: "https://trainvault.invalid/training-scan-manifest/v1",
}


@dataclass(frozen=True)
class Attested(Generic[D]):
    """A document read from bound bytes, and the trusted keys that signed it (none: unsigned)."""

    document: D
    signers: tuple[str, ...]


def _predicate_type(cls: type[Document]) -> str:
    try:
        return PREDICATE_TYPES[cls]
    except KeyError:
        raise TypeError(
            f"only a ContaminationReport or a TrainingScanManifest is attested, not {cls.__name__}"
        ) from None


def _subject(document: ContaminationReport | TrainingScanManifest) -> str:
    if isinstance(document, ContaminationReport):
        return document.training.data_manifest_sha256
    return document.data_manifest_sha256


def attestation_statement(document: ContaminationReport | TrainingScanManifest) -> dict[str, Any]:
    """The in-toto Statement about the data manifest whose predicate is `document`."""
    predicate_type = _predicate_type(type(document))  # refuses any other document first
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": "data-manifest", "digest": {"sha256": _subject(document)}}],
        "predicateType": predicate_type,
        "predicate": document.model_dump(mode="json", by_alias=True),
    }


def write_attestation(
    storage: StorageSource,
    uri: str,
    document: A,
    *,
    signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | str | bytes | None = None,
) -> Bound[A]:
    """Sign `document` (a report or scan manifest) with the scanner's keys and publish the
    envelope create-only at `uri`. `signing_keys`: keys, PEM data or paths; None reads
    ``$TRAINVAULT_SIGNING_KEY``. The digest is of the envelope's bytes (what a request binds)."""
    keys = load_signing_keys(signing_keys)
    data = sign_envelope(canonical_json(attestation_statement(document)), keys).to_json_bytes()
    uri = normalize_uri(uri)
    storage_of(storage).put_create(uri, data)
    return Bound(ObjectRef(uri=uri, sha256=sha256_hex(data), size=len(data)), document)


def _is_envelope(data: bytes, source: str) -> bool:
    try:
        obj = loads_strict(data, source=source)
    except ManifestError:
        raise
    except ValueError:  # not JSON: parsing it as the document says so
        return False
    return isinstance(obj, dict) and "payloadType" in obj and "format" not in obj


def _signers_found(envelope: Envelope) -> tuple[str, ...]:
    """Key ids the envelope's signatures claim (hints only: shown to people, never trusted)."""
    return tuple(s.keyid or "(no keyid)" for s in envelope.signatures)


def read_attested(
    data: bytes,
    cls: type[A],
    *,
    trusted_keys: Iterable[Any] | None,
    threshold: int = 1,
    source: str,
) -> Attested[A]:
    """The document in `data`: a signed envelope (checked against `trusted_keys`) or, only
    when `trusted_keys` is None, a plain unsigned document. `UntrustedSignerError` when the
    trusted keys did not sign; `ManifestError` for a malformed document."""
    if not _is_envelope(data, source):
        if trusted_keys is not None:
            raise UntrustedSignerError(
                f"{source} is not signed: the policy trusts only {cls.KIND} attestations signed by its scanner keys; "
                "sign it with the scanner's key (write_attestation)"
            )
        return Attested(cls.from_json_bytes(data, source=source), ())
    envelope = Envelope.from_json_bytes(data, source=source)
    if trusted_keys is None:
        payload = unverified_payload(envelope, source=source)
        signers: tuple[str, ...] = ()
    else:
        try:
            payload, signers = verify_envelope(envelope, trusted_keys, threshold, source=source)
        except ApprovalError as exc:
            found = _signers_found(envelope)
            raise UntrustedSignerError(
                f"{source}: signed by key(s) {', '.join(found) or '(none)'}, not by {threshold} of the trusted scanner "
                f"keys ({exc}); sign with a trusted scanner key or trust that key on purpose",
                found,
            ) from None
    return Attested(_statement_document(payload, cls, source), signers)


def _statement_document(payload: bytes, cls: type[A], source: str) -> A:
    where = f"{source} (its signed statement)"
    try:
        statement = loads_strict(payload, source=where)
    except ManifestError:
        raise
    except ValueError:
        raise ManifestError(f"{where}: not JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise ManifestError(f"{where}: not an in-toto statement ({STATEMENT_TYPE})")
    if statement.get("predicateType") != _predicate_type(cls):
        raise ManifestError(
            f"{where}: predicate type {statement.get('predicateType')!r} is not "
            f"{_predicate_type(cls)!r}: it attests another kind of document"
        )
    document = cls.from_obj(statement.get("predicate"), source=where)
    subjects = statement.get("subject")
    digests = [
        s["digest"].get("sha256") if isinstance(s, dict) and isinstance(s.get("digest"), dict) else None
        for s in (subjects if isinstance(subjects, list) else [])
    ]
    if digests != [_subject(document)]:
        raise ManifestError(f"{where}: its subject {digests} is not the data manifest the document names")
    return document
