"""The training scan manifest (training-scan-manifest-v1.json): every file a publication declares, re-hashed.

It lists the data manifest itself, every completion descriptor and every data object,
each with the size and SHA-256 read from storage now (not copied from the manifest), plus
totals. The contamination report binds it, and the gate checks that its file set equals
the manifest's, so no shard goes unscanned and none is added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainvault.approval.hashing import DEFAULT_THREADS, hash_objects
from trainvault.approval.progress import HashProgressCallback
from trainvault.canonical import sha256_hex
from trainvault.contamination.bound import Bound, publish_document
from trainvault.documents import Document
from trainvault.errors import IntegrityError, ManifestError
from trainvault.manifest import DataManifest
from trainvault.storage import Storage, is_within, join_uri, normalize_uri, parent_uri, parse_uri

if TYPE_CHECKING:
    from trainvault.client import TrainVault

SCAN_MANIFEST_NAME = "training-scan-manifest-v1.json"
_SHA = r"^[0-9a-f]{64}$"
Role = Literal["data-manifest", "descriptor", "shard"]


class ScannedFile(BaseModel):
    """One file: where the manifest declares it (relative to its folder, or absolute), size and digest."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    role: Role
    uri: str
    size_bytes: int = Field(ge=0)
    sha256: str = Field(pattern=_SHA)


