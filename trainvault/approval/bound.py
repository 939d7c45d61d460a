"""The documents an approval request binds: hashed against the request, parsed, and judged against
each other and the trainer's policy. The gate does this before it hashes the data; a trainer's
open of a signed record does this and reads no shard byte (`trainvault.approval.opening`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from trainvault.approval.attestation import Attested, read_attested
from trainvault.approval.checks import (
    check_contract,
    check_exclusions,
    check_pins_allowed,
    check_report,
    check_scan,
    deny,
)
from trainvault.approval.hashing import ChunkConsumer, HashedObject, HashProgressCallback, hash_objects
from trainvault.approval.pins import ProducerPins
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.scan_manifest import (
    DeclaredFile,
    ScannedFile,
    TrainingScanManifest,
    declared_files,
    pinned_publication,
)
from trainvault.components.verify import LedgerRefusal
from trainvault.contamination.contract import VerifierContract
from trainvault.contamination.exclusions import EXCLUSIONS_SIDECAR, Exclusions
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.release import EvaluationRelease, LoadedRelease, release_items
from trainvault.contamination.report import ContaminationReport
from trainvault.documents import Document
from trainvault.errors import ApprovalError, IntegrityError, ManifestError, TrainVaultError
from trainvault.publication.bound import Bound
from trainvault.publication.pack import DescriptorBytes, PackedDescriptors, descriptor_bytes
from trainvault.publication.pinned import Publication
from trainvault.refs import ObjectRef
from trainvault.storage import Storage
from trainvault.uris import normalize_uri


def kept(obj: HashedObject) -> bytes:
    """The bytes `hash_objects` kept for `obj` (it keeps every object the gate asked for)."""
    if obj.data is None:
        raise ApprovalError(
            f"approval denied: {obj.uri} was hashed but its bytes were not kept; this is a trainvault bug"
        )
    return obj.data


def _parse(cls: type[Document], name: str, obj: HashedObject) -> Any:
    try:
        return cls.from_json_bytes(kept(obj), source=obj.uri)
    except ManifestError as exc:
        deny(f"{name} is not a readable {cls.KIND} v{cls.VERSION} ({exc}); bind a document this trainvault supports")


D = TypeVar("D", bound=Document)


def _bound(cls: type[D], name: str, obj: HashedObject) -> Bound[D]:
    """The document `obj` holds, with the reference its bytes were hashed under (read once)."""
    data = kept(obj)
    return Bound(ObjectRef(uri=obj.uri, sha256=obj.sha256, size=len(data)), _parse(cls, name, obj))


@contextmanager
def denials() -> Iterator[None]:
    """Errors of the checks as the gate and a trainer's open report them: a ledger refusal as its
    own error (it names range, record and shard), anything else typed as an `ApprovalError`."""
    try:
        yield
    except LedgerRefusal as exc:
        raise exc.error from None
    except ApprovalError:
        raise
    except TrainVaultError as exc:
        raise ApprovalError(f"approval denied: {exc}") from exc


#: What the gate hashes after the bound documents: everything the manifest declares but itself.
DATA_ROLES = frozenset({"shard", "descriptor", "descriptor-pack"})
#: What a trainer's open reads of it: the descriptors, no shard.
DESCRIPTOR_ROLES = frozenset({"descriptor", "descriptor-pack"})


@dataclass(frozen=True)
class BoundChain:
    """The bound documents, parsed and checked against each other and the policy."""

    publication: Publication
    declared: list[DeclaredFile]
    totals: dict[str, int]
    scanned: dict[str, ScannedFile]
    report: ContaminationReport
    pins: ProducerPins
    release: LoadedRelease
    #: The bound release indexed under the bound contract (the re-scan runs under it).
    index: EvalIndex
    signers: dict[str, tuple[str, ...]]
    exclusions: Exclusions | None


def hash_bound(storage: Storage, refs: Mapping[str, ObjectRef], threads: int) -> dict[str, HashedObject]:
    """Every bound artifact hashed (bytes kept, by name), each matching the digest the request binds."""
    uris = {name: normalize_uri(ref.uri) for name, ref in refs.items()}
    hashed = hash_objects(storage, list(uris.values()), keep=set(uris.values()), threads=threads)
    for name, ref in refs.items():
        got = hashed[uris[name]]
        if got.sha256 != ref.sha256:
            deny(
                f"{name} {uris[name]} has sha256 {got.sha256}, the request binds {ref.sha256}: it was replaced or "
                "altered; bind the artifact that was judged, or rebuild the chain"
            )
    return {name: hashed[uri] for name, uri in uris.items()}


def judge_chain(
    storage: Storage, refs: Mapping[str, ObjectRef], docs: Mapping[str, HashedObject], policy: ApprovalPolicy
) -> BoundChain:
    """Parse the bound documents and check scan, contract, report and pins against each other."""
    manifest_doc = docs["data_manifest"]
    try:
        publication = pinned_publication(manifest_doc.uri, kept(manifest_doc))
        declared, totals = declared_files(publication)
    except ManifestError as exc:
        deny(f"data_manifest: {exc}")
    scan = _attested(TrainingScanManifest, "training_scan_manifest", docs["training_scan_manifest"], policy)
    report = _attested(ContaminationReport, "contamination_report", docs["contamination_report"], policy)
    exclusions = None
    if EXCLUSIONS_SIDECAR in docs:
        exclusions = _parse(Exclusions, EXCLUSIONS_SIDECAR, docs[EXCLUSIONS_SIDECAR])
    contract: VerifierContract = _parse(VerifierContract, "verifier_contract", docs["verifier_contract"])
    pins: ProducerPins = _parse(ProducerPins, "producer_pins", docs["producer_pins"])
    release = release_items(storage, _bound(EvaluationRelease, "evaluation_release", docs["evaluation_release"]))

    scanned = check_scan(scan.document, refs["data_manifest"], publication.uri, declared, totals)
    check_contract(contract, refs["verifier_contract"], release, policy)
    if exclusions is not None:
        check_exclusions(exclusions, report.document, refs, publication.manifest, policy)
    index = EvalIndex(contract, release, contract_sha256=refs["verifier_contract"].sha256)
    check_report(report.document, refs, scan.document, index, exclusions)
    check_pins_allowed(pins, policy)
    if policy.evaluation_release_sha256 is not None and release.sha256 != policy.evaluation_release_sha256:
        deny(
            f"evaluation_release {release.release.id!r} (sha256 {release.sha256}) is not the release this trainer "
            f"evaluates on ({policy.evaluation_release_sha256}); scan against that release"
        )
    return BoundChain(
        publication,
        declared,
        totals,
        scanned,
        report.document,
        pins,
        release,
        index,
        {"report": report.signers, "scan": scan.signers},
        exclusions,
    )


def attach_descriptors(
    publication: Publication, hashed: Mapping[str, HashedObject], *, every: bool = True
) -> tuple[Publication, Mapping[str, bytes]]:
    """Every descriptor, parsed and checked against its entry, from the bytes just hashed: the
    pack's copy of each (which must hash to the manifest's ``descriptor_sha256``), or, for a
    manifest written before packs, each descriptor object's. `every=False`: each packed copy is
    made and checked when it is first asked for (the gate checked them all: the pack is bound)."""
    ref = publication.manifest.descriptor_pack
    if ref is None:
        raw = {e.descriptor_uri: kept(hashed[e.descriptor_uri]) for _, e in publication.entries()}
        return publication.with_descriptors(raw), raw
    attached = publication.with_pack(kept(hashed[ref.uri]))
    descriptors = attached.descriptors
    if not every and isinstance(descriptors, PackedDescriptors):
        return attached, DescriptorBytes(attached.manifest, descriptors, ref.uri)
    return attached, descriptor_bytes(attached.manifest, descriptors, ref.uri)


def _attested(cls: type[Document], name: str, obj: HashedObject, policy: ApprovalPolicy) -> Attested[Any]:
    """A bound report or scan manifest: signed by the policy's scanner keys, or (without them) plain."""
    try:
        return read_attested(
            kept(obj),
            cls,
            trusted_keys=policy.scanner_keys,
            threshold=policy.scanner_threshold,
            source=f"{name} {obj.uri}",
        )
    except ManifestError as exc:
        deny(f"{name} is not a readable {cls.KIND} v{cls.VERSION} ({exc}); bind a document this trainvault supports")


