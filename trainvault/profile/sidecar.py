"""Profiles of a publication: per-shard compute, per-split merge, ``<split>_metrics.json`` sidecars.

A shard's rows are read through `ShardReader` (every block verified before decoding),
observed into `DatasetMetrics` and checked by the `TaskDataValidator`. Shards are merged
in manifest order, so the published numbers are a pure function of the publication, the
schema and the hook. Each split's summary is written beside the manifest as
``<root>/<split>_metrics.json``, a versioned document that binds the manifest by sha256.
Its own sha256 is what an approval request binds (`approval_sidecars`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator

from trainvault.canonical import loads_strict, sha256_hex
from trainvault.documents import Document, StrictModel
from trainvault.errors import (
    ConflictError,
    IntegrityError,
    ManifestError,
    ObjectNotFoundError,
)
from trainvault.profile.metrics import TASK_ID_FIELD, DatasetMetrics, ExtraMetricsHook
from trainvault.profile.validation import (
    MAX_RECORDED_OFFENDING_ROWS,
    OffendingRow,
    TaskDataValidator,
    ValidationMode,
)
from trainvault.publication.manifest import DataManifest, ShardEntry, validate_name
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import ShardReader
from trainvault.refs import ObjectRef, Referenced, Sha256
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import join_uri, normalize_uri, parent_uri

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = "_metrics.json"


def sidecar_uri(manifest_uri: str, split: str) -> str:
    """``<root>/<split>_metrics.json``: beside the manifest."""
    validate_name("split", split)
    return join_uri(parent_uri(normalize_uri(manifest_uri)), f"{split}{SIDECAR_SUFFIX}")


def sidecar_name(split: str) -> str:
    """The name a split's sidecar has among an approval request's sidecars."""
    return f"{split}_metrics"


# -- documents ------------------------------------------------------------------


class ValidationSummary(StrictModel):
    mode: Literal["off", "warn", "error"]
    requested_mode: Literal["off", "warn", "error", "auto"]
    schema_ref: str | None  # "module:Class" of the pydantic model, None without a schema
    schema_sha256: Sha256 | None
    offending_count: int = Field(ge=0)
    # The first rows in manifest order (at most MAX_RECORDED_OFFENDING_ROWS); the count is exact.
    offending_rows: list[dict[str, Any]]


class MetricsSidecar(Document):
    """split-metrics-v1: one split's metrics and validation result, bound to its manifest."""

    KIND = "trainvault.split-metrics"

    format: Literal["trainvault.split-metrics"] = "trainvault.split-metrics"
    version: Literal[1] = 1
    split: str
    data_manifest_sha256: Sha256
    shards: int = Field(ge=0)
    records: int = Field(ge=0)
    metrics: dict[str, Any]
    validation: ValidationSummary

    @field_validator("split")
    @classmethod
    def _split(cls, value: str) -> str:
        return validate_name("split", value)


@dataclass(frozen=True)
class SidecarRef(Referenced):
    """A split's sidecar: its reference (``.uri``, ``.sha256``); `written` is False when an
    identical sidecar was already there."""

    split: str
    written: bool

    def artifact(self) -> dict[str, str]:
        """``{"uri", "sha256"}``: the shape of an approval request's `ObjectRef`."""
        return {"uri": self.uri, "sha256": self.sha256}


# -- computing ------------------------------------------------------------------


@dataclass
class ShardProfile:
    """Metrics and offending rows of one shard."""

    split: str
    shard_key: str
    metrics: DatasetMetrics
    offending: list[OffendingRow] = field(default_factory=list)
    offending_count: int = 0


@dataclass
class ProfileSettings:
    """What a profile depends on besides the data: schema/mode, hook, task id field, label bound."""

    validator: TaskDataValidator = field(default_factory=TaskDataValidator)
    hook: ExtraMetricsHook | None = None
    task_id_field: str = TASK_ID_FIELD
    max_labels: int | None = None


class ShardProfiler:
    """Computes one shard's `ShardProfile` from its records as they are read, block by block."""

    def __init__(self, split: str, entry: ShardEntry, settings: ProfileSettings | None = None):
        self.entry, self.settings = entry, settings or ProfileSettings()
        self.profile = ShardProfile(
            split=split, shard_key=entry.key, metrics=DatasetMetrics(max_labels=self.settings.max_labels)
        )
        self.records = 0

    def observe(self, rows: Iterable[Mapping[str, Any]]) -> None:
        settings, out = self.settings, self.profile
        for row in rows:
            out.metrics.observe(row, hook=settings.hook, task_id_field=settings.task_id_field)
            reason = settings.validator.check(row)
            if reason is not None:
                out.offending_count += 1
                if len(out.offending) < MAX_RECORDED_OFFENDING_ROWS:
                    out.offending.append(OffendingRow(out.split, out.shard_key, self.records, reason))
            self.records += 1

    def finish(self) -> ShardProfile:
        """The profile, once every record was observed (`IntegrityError` if the count is not the entry's)."""
        if self.records != self.entry.record_count:
            raise IntegrityError(
                f"{self.entry.uri}: read {self.records} records, the manifest says {self.entry.record_count}"
            )
        return self.profile