class ScanTotals(BaseModel):
    """Files and bytes hashed; shards, records and shard bytes counted per manifest entry (as a report counts)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    files: int = Field(ge=0)
    file_bytes: int = Field(ge=0)
    shards: int = Field(ge=0)
    records: int = Field(ge=0)
    shard_bytes: int = Field(ge=0)


class TrainingScanManifest(Document):
    """training-scan-manifest-v1: the files of one data manifest as hashed from storage."""

    KIND = "trainvault.training-scan-manifest"

    format: Literal["trainvault.training-scan-manifest"] = "trainvault.training-scan-manifest"
    version: Literal[1] = 1
    data_manifest_sha256: str = Field(pattern=_SHA)
    files: list[ScannedFile] = Field(min_length=1)
    totals: ScanTotals

    @model_validator(mode="after")
    def _consistent(self) -> TrainingScanManifest:
        uris = [f.uri for f in self.files]
        if uris != sorted(set(uris)):
            raise ValueError("files must be sorted by uri, each once")
        manifests = [f for f in self.files if f.role == "data-manifest"]
        if len(manifests) != 1 or manifests[0].sha256 != self.data_manifest_sha256:
            raise ValueError("files must hold exactly one data-manifest entry, with data_manifest_sha256")
        if self.totals.files != len(self.files) or self.totals.file_bytes != sum(f.size_bytes for f in self.files):
            raise ValueError("totals.files and totals.file_bytes disagree with the file list")
        return self


@dataclass(frozen=True)
class DeclaredFile:
    """A file a data manifest declares: as written there, resolved, and the size/digest it binds."""

    role: Role
    uri: str
    resolved: str
    size_bytes: int | None  # descriptors are bound by digest only
    sha256: str


def _resolve_declared(uri: str, base: str, where: str) -> str:
    # Dot segments mean nothing to an object store but would let a key look inside the root.
    if any(seg in (".", "..") for seg in uri.split("://", 1)[-1].split("/")):
        raise ManifestError(f"{where}: URI {uri!r} has '.' or '..' segments; declare plain paths under the dataset root")
    resolved = normalize_uri(uri) if ("://" in uri or uri.startswith("/")) else join_uri(base, uri)
    if not is_within(resolved, base):
        raise ManifestError(
            f"{where}: URI {uri!r} escapes the dataset root {base}; an approved dataset reads only objects under "
            "the folder of its data manifest: copy the data there"
        )
    return resolved


def declared_files(manifest_uri: str, raw: bytes) -> tuple[DataManifest, list[DeclaredFile], dict[str, int]]:
    """Parse manifest bytes; return it, its declared files (deduplicated, each under the
    manifest's folder) and the per-entry totals (shards, records, shard_bytes)."""
    manifest_uri = normalize_uri(manifest_uri)
    base = parent_uri(manifest_uri)
    manifest = DataManifest.from_json_bytes(raw, source=manifest_uri)
    name = parse_uri(manifest_uri).path.rsplit("/", 1)[-1]
    found: dict[str, DeclaredFile] = {
        manifest_uri: DeclaredFile("data-manifest", name, manifest_uri, len(raw), sha256_hex(raw))
    }
    totals = {"shards": 0, "records": 0, "shard_bytes": 0}
    for split_name, split in manifest.splits.items():
        for e in split.shards:
            where = f"{manifest_uri} split {split_name!r} shard {e.key!r}"
            totals["shards"] += 1
            totals["records"] += e.record_count
            totals["shard_bytes"] += e.size_bytes
            for f in (
                DeclaredFile("shard", e.uri, _resolve_declared(e.uri, base, where), e.size_bytes, e.sha256),
                DeclaredFile("descriptor", e.descriptor_uri, _resolve_declared(e.descriptor_uri, base, where), None,
                             e.descriptor_sha256),
            ):
                seen = found.setdefault(f.resolved, f)
                if (seen.role, seen.size_bytes, seen.sha256) != (f.role, f.size_bytes, f.sha256):
                    raise ManifestError(f"{where}: {f.resolved} is declared twice with different roles or digests")
    return manifest, sorted(found.values(), key=lambda f: f.uri), totals


def build_training_scan_manifest(
    vault: TrainVault,
    manifest_uri: str,
    *,
    manifest_sha256: str | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
) -> TrainingScanManifest:
    """Re-hash every file the data manifest declares and list them with totals.

    A data object or descriptor whose size or digest differs from what the manifest
    binds raises `IntegrityError`: a scan manifest never records a broken publication.
    """
    return scan_publication(vault.storage, manifest_uri, manifest_sha256=manifest_sha256, progress=progress,
                            threads=threads)


def scan_publication(
    storage: Storage,
    manifest_uri: str,
    *,
    manifest_sha256: str | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
) -> TrainingScanManifest:
    """`build_training_scan_manifest` over a `Storage`."""
    manifest_uri = normalize_uri(manifest_uri)
    raw = storage.get_document(manifest_uri)
    digest = sha256_hex(raw)
    if manifest_sha256 is not None and digest != manifest_sha256:
        raise IntegrityError(f"{manifest_uri}: sha256 is {digest}, expected {manifest_sha256}; bind the manifest you mean")
    _, declared, totals = declared_files(manifest_uri, raw)
    others = [f for f in declared if f.role != "data-manifest"]
    hashed = hash_objects(
        storage,
        [f.resolved for f in others],
        expected_sizes={f.resolved: f.size_bytes or 0 for f in others},
        bound_sizes={f.resolved: f.size_bytes for f in others if f.size_bytes is not None},
        threads=threads,
        progress=progress,
    )
    files = []
    for f in declared:
        if f.role == "data-manifest":
            files.append(ScannedFile(role=f.role, uri=f.uri, size_bytes=len(raw), sha256=digest))
            continue
        h = hashed[f.resolved]
        if h.sha256 != f.sha256 or (f.size_bytes is not None and h.size != f.size_bytes):
            raise IntegrityError(
                f"{f.resolved}: {h.size} bytes with sha256 {h.sha256}, the manifest binds "
                f"{f.size_bytes if f.size_bytes is not None else '?'} bytes with sha256 {f.sha256}; the {f.role} "
                "was changed after publication: re-publish it"
            )
        files.append(ScannedFile(role=f.role, uri=f.uri, size_bytes=h.size, sha256=h.sha256))
    return TrainingScanManifest(
        data_manifest_sha256=digest,
        files=files,
        totals=ScanTotals(
            files=len(files), file_bytes=sum(f.size_bytes for f in files), **totals
        ),
    )


def write_training_scan_manifest(
    vault: TrainVault, uri: str, scan: TrainingScanManifest
) -> Bound[TrainingScanManifest]:
    """Publish the scan manifest create-only (usually next to the data manifest as
    ``training-scan-manifest-v1.json``); its digest is of the bytes written."""
    return publish_document(vault.storage, uri, scan)
