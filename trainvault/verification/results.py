"""Per-shard results stored by content: a shard's contamination scan (keyed by shard sha256,
contract and release) and its survey (profile state and field survey, keyed by shard sha256
and profile settings), so the next version reuses every shard whose bytes did not change.

Each result is a small document named by the digest of its key in a folder per scanner key
(``<key id, 16 hex>/scan-<digest>.json``, ``.../survey-<digest>.json``), stored as a DSSE
envelope signed by that scanner's Ed25519 key over the document, its key included. A result
is reused only when the reader's scanner key's signature over it checks: anyone who can
write the folder can name a result correctly (its key and the key id are public digests)
but cannot sign one; the folder per key id only keeps scanners with different keys from
replacing each other's results, and decides nothing. A stored result that key did not sign
(unsigned, altered, signed by another key, from before version 2) or that is for another
key than its name says is named in a logging warning and not reused: the verification pass
recomputes it and writes its own signed result over it; a reader that cannot recompute
fails closed. There is no unsigned form: without a scanner key nothing could tell a forged
result from one's own, so such a scan reads every shard (`trainvault.contamination.scan_shard`)
and stores nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import Field

from trainvault.approval.dsse import Envelope, sign_envelope, verify_envelope
from trainvault.approval.keys import SigningKey, VerifyingKey
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.contamination.scan import ShardScanResult
from trainvault.documents import Document, StrictModel
from trainvault.errors import ApprovalError, ManifestError, ObjectNotFoundError
from trainvault.publication.manifest import ShardEntry
from trainvault.refs import Sha256
from trainvault.storage import Storage
from trainvault.uris import join_uri

#: The profile settings the verification pass computes a shard's profile under: the library's
#: defaults (no task schema, no extra-metrics hook, the default task id field and label bound).
DEFAULT_PROFILE = "defaults-v1"

log = logging.getLogger(__name__)

R = TypeVar("R", bound="StoredResult")


class ShardKey(StrictModel):
    """What a shard's bytes are, as the manifest binds them."""

    shard_sha256: Sha256
    size_bytes: int = Field(ge=0)
    record_count: int = Field(ge=0)
    data_format: str

    @classmethod
    def of(cls, entry: ShardEntry, data_format: str) -> ShardKey:
        return cls(
            shard_sha256=entry.sha256,
            size_bytes=entry.size_bytes,
            record_count=entry.record_count,
            data_format=data_format,
        )


class ScanKey(StrictModel):
    shard: ShardKey
    contract_sha256: Sha256
    release_sha256: Sha256


class SurveyKey(StrictModel):
    shard: ShardKey
    profile: str


class StoredResult(Document):
    """A per-shard result under its key, stored signed (`PAYLOAD_TYPE` names kind and version)."""

    PAYLOAD_TYPE: ClassVar[str]
    key: Any


class StoredScan(StoredResult):
    """stored-shard-scan-v2: one shard's contamination scan, under its key, signed by the scanner
    (v1 was unsigned)."""

    KIND = "trainvault.stored-shard-scan"
    VERSION = 2
    PAYLOAD_TYPE = "application/vnd.trainvault.stored-shard-scan.v2+json"

    format: Literal["trainvault.stored-shard-scan"] = "trainvault.stored-shard-scan"
    version: Literal[2] = 2
    key: ScanKey
    result: ShardScanResult


class ShardSurvey(StoredResult):
    """shard-survey-v2: one shard's profile state and field survey, under its key, signed by the
    scanner (v1 was unsigned)."""

    KIND = "trainvault.shard-survey"
    VERSION = 2
    PAYLOAD_TYPE = "application/vnd.trainvault.shard-survey.v2+json"

    format: Literal["trainvault.shard-survey"] = "trainvault.shard-survey"
    version: Literal[2] = 2
    key: SurveyKey
    #: `trainvault.profile.state.shard_profile_state` of the shard.
    profile: dict[str, Any]
    #: `FieldSurvey.state()` of each top-level key, in the order first seen.
    fields: list[dict[str, Any]]


def key_uri(folder: str, kind: str, key: StrictModel, scanner: VerifyingKey) -> str:
    """Where the result of `kind` ("scan", "survey") under `key` signed by `scanner` is stored:
    in the scanner's folder, named by the key's digest."""
    digest = sha256_hex(canonical_json(key.model_dump(mode="json")))
    return join_uri(folder, f"{scanner.keyid[:16]}/{kind}-{digest}.json")


@dataclass(frozen=True)
class Lookup(Generic[R]):
    """A stored result looked up: the one the scanner key signed under the key asked for, or None;
    `refused` says why one stored there is not reused (None: reused, or nothing stored)."""

    document: R | None
    refused: str | None = None


def read_result(storage: Storage, cls: type[R], uri: str, key: StrictModel, scanner: VerifyingKey) -> Lookup[R]:
    """The result at `uri` when `scanner` signed it as a `cls` under `key`; one stored there
    that is not is refused, with a warning naming it."""
    try:
        data = storage.get_document(uri)
    except ObjectNotFoundError:
        return Lookup(None)
    try:
        doc = authenticated(data, cls, uri, scanner)
    except (ApprovalError, ManifestError) as exc:
        reason = f"not authenticated by scanner key {scanner.keyid[:16]} ({exc})"
    else:
        if doc.key == key:
            return Lookup(doc)
        reason = "signed for another key than its name says"
    log.warning("%s: stored per-shard result not trusted, not reused: %s", uri, reason)
    return Lookup(None, refused=reason)


def authenticated(data: bytes, cls: type[R], uri: str, scanner: VerifyingKey) -> R:
    """The `cls` in the envelope `data` once `scanner`'s signature over it checks."""
    envelope = Envelope.from_json_bytes(data, source=uri)
    payload, _ = verify_envelope(envelope, [scanner], payload_type=cls.PAYLOAD_TYPE, source=uri)
    return cls.from_json_bytes(payload, source=uri)


def store_result(storage: Storage, uri: str, doc: StoredResult, signing_key: SigningKey, *, replace: bool) -> None:
    """Write `doc` signed by `signing_key`: create-only (the same result again is a no-op), or
    over a refused one with `replace` (what the scanner key did not sign is not worth keeping)."""
    data = sign_envelope(doc.to_json_bytes(), [signing_key], payload_type=doc.PAYLOAD_TYPE).to_json_bytes()
    if replace:
        storage.put(uri, data)
    else:
        storage.put_create(uri, data)