def profile_shard(
    storage: StorageSource, data_format: str, split: str, entry: ShardEntry, settings: ProfileSettings | None = None
) -> ShardProfile:
    """Read one shard (blocks verified) and compute its metrics and offending rows."""
    storage = storage_of(storage)
    profiler = ShardProfiler(split, entry, settings)
    for _, rows in ShardReader(storage, entry, data_format).iter_blocks():
        profiler.observe(rows)
    return profiler.finish()


class SplitProfile:
    """Shard profiles of one split merged in manifest order."""

    def __init__(self, split: str, *, max_labels: int | None = None):
        self.split = validate_name("split", split)
        self.metrics = DatasetMetrics(max_labels=max_labels)
        self.shards: list[str] = []
        self.records = 0
        self.offending: list[OffendingRow] = []
        self.offending_count = 0

    def merge(self, shard: ShardProfile, record_count: int | None = None) -> SplitProfile:
        """Fold the next shard in. Keeping the first offending rows of each shard in order
        keeps exactly the first rows of the whole split, whatever the sharding."""
        if shard.split != self.split:
            raise ManifestError(
                f"shard {shard.shard_key} of split {shard.split!r} cannot merge into split {self.split!r}"
            )
        if shard.shard_key in self.shards:
            raise ManifestError(f"shard {self.split}/{shard.shard_key} was merged twice")
        self.metrics.merge(shard.metrics)
        self.shards.append(shard.shard_key)
        self.records += shard.metrics.number_of_examples if record_count is None else record_count
        room = MAX_RECORDED_OFFENDING_ROWS - len(self.offending)
        self.offending.extend(shard.offending[: max(room, 0)])
        self.offending_count += shard.offending_count
        return self

    def sidecar(self, data_manifest_sha256: str, validator: TaskDataValidator) -> MetricsSidecar:
        described = validator.describe()
        return MetricsSidecar(
            split=self.split,
            data_manifest_sha256=data_manifest_sha256,
            shards=len(self.shards),
            records=self.records,
            metrics=json.loads(json.dumps(self.metrics.to_json())),
            validation=ValidationSummary(
                mode=described["mode"],
                requested_mode=described["requested_mode"],
                schema_ref=described["schema"],
                schema_sha256=described["schema_sha256"],
                offending_count=self.offending_count,
                offending_rows=[o.to_json() for o in self.offending],
            ),
        )


@dataclass
class DatasetProfile:
    """A publication's profile: one `SplitProfile` per split, with the manifest it describes."""

    manifest_uri: str
    manifest_sha256: str
    splits: dict[str, SplitProfile]
    validator: TaskDataValidator

    @property
    def offending_count(self) -> int:
        return sum(s.offending_count for s in self.splits.values())

    @property
    def offending(self) -> list[OffendingRow]:
        return [o for s in self.splits.values() for o in s.offending]

    def sidecars(self) -> dict[str, MetricsSidecar]:
        """The ``<split>_metrics.json`` documents, per split."""
        return {name: s.sidecar(self.manifest_sha256, self.validator) for name, s in self.splits.items()}

    def raise_if_invalid(self) -> None:
        """`TaskDataValidationError` in ``error`` mode when any row offended; else nothing."""
        self.validator.raise_for(self.offending, self.offending_count)


def load_manifest_pinned(storage: Storage, manifest_uri: str, sha256: str | None = None) -> tuple[DataManifest, str]:
    """The manifest at `manifest_uri` with absolute shard URIs, and the sha256 of its stored bytes.

    With `sha256`, bytes that hash differently raise `IntegrityError`.
    """
    publication = Publication.load(storage, manifest_uri, sha256=sha256)
    return publication.manifest, publication.sha256


