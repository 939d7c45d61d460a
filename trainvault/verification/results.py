"""Per-shard results stored by content: a shard's contamination scan (keyed by shard sha256,
contract and release) and its survey (profile state and field survey, keyed by shard sha256
and profile settings), so the next version reuses every shard whose bytes did not change.

Each result is a small create-only document named by the digest of its key under one
folder (``scan-<digest>.json``, ``survey-<digest>.json``). Reading one back fails closed: a
document that does not parse, or whose key is not the one asked for, is an `IntegrityError`
naming it; nothing is recomputed over it.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import Field

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.contamination.scan import ShardScanResult
from trainvault.documents import Document, StrictModel
from trainvault.errors import IntegrityError, ManifestError, ObjectNotFoundError
from trainvault.publication.bound import publish_document
from trainvault.publication.manifest import ShardEntry
from trainvault.refs import Sha256
from trainvault.storage import Storage
from trainvault.uris import join_uri

#: The profile settings the verification pass computes a shard's profile under: the library's
#: defaults (no task schema, no extra-metrics hook, the default task id field and label bound).
DEFAULT_PROFILE = "defaults-v1"

R = TypeVar("R", bound="Document")


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


class StoredScan(Document):
    """stored-shard-scan-v1: one shard's contamination scan, under its key."""

    KIND = "trainvault.stored-shard-scan"

    format: Literal["trainvault.stored-shard-scan"] = "trainvault.stored-shard-scan"
    version: Literal[1] = 1
    key: ScanKey
    result: ShardScanResult


class ShardSurvey(Document):
    """shard-survey-v1: one shard's profile state and field survey, under its key."""

    KIND = "trainvault.shard-survey"

    format: Literal["trainvault.shard-survey"] = "trainvault.shard-survey"
    version: Literal[1] = 1
    key: SurveyKey
    #: `trainvault.profile.state.shard_profile_state` of the shard.
    profile: dict[str, Any]
    #: `FieldSurvey.state()` of each top-level key, in the order first seen.
    fields: list[dict[str, Any]]


def key_uri(folder: str, kind: str, key: StrictModel) -> str:
    """Where the result of `kind` ("scan", "survey") under `key` is stored: named by the key's digest."""
    return join_uri(folder, f"{kind}-{sha256_hex(canonical_json(key.model_dump(mode='json')))}.json")


def read_result(storage: Storage, cls: type[R], uri: str, key: StrictModel) -> R | None:
    """The stored result at `uri` if there is one, checked to be a `cls` under `key`; None if absent."""
    try:
        data = storage.get_document(uri)
    except ObjectNotFoundError:
        return None
    try:
        doc = cls.from_json_bytes(data, source=uri)
    except ManifestError as exc:
        raise IntegrityError(
            f"{uri}: a stored per-shard result does not parse ({exc}); delete it and run the verification pass again"
        ) from None
    if getattr(doc, "key", None) != key:
        raise IntegrityError(
            f"{uri}: the stored per-shard result is for another key than its name says; delete it "
            "and run the verification pass again"
        )
    return doc


def store_result(storage: Storage, uri: str, doc: Document) -> None:
    """Write a result create-only (the same result again is a no-op)."""
    publish_document(storage, uri, doc)
