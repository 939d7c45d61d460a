"""The training scan manifest (training-scan-manifest-v1.json): every file a publication declares, re-hashed.

It lists the data manifest itself, its descriptor pack (or, in a manifest written before
packs, every completion descriptor) and every data object, each with the size and SHA-256
read from storage now (not copied from the manifest), plus totals. The contamination
report binds it, and the gate checks that its file set equals the manifest's, so no shard
goes unscanned and none is added.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from trainvault.approval.hashing import DEFAULT_THREADS, HashProgressCallback, hash_objects
from trainvault.documents import Document, StrictModel
from trainvault.errors import IntegrityError, ManifestError
from trainvault.publication.bound import Bound, write_document
from trainvault.publication.pinned import Publication
from trainvault.refs import Sha256
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri, parse_uri

SCAN_MANIFEST_NAME = "training-scan-manifest-v1.json"
Role = Literal["data-manifest", "descriptor", "descriptor-pack", "shard"]


class ScannedFile(StrictModel):
    """One file: where the manifest declares it (relative to its folder, or absolute), size and digest."""

    role: Role
    uri: str
    size_bytes: int = Field(ge=0)
    sha256: Sha256


class ScanTotals(StrictModel):
    """Files and bytes hashed; shards, records and shard bytes counted per manifest entry (as a report counts)."""

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
    data_manifest_sha256: Sha256
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


def declared_files(publication: Publication) -> tuple[list[DeclaredFile], dict[str, int]]:
    """The files `publication` declares (deduplicated, sorted by the URI as written; its
    references resolved under the manifest's folder) and the per-entry totals (shards,
    records, shard_bytes)."""
    name = parse_uri(publication.uri).path.rsplit("/", 1)[-1]
    found: dict[str, DeclaredFile] = {
        publication.uri: DeclaredFile("data-manifest", name, publication.uri, len(publication.raw), publication.sha256)
    }
    totals = {"shards": 0, "records": 0, "shard_bytes": 0}
    pack, resolved_pack = publication.as_written.descriptor_pack, publication.manifest.descriptor_pack
    if pack is not None and resolved_pack is not None:
        found[resolved_pack.uri] = DeclaredFile("descriptor-pack", pack.uri, resolved_pack.uri, pack.size, pack.sha256)
    for split_name, written in publication.as_written.splits.items():
        resolved = publication.manifest.splits[split_name].shards
        for e, r in zip(written.shards, resolved, strict=True):
            totals["shards"] += 1
            totals["records"] += e.record_count
            totals["shard_bytes"] += e.size_bytes
            files = [DeclaredFile("shard", e.uri, r.uri, e.size_bytes, e.sha256)]
            if pack is None:  # with a pack, the pack holds (and binds) every descriptor
                files.append(DeclaredFile("descriptor", e.descriptor_uri, r.descriptor_uri, None, e.descriptor_sha256))
            for f in files:
                seen = found.setdefault(f.resolved, f)
                if (seen.role, seen.size_bytes, seen.sha256) != (f.role, f.size_bytes, f.sha256):
                    raise ManifestError(
                        f"{publication.uri} split {split_name!r} shard {e.key!r}: {f.resolved} is declared twice with "
                        "different roles or digests"
                    )
    return sorted(found.values(), key=lambda f: f.uri), totals


def pinned_publication(uri: str, raw: bytes, *, sha256: str | None = None) -> Publication:
    """The publication whose manifest bytes are `raw`, every reference resolved under its folder:
    an approved dataset reads only objects there."""
    return Publication.from_bytes(uri, raw, sha256=sha256, absolute="within")


def build_training_scan_manifest(
    storage: StorageSource,
    manifest_uri: str,
    *,
    manifest_sha256: str | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
    verified: Collection[str] = (),
) -> TrainingScanManifest:
    """Re-hash every file the data manifest declares and list them with totals.

    A data object or descriptor whose size or digest differs from what the manifest
    binds raises `IntegrityError`: a scan manifest never records a broken publication.
    `verified`: data objects (resolved URIs) a verification pass has already hashed
    against the manifest's size and sha256; they are listed as bound and not read again.
    """
    return scan_publication(
        storage_of(storage),
        manifest_uri,
        manifest_sha256=manifest_sha256,
        progress=progress,
        threads=threads,
        verified=verified,
    )


def scan_publication(
    storage: Storage,
    manifest_uri: str,
    *,
    manifest_sha256: str | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
    verified: Collection[str] = (),
) -> TrainingScanManifest:
    """`build_training_scan_manifest` over a `Storage`."""
    manifest_uri = normalize_uri(manifest_uri)
    publication = pinned_publication(manifest_uri, storage.get_document(manifest_uri), sha256=manifest_sha256)
    raw, digest = publication.raw, publication.sha256
    declared, totals = declared_files(publication)
    others = [f for f in declared if f.role != "data-manifest" and not (f.role == "shard" and f.resolved in verified)]
    hashed = hash_objects(
        storage,
        [f.resolved for f in others],
        # Descriptors and their pack are documents: read whole (not streamed), as the gate reads them.
        keep={f.resolved for f in others if f.role in ("descriptor", "descriptor-pack")},
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
        if f.resolved not in hashed:  # verified: the manifest's binding was checked against its bytes
            files.append(ScannedFile(role=f.role, uri=f.uri, size_bytes=f.size_bytes or 0, sha256=f.sha256))
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
        totals=ScanTotals(files=len(files), file_bytes=sum(f.size_bytes for f in files), **totals),
    )


def write_training_scan_manifest(
    storage: StorageSource, uri: str, scan: TrainingScanManifest
) -> Bound[TrainingScanManifest]:
    """Publish the scan manifest create-only (usually next to the data manifest as
    ``training-scan-manifest-v1.json``); its digest is of the bytes written."""
    return write_document(storage_of(storage), uri, scan)
