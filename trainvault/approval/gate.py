"""The approval gate: hash every bound artifact and every scanned file, check that they
agree with each other, recompute the verdict (after bound exclusions), re-scan a sample of
shards, and only then hand out an `ApprovedDataset`.

With scanner keys in the policy, the report and the scan manifest must be attestations
signed by them (`UntrustedSignerError` otherwise); without, the gate trusts no report and
re-scans every shard.

The gate is monotonic (deny unless every check passes): a missing binding, an unreadable
or unknown document, a digest that differs, or a verdict that does not follow from the
counts raises `ApprovalError` naming what failed and what to do. A bound component ledger
is checked in the same pass that hashes its shards (`trainvault.components.verify`); its
refusals keep their own class (`IntegrityError`, `ManifestError`, `CustodyError`) and
name range, record and shard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainvault.approval.approved import ApprovedDataset, issue
from trainvault.approval.attestation import Attested, read_attested
from trainvault.approval.checks import (
    check_contract,
    check_exclusions,
    check_pins_allowed,
    check_producer,
    check_report,
    check_scan,
    check_text_fields,
    deny,
)
from trainvault.approval.hashing import (
    DEFAULT_THREADS,
    ChunkConsumer,
    HashedObject,
    HashProgressCallback,
    continued,
    fed_by_hashing,
    hash_objects,
)
from trainvault.approval.pins import ProducerPins
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.request import ApprovalRequest
from trainvault.approval.rescan import Rescan, RescanSummary
from trainvault.approval.result import AttestationSummary, ExclusionSummary, GateResult, VerificationSummary
from trainvault.approval.scan_manifest import (
    DeclaredFile,
    ScannedFile,
    TrainingScanManifest,
    declared_files,
    pinned_publication,
)
from trainvault.components.verify import LedgerChecks, LedgerRefusal
from trainvault.contamination.contract import VerifierContract
from trainvault.contamination.exclusions import EXCLUSIONS_SIDECAR, Exclusions
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.release import LoadedRelease, load_release
from trainvault.contamination.report import ContaminationReport
from trainvault.contamination.text_fields import TextFieldSurvey
from trainvault.documents import Document
from trainvault.errors import ApprovalError, IntegrityError, ManifestError, TrainVaultError
from trainvault.publication.pack import descriptor_bytes
from trainvault.publication.pinned import Publication
from trainvault.refs import ArtifactRef
from trainvault.storage import Storage, StorageSource, storage_of
from trainvault.uris import normalize_uri
from trainvault.version import __version__


def _kept(obj: HashedObject) -> bytes:
    """The bytes `hash_objects` kept for `obj` (it keeps every object the gate asked for)."""
    if obj.data is None:
        raise ApprovalError(
            f"approval denied: {obj.uri} was hashed but its bytes were not kept; this is a trainvault bug"
        )
    return obj.data


def _parse(cls: type[Document], name: str, obj: HashedObject) -> Any:
    try:
        return cls.from_json_bytes(_kept(obj), source=obj.uri)
    except ManifestError as exc:
        deny(f"{name} is not a readable {cls.KIND} v{cls.VERSION} ({exc}); bind a document this trainvault supports")


def coerce_request(request: Any) -> ApprovalRequest:
    """An `ApprovalRequest` from itself, a parsed JSON object, or JSON bytes."""
    if isinstance(request, ApprovalRequest):
        return request
    try:
        if isinstance(request, (bytes, str)):
            return ApprovalRequest.from_json_bytes(request, source="approval request")
        return ApprovalRequest.from_obj(request, source="approval request")
    except ManifestError as exc:
        raise ApprovalError(f"approval denied: {exc}") from None


def run_gate(
    storage: Storage,
    request: Any,
    *,
    policy: ApprovalPolicy | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
) -> GateResult:
    """Run every check; return what was verified, or raise `ApprovalError`."""
    request = coerce_request(request)
    if policy is not None and not isinstance(policy, ApprovalPolicy):
        raise TypeError(f"policy must be an ApprovalPolicy, not {type(policy).__name__}")
    policy = policy or ApprovalPolicy()
    try:
        return _gate(storage, request, policy, progress, threads)
    except LedgerRefusal as exc:
        raise exc.error from None
    except ApprovalError:
        raise
    except TrainVaultError as exc:
        raise ApprovalError(f"approval denied: {exc}") from exc


def _gate(
    storage: Storage,
    request: ApprovalRequest,
    policy: ApprovalPolicy,
    progress: HashProgressCallback | None,
    threads: int,
) -> GateResult:
    refs = request.bindings()
    docs = _hash_bound(storage, refs, threads)
    chain = _judge_chain(storage, refs, docs, policy)
    ledgers = LedgerChecks(storage, refs, chain.publication.manifest, refs["data_manifest"].sha256)
    survey = TextFieldSurvey(chain.index.contract, chain.index.normalizer)
    # The drawn shards' descriptors come from the pack (one request, checked against the manifest).
    rescan = Rescan(storage, chain.publication.read_pack(storage), chain.index, policy, survey)
    bound = {d.uri: d for d in docs.values()}  # an object bound twice was hashed once
    # The bar counts the bound documents too, as the summary does.
    shown = continued(progress, len(bound), sum(d.size for d in bound.values()))
    hashed = _hash_declared(storage, chain, threads, shown, fed_by_hashing(ledgers.consumers(), rescan.consumers()))
    publication, descriptors_raw = _attach_descriptors(chain.publication, hashed)
    for uri, desc in publication.descriptors.items():
        check_producer(desc, chain.pins, uri)
    checked = ledgers.finish()
    rescanned = rescan.finish(chain.report)
    check_text_fields(survey, chain.index.contract, policy)
    shard_sizes = {e.uri: e.size_bytes for _, e in publication.entries()}
    summary = _summary(
        refs,
        chain,
        rescanned,
        policy,
        files_hashed=len(hashed) + len(bound),
        bytes_hashed=sum(h.size for h in hashed.values()) + sum(d.size for d in bound.values()),
    )
    return GateResult(
        request, publication, descriptors_raw, shard_sizes, chain.report, summary, checked, chain.exclusions
    )


@dataclass(frozen=True)
class _Chain:
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


def _hash_bound(storage: Storage, refs: Mapping[str, ArtifactRef], threads: int) -> dict[str, HashedObject]:
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


def _judge_chain(
    storage: Storage, refs: Mapping[str, ArtifactRef], docs: Mapping[str, HashedObject], policy: ApprovalPolicy
) -> _Chain:
    """Parse the bound documents and check scan, contract, report and pins against each other."""
    manifest_doc = docs["data_manifest"]
    try:
        publication = pinned_publication(manifest_doc.uri, _kept(manifest_doc))
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
    release = load_release(storage, docs["evaluation_release"].uri, sha256=refs["evaluation_release"].sha256)

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
    return _Chain(
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


def _attach_descriptors(
    publication: Publication, hashed: Mapping[str, HashedObject]
) -> tuple[Publication, dict[str, bytes]]:
    """Every descriptor, parsed and checked against its entry, from the bytes just hashed: the
    pack's copy of each (which must hash to the manifest's ``descriptor_sha256``), or, for a
    manifest written before packs, each descriptor object's."""
    ref = publication.manifest.descriptor_pack
    if ref is None:
        raw = {e.descriptor_uri: _kept(hashed[e.descriptor_uri]) for _, e in publication.entries()}
        return publication.with_descriptors(raw), raw
    attached = publication.with_pack(_kept(hashed[ref.uri]))
    return attached, descriptor_bytes(attached.manifest, attached.descriptors, ref.uri)


