"""The fused verification pass: one read of a shard serves its hash check, the contamination
scan, the profile and the field survey; or no read at all when both results are stored,
signed by the scanner key the pass runs under (`trainvault.verification.results`).

The stream is hashed and every block checked against its descriptor digest before its
records are used (`trainvault.contamination.scan_shard`), so a shard whose bytes are not the
ones the manifest binds yields no result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainvault.approval.keys import SigningKey, VerifyingKey, load_verifying_key
from trainvault.cards.fields import FieldSurvey, merge_surveys, survey_fields
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.scan import ShardScanResult, scan_shard
from trainvault.errors import ConfigurationError, IntegrityError, ProfileError
from trainvault.profile.sidecar import DatasetProfile, ProfileSettings, ShardProfile, ShardProfiler, SplitProfile
from trainvault.profile.state import shard_profile_from_state, shard_profile_state
from trainvault.profile.validation import TaskDataValidator
from trainvault.publication.manifest import ShardEntry
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri
from trainvault.verification.results import (
    DEFAULT_PROFILE,
    Lookup,
    ScanKey,
    ShardKey,
    ShardSurvey,
    StoredScan,
    SurveyKey,
    key_uri,
    read_result,
    store_result,
)

#: A scanner's public key as `load_verifying_key` takes it: the key, its signing key, PEM data or a path.
TrustedKey = VerifyingKey | SigningKey | str | bytes | os.PathLike[str]


@dataclass(frozen=True)
class VerifiedShard:
    """One shard's results, and whether this pass read the shard for them (False: all reused)."""

    scan: ShardScanResult
    survey: ShardSurvey
    read: bool


def scan_key(entry: ShardEntry, data_format: str, *, release_sha256: str, contract_sha256: str) -> ScanKey:
    return ScanKey(
        shard=ShardKey.of(entry, data_format), contract_sha256=contract_sha256, release_sha256=release_sha256
    )


def survey_key(entry: ShardEntry, data_format: str) -> SurveyKey:
    return SurveyKey(shard=ShardKey.of(entry, data_format), profile=DEFAULT_PROFILE)


@dataclass(frozen=True)
class StoredVerification:
    """What a results folder holds for one shard under one release and contract: each result a
    trusted key signed, or None; `refused`: the URIs of results stored there and not reused."""

    scan_key: ScanKey
    scan_uri: str
    scan: StoredScan | None
    survey_key: SurveyKey
    survey_uri: str
    survey: ShardSurvey | None
    refused: frozenset[str] = frozenset()

    @property
    def verified(self) -> VerifiedShard | None:
        """Both results, reused with no read of the shard (None: `verify_shard` must read it)."""
        if self.scan is None or self.survey is None:
            return None
        return VerifiedShard(self.scan.result, self.survey, read=False)


def stored_verification(
    storage: StorageSource,
    folder: str,
    data_format: str,
    entry: ShardEntry,
    *,
    release_sha256: str,
    contract_sha256: str,
    scanner_key: TrustedKey,
) -> StoredVerification:
    """Shard `entry`'s results as stored in `folder` under their keys and signed by `scanner_key`
    (the scanner's public key, or its signing key), looked up without building the release's
    index; hand it to `verify_shard` so that it does not look again."""
    storage = storage_of(storage)
    scanner = load_verifying_key(scanner_key)
    skey = scan_key(entry, data_format, release_sha256=release_sha256, contract_sha256=contract_sha256)
    vkey = survey_key(entry, data_format)
    suri, vuri = key_uri(folder, "scan", skey, scanner), key_uri(folder, "survey", vkey, scanner)
    scan, survey = (
        read_result(storage, StoredScan, suri, skey, scanner),
        read_result(storage, ShardSurvey, vuri, vkey, scanner),
    )
    refused = frozenset(uri for uri, found in ((suri, scan), (vuri, survey)) if found.refused is not None)
    return StoredVerification(skey, suri, scan.document, vkey, vuri, survey.document, refused)