def profile_publication(
    storage: StorageSource,
    manifest_uri: str,
    *,
    manifest_sha256: str | None = None,
    splits: Sequence[str] | None = None,
    schema: Any = None,
    validation: ValidationMode = "auto",
    hook: ExtraMetricsHook | None = None,
    task_id_field: str = TASK_ID_FIELD,
    max_labels: int | None = None,
    workers: int = 8,
    raise_on_invalid: bool = True,
) -> DatasetProfile:
    """Profile every shard of the chosen splits (all by default) and merge per split.

    `schema`: the dataset's pydantic model (or ``"module:Class"``); `validation`: off, warn,
    error or auto. In error mode offending rows raise `TaskDataValidationError` after all
    shards are read, unless `raise_on_invalid` is False (then call `raise_if_invalid`).
    """
    storage = storage_of(storage)
    manifest, digest = load_manifest_pinned(storage, manifest_uri, manifest_sha256)
    validator = TaskDataValidator(schema, validation, dataset=normalize_uri(manifest_uri))
    settings = ProfileSettings(validator=validator, hook=hook, task_id_field=task_id_field, max_labels=max_labels)
    chosen = list(manifest.splits) if splits is None else list(dict.fromkeys(splits))
    for s in chosen:
        manifest.split(s)  # an unknown split raises SelectionError listing the published ones
    jobs: list[tuple[str, ShardEntry]] = [(s, e) for s in chosen for e in manifest.splits[s].shards]
    # Threads overlap reads and decompression; merging stays in manifest order below.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        shard_profiles: Iterable[ShardProfile] = pool.map(
            lambda job: profile_shard(storage, manifest.data_format, job[0], job[1], settings), jobs
        )
        out = {s: SplitProfile(s, max_labels=max_labels) for s in chosen}
        for (split, entry), sp in zip(jobs, shard_profiles, strict=False):
            out[split].merge(sp, entry.record_count)
    profile = DatasetProfile(normalize_uri(manifest_uri), digest, out, validator)
    if profile.offending_count:
        log.warning("%s: %d row(s) do not match the task-data schema", profile.manifest_uri, profile.offending_count)
    if raise_on_invalid:
        profile.raise_if_invalid()
    return profile


# -- writing ----------------------------------------------------------------------


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        if not value and prefix:
            out[prefix] = {}
        return out
    return {prefix: value}


def differing_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ (present on one side only counts)."""
    a, b = _flatten(old), _flatten(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k, ...) != b.get(k, ...))


def write_metrics_sidecar(
    storage: StorageSource, uri: str, sidecar: MetricsSidecar, *, overwrite: bool = False
) -> SidecarRef:
    """Write `sidecar` at `uri`. Identical bytes there already: nothing is written. A sidecar
    with different values: `ConflictError` naming the differing keys, unless `overwrite`
    (which replaces it, so approvals bound to the old digest stop matching, as they should)."""
    storage = storage_of(storage)
    uri = normalize_uri(uri)
    data = sidecar.to_json_bytes()
    digest = sha256_hex(data)
    ref = ObjectRef(uri=uri, sha256=digest, size=len(data))
    for _ in range(2):
        try:
            existing = storage.get_document(uri)
        except ObjectNotFoundError:
            try:
                created = storage.put_create(uri, data)
            except ConflictError:
                continue  # another writer got there first: compare with what it wrote
            return SidecarRef(ref, sidecar.split, created)
        if existing == data:
            return SidecarRef(ref, sidecar.split, False)
        if not overwrite:
            try:
                old = loads_strict(existing, source=uri)
                keys = differing_keys(old, loads_strict(data, source=uri))
            except ValueError:  # ManifestError too
                keys = ["(the existing object is not JSON)"]
            shown = ", ".join(keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
            raise ConflictError(
                f"{uri} already holds metrics with different values ({shown}); the data, schema or hook changed. "
                "Publish to a new location, or pass overwrite=True to replace it (approvals bound to the old "
                "sidecar will no longer match)"
            )
        storage.put(uri, data)
        return SidecarRef(ref, sidecar.split, True)
    raise ConflictError(f"{uri} keeps changing while being written; another writer is racing: retry later")


def write_metrics_sidecars(
    storage: StorageSource, profile: DatasetProfile, *, overwrite: bool = False
) -> dict[str, SidecarRef]:
    """Write every split's ``<split>_metrics.json``; all are checked for conflicts before any is written."""
    storage = storage_of(storage)
    docs = profile.sidecars()
    if not overwrite:
        # Fail before writing anything, so a conflict in one split leaves the others untouched.
        for split, doc in docs.items():
            uri = sidecar_uri(profile.manifest_uri, split)
            try:
                existing = storage.get_document(uri)
            except ObjectNotFoundError:
                continue
            if existing != doc.to_json_bytes():
                write_metrics_sidecar(storage, uri, doc)  # raises the ConflictError naming the keys
    return {
        split: write_metrics_sidecar(storage, sidecar_uri(profile.manifest_uri, split), doc, overwrite=overwrite)
        for split, doc in docs.items()
    }


def read_metrics_sidecar(storage: StorageSource, uri: str, sha256: str | None = None) -> MetricsSidecar:
    """Read a sidecar; with `sha256`, bytes that hash differently raise `IntegrityError`."""
    storage = storage_of(storage)
    uri = normalize_uri(uri)
    raw = storage.get_document(uri)
    if sha256 is not None and sha256_hex(raw) != sha256:
        raise IntegrityError(
            f"{uri}: sha256 does not match the one that binds it; the sidecar changed after it was bound"
        )
    return MetricsSidecar.from_json_bytes(raw, source=uri)


def approval_sidecars(refs: Mapping[str, SidecarRef]) -> dict[str, dict[str, str]]:
    """``{"<split>_metrics": {"uri", "sha256"}}``: pass as ``ApprovalRequest(sidecars=...)``."""
    return {sidecar_name(split): ref.artifact() for split, ref in sorted(refs.items())}