def _attested(cls: type[Document], name: str, obj: HashedObject, policy: ApprovalPolicy) -> Attested[Any]:
    """A bound report or scan manifest: signed by the policy's scanner keys, or (without them) plain."""
    try:
        return read_attested(
            _kept(obj),
            cls,
            trusted_keys=policy.scanner_keys,
            threshold=policy.scanner_threshold,
            source=f"{name} {obj.uri}",
        )
    except ManifestError as exc:
        deny(f"{name} is not a readable {cls.KIND} v{cls.VERSION} ({exc}); bind a document this trainvault supports")


def _hash_declared(
    storage: Storage,
    chain: _Chain,
    threads: int,
    progress: HashProgressCallback | None,
    consumers: Mapping[str, Callable[[], ChunkConsumer]],
) -> dict[str, HashedObject]:
    """Every declared file but the manifest, hashed now (descriptors kept: the loader parses exactly
    these bytes), each matching what was scanned and bound."""
    files = [f for f in chain.declared if f.role != "data-manifest"]
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


def _summary(
    refs: Mapping[str, ArtifactRef],
    chain: _Chain,
    rescan: RescanSummary,
    policy: ApprovalPolicy,
    *,
    files_hashed: int,
    bytes_hashed: int,
) -> VerificationSummary:
    report = chain.report
    attestation = None
    # Without scanner keys every shard was re-scanned and the summary keeps its v1 fields, so
    # the records of such chains keep their bytes.
    if policy.scanner_keys is not None:
        attestation = AttestationSummary(
            report_signers=list(chain.signers["report"]),
            scan_manifest_signers=list(chain.signers["scan"]),
            rescan=rescan,
        )
    excluded = None
    if chain.exclusions is not None:
        excluded = ExclusionSummary(
            sha256=refs[EXCLUSIONS_SIDECAR].sha256,
            records=len(chain.exclusions.records),
            per_benchmark=chain.exclusions.per_benchmark(),
        )
    return VerificationSummary(
        data_manifest_sha256=refs["data_manifest"].sha256,
        shards=chain.totals["shards"],
        records=chain.totals["records"],
        shard_bytes=chain.totals["shard_bytes"],
        files_hashed=files_hashed,
        bytes_hashed=bytes_hashed,
        evaluation_release_id=chain.release.release.id,
        benchmarks=[b.name for b in report.benchmarks],
        contamination_method=report.method.id,
        contaminated_items=len(report.contaminated_items),
        verdict_recomputed=True,
        trainvault_version=__version__,
        attestation=attestation,
        exclusions=excluded,
    )


def approve_dataset(
    storage: StorageSource,
    request: Any,
    *,
    policy: ApprovalPolicy | None = None,
    progress: HashProgressCallback | None = None,
    threads: int = DEFAULT_THREADS,
) -> ApprovedDataset:
    """Run the gate over `request` (an `ApprovalRequest`, its JSON object or bytes) and
    return the `ApprovedDataset`, or raise `ApprovalError` saying what failed.

    Reads and hashes every bound artifact and every file the scan manifest declares
    (on `threads` threads, reporting to `progress`) before anything is returned. A bound
    component ledger is checked in that pass; its refusals keep their class (module doc).
    """
    result = run_gate(storage_of(storage), request, policy=policy, progress=progress, threads=threads)
    return issue(result, storage_of(storage).config)