def verify_shard(
    storage: StorageSource,
    folder: str,
    data_format: str,
    split: str,
    entry: ShardEntry,
    index: EvalIndex,
    *,
    signing_key: SigningKey,
    stored: StoredVerification | None = None,
) -> VerifiedShard:
    """Shard `entry`'s scan under `index` and its survey: reused from `folder` where stored under
    their keys and signed by `signing_key` (`stored`: that lookup, already made), else computed
    in one verified read of the shard and stored there signed by it (over a refused one)."""
    storage = storage_of(storage)
    digests = {"release_sha256": index.release_sha256, "contract_sha256": index.contract_sha256}
    if stored is None:
        stored = stored_verification(storage, folder, data_format, entry, **digests, scanner_key=signing_key)
    expected = scan_key(entry, data_format, **digests)
    if (stored.scan_key, stored.scan_uri) != (expected, key_uri(folder, "scan", expected, signing_key.public_key)):
        raise ConfigurationError(
            f"shard {split}/{entry.key}: the stored results looked up are for another shard, release, contract "
            "or scanner key than the index and the signing key; look them up under those"
        )
    if (reused := stored.verified) is not None:
        return reused
    profiler = ShardProfiler(split, entry, ProfileSettings())
    parts: list[tuple[list[FieldSurvey], int]] = []

    def observe(records: list[dict[str, Any]]) -> None:
        profiler.observe(records)
        parts.append(survey_fields(records))

    result = scan_shard(storage, data_format, entry, index, on_records=observe)
    fields, _ = merge_surveys(parts)
    made = ShardSurvey(
        key=stored.survey_key, profile=shard_profile_state(profiler.finish()), fields=[f.state() for f in fields]
    )
    if stored.scan is None:
        scan = StoredScan(key=stored.scan_key, result=result)
        store_result(storage, stored.scan_uri, scan, signing_key, replace=stored.scan_uri in stored.refused)
    elif stored.scan.result != result:
        raise IntegrityError(
            f"{stored.scan_uri}: the stored scan of shard {split}/{entry.key} is not what scanning it gives now; "
            "delete it and run the verification pass again"
        )
    if stored.survey is None:
        store_result(storage, stored.survey_uri, made, signing_key, replace=stored.survey_uri in stored.refused)
    return VerifiedShard(result, stored.survey or made, read=True)


def stored_survey(
    storage: StorageSource, folder: str, data_format: str, entry: ShardEntry, *, scanner_key: TrustedKey
) -> ShardSurvey:
    """Shard `entry`'s stored survey signed by `scanner_key` (`IntegrityError` when the
    verification pass has not stored one under that key, or the one stored is refused)."""
    storage = storage_of(storage)
    scanner = load_verifying_key(scanner_key)
    key = survey_key(entry, data_format)
    uri = key_uri(folder, "survey", key, scanner)
    found: Lookup[ShardSurvey] = read_result(storage, ShardSurvey, uri, key, scanner)
    if found.document is None:
        why = "none is stored" if found.refused is None else f"the one stored is {found.refused}"
        raise IntegrityError(
            f"shard {entry.key} ({entry.sha256}) has no trusted stored survey at {uri} ({why}): run the "
            "verification pass (verify_shard) over it under the scanner's key first"
        )
    return found.document


def survey_profile(split: str, entry: ShardEntry, survey: ShardSurvey) -> ShardProfile:
    """The shard's `ShardProfile` from its survey (`IntegrityError` for a state that does not read back)."""
    try:
        return shard_profile_from_state(split, entry.key, survey.profile)
    except ProfileError as exc:
        raise IntegrityError(
            f"the stored survey of shard {split}/{entry.key}: {exc}; delete it and verify again"
        ) from None


def survey_fields_of(survey: ShardSurvey) -> list[FieldSurvey]:
    """The shard's field surveys from its stored survey (`IntegrityError` for a state that does not read back)."""
    try:
        return [FieldSurvey.from_state(state) for state in survey.fields]
    except (KeyError, TypeError, ValueError) as exc:
        raise IntegrityError(
            f"the stored field survey of shard {survey.key.shard.shard_sha256}: "
            f"{type(exc).__name__} {exc}; delete it and verify again"
        ) from None


def shard_field_surveys(
    entries: Mapping[str, list[tuple[ShardEntry, ShardSurvey]]],
) -> dict[str, dict[str, tuple[list[FieldSurvey], int]]]:
    """Per split, each shard's field survey and record count by shard key (what the Croissant card
    merges into each split's fields, in manifest order)."""
    return {split: {e.key: (survey_fields_of(s), e.record_count) for e, s in pairs} for split, pairs in entries.items()}


def profile_from_surveys(
    manifest_uri: str, manifest_sha256: str, entries: Mapping[str, list[tuple[ShardEntry, ShardSurvey]]]
) -> DatasetProfile:
    """The `DatasetProfile` `profile_publication` makes under the default settings, merged from
    each shard's stored survey (per split, in manifest order) instead of reading the shards."""
    uri = normalize_uri(manifest_uri)
    splits = {}
    for split, pairs in entries.items():
        merged = SplitProfile(split)
        for entry, survey in pairs:
            merged.merge(survey_profile(split, entry, survey), entry.record_count)
        splits[split] = merged
    return DatasetProfile(uri, manifest_sha256, splits, TaskDataValidator(None, "auto", dataset=uri))