def hash_declared(
    storage: Storage,
    chain: BoundChain,
    roles: Collection[str],
    *,
    threads: int,
    progress: HashProgressCallback | None = None,
    consumers: Mapping[str, Callable[[], ChunkConsumer]] | None = None,
) -> dict[str, HashedObject]:
    """The declared files of `roles`, hashed now (descriptors kept: the loader parses exactly
    these bytes), each matching what was scanned and bound."""
    files = [f for f in chain.declared if f.role in roles]
    try:
        hashed = hash_objects(
            storage,
            [f.resolved for f in files],
            keep={f.resolved for f in files if f.role in ("descriptor", "descriptor-pack")},
            # No file is read past the size it was scanned as.
            bound_sizes={f.resolved: chain.scanned[f.resolved].size_bytes for f in files},
            threads=threads,
            progress=progress,
            consumers=consumers,
        )
    except IntegrityError as exc:
        deny(
            f"{exc}: it changed after it was scanned (swapped, truncated or extended); do not train on it: "
            "re-publish, rescan and approve again"
        )
    for f in files:
        h, s = hashed[f.resolved], chain.scanned[f.resolved]
        if (h.size, h.sha256) != (s.size_bytes, s.sha256):
            deny(
                f"{f.role} {f.resolved} is {h.size} bytes with sha256 {h.sha256} on storage, but was scanned and "
                f"bound as {s.size_bytes} bytes with sha256 {s.sha256}: it changed after it was scanned (swapped, "
                "truncated or extended); do not train on it: re-publish, rescan and approve again"
            )
    return hashed
