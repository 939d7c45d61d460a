"""Revocations: a signed, create-only withdrawal of an approval, by the approval's sha256.

A revocation is an in-toto Statement about the approval record (subject: its sha256) whose
predicate is a `Revocation` document (the reason), in a DSSE envelope signed by the approver's
Ed25519 keys. It is content-named, ``<prefix>/<approval sha256>/<envelope sha256>.dsse.json``,
so a trainer's open lists one folder (one LIST request) to learn whether its approval was
withdrawn.

A revocation counts only when `threshold` of the keys the trainer trusts for the approval
signed it: the same keys and threshold that make the approval count. One signed by other keys
(or too few) is ignored, and so is one of another approval. A file in the source that is not a
readable revocation stops the open (`ManifestError`): it may be a revocation this trainvault
cannot read, and reading on would fail open.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from trainvault.approval.dsse import (
    STATEMENT_TYPE,
    Envelope,
    trusted_key_set,
    unverified_statement,
    verify_envelope,
)
from trainvault.approval.keys import VerifyingKey
from trainvault.documents import Document
from trainvault.errors import ApprovalError, ManifestError, RevokedError, TrainVaultError
from trainvault.refs import Sha256
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri

REVOCATION_PREDICATE = "https://trainvault.invalid/revocation/v1"
#: The folder beside an approval record that `revoke` writes to by default.
REVOCATIONS_FOLDER = "revocations"
#: A revocation source: a storage prefix (a str) or revocation files (a sequence of URIs or paths).
RevocationSource = str | Sequence[str]


class Revocation(Document):
    """The withdrawal of the approval record whose bytes hash to `approval_sha256`."""

    KIND = "trainvault.revocation"

    format: Literal["trainvault.revocation"] = "trainvault.revocation"
    version: Literal[1] = 1
    approval_sha256: Sha256
    #: Where the approval was stored when it was revoked (for people: the digest is what binds).
    approval_uri: str = Field(min_length=1)
    reason: str = Field(min_length=1, max_length=4000)


@dataclass(frozen=True)
class FoundRevocation:
    """A revocation read from a source: `counts` when it revokes the approval asked about and
    enough trusted keys signed it; else `ignored` says why."""

    uri: str
    revocation: Revocation
    signers: tuple[str, ...]
    ignored: str | None

    @property
    def counts(self) -> bool:
        return self.ignored is None


def revocation_uri(prefix: str, approval_sha256: str, envelope_sha256: str) -> str:
    """Where a revocation of `approval_sha256` whose envelope hashes to `envelope_sha256` lives under `prefix`."""
    return f"{normalize_uri(prefix).rstrip('/')}/{approval_sha256}/{envelope_sha256}.dsse.json"


def revocation_statement(document: Revocation) -> dict[str, Any]:
    """The in-toto Statement about the revoked approval record whose predicate is `document`."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": document.approval_uri, "digest": {"sha256": document.approval_sha256}}],
        "predicateType": REVOCATION_PREDICATE,
        "predicate": document.model_dump(mode="json"),
    }


def find_revocations(
    storage: StorageSource,
    source: RevocationSource,
    approval_sha256: str,
    *,
    trusted_keys: Iterable[object],
    threshold: int = 1,
) -> list[FoundRevocation]:
    """Every revocation in `source` (a prefix: its ``<approval_sha256>/`` folder; or files), each
    saying whether it counts against `approval_sha256` under `trusted_keys` and `threshold`.
    A file that is not a readable revocation is a `ManifestError`."""
    keys = trusted_key_set(trusted_keys, threshold)
    store = storage_of(storage)
    return [_read(store, uri, approval_sha256, keys, threshold) for uri in source_uris(store, source, approval_sha256)]


def check_not_revoked(
    storage: StorageSource,
    source: RevocationSource | None,
    approval_sha256: str,
    *,
    trusted_keys: Iterable[object],
    threshold: int = 1,
) -> list[FoundRevocation]:
    """`find_revocations`, raising `RevokedError` (naming the revocation and its reason) when
    one counts; returns the revocations it ignored. No source: nothing is checked."""
    if source is None:
        return []
    found = find_revocations(storage, source, approval_sha256, trusted_keys=trusted_keys, threshold=threshold)
    for f in found:
        if f.counts:
            raise RevokedError(
                f"approval {approval_sha256} was revoked by {f.uri} (signed by {', '.join(k[:16] for k in f.signers)}): "
                f"{f.revocation.reason}; do not train on it: ask the approvers for a new approval",
                revocation=f.uri,
                reason=f.revocation.reason,
            )
    return found


class RevocationWatch:
    """The revocation source an approval was opened with, checked again at every loader resume."""

    __slots__ = ("_approval_sha256", "_keys", "_source", "_storage", "_threshold")

    def __init__(
        self,
        storage: Storage,
        source: RevocationSource,
        approval_sha256: str,
        trusted_keys: Iterable[object],
        threshold: int,
    ):
        self._storage, self._source, self._approval_sha256 = storage, source, approval_sha256
        self._keys, self._threshold = trusted_key_set(trusted_keys, threshold), threshold

    def check(self, state: object = None) -> list[FoundRevocation]:
        """`check_not_revoked` against the source now (`RevokedError` when revoked); `state`, the
        loader state about to be resumed, plays no part: any resume of a revoked approval is refused."""
        return check_not_revoked(
            self._storage, self._source, self._approval_sha256, trusted_keys=self._keys, threshold=self._threshold
        )


def source_uris(store: Storage, source: RevocationSource, approval_sha256: str) -> list[str]:
    """The files of `source` about `approval_sha256`: a prefix's ``<approval_sha256>/`` folder, or
    the files given (revocations and amendments are found alike)."""
    if isinstance(source, str):
        prefix = normalize_uri(source).rstrip("/")
        if store.exists(prefix):
            # A file given as a prefix would list nothing and let a revoked approval through.
            raise ApprovalError(
                f"revocations={source!r} is a file, not a prefix; pass files as a list: revocations=[{source!r}]"
            )
        return [o.uri for o in store.list(f"{prefix}/{approval_sha256}/")]
    if isinstance(source, bytes) or not isinstance(source, Sequence):
        raise TypeError(f"revocations is a prefix (str) or a list of files, not {type(source).__name__}")
    if not all(isinstance(u, str) for u in source):
        raise TypeError("revocations is a prefix (str) or a list of files (str URIs or paths)")
    return [normalize_uri(u) for u in source]


def _read(store: Storage, uri: str, approval_sha256: str, keys: list[VerifyingKey], threshold: int) -> FoundRevocation:
    try:
        raw = store.get_document(uri)
    except TrainVaultError as exc:
        raise ApprovalError(f"cannot read revocation {uri}: {exc}; no revocation check, no load") from exc
    envelope, document = _parse(raw, uri)
    if document.approval_sha256 != approval_sha256:
        return FoundRevocation(uri, document, (), f"it revokes another approval ({document.approval_sha256})")
    try:
        _, signers = verify_envelope(envelope, keys, threshold, source=uri)
    except ApprovalError as exc:
        return FoundRevocation(uri, document, (), f"not signed by {threshold} of the trusted keys ({exc})")
    return FoundRevocation(uri, document, signers, None)


def _parse(raw: bytes, uri: str) -> tuple[Envelope, Revocation]:
    """The envelope and its revocation, signatures not yet checked; `ManifestError` if it is not one."""
    envelope, statement = unverified_statement(raw, uri, REVOCATION_PREDICATE, "a revocation")
    document = Revocation.from_obj(statement.get("predicate"), source=uri)
    subjects = statement.get("subject")
    if subjects != [{"name": document.approval_uri, "digest": {"sha256": document.approval_sha256}}]:
        raise ManifestError(f"{uri}: the statement's subject is not the approval its revocation names")
    return envelope, document
