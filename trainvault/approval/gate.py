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

from collections.abc import Mapping
from typing import Any

from trainvault.approval.applied import AppliedPolicy
from trainvault.approval.approved import ApprovedDataset, issue
from trainvault.approval.bound import (
    DATA_ROLES,
    BoundChain,
    attach_descriptors,
    denials,
    hash_bound,
    hash_declared,
    judge_chain,
)
from trainvault.approval.checks import check_producer, check_text_fields
from trainvault.approval.hashing import (
    DEFAULT_THREADS,
    HashProgressCallback,
    continued,
    fed_by_hashing,
)
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.request import ApprovalRequest
from trainvault.approval.rescan import Rescan, RescanSummary
from trainvault.approval.result import AttestationSummary, ExclusionSummary, GateResult, VerificationSummary
from trainvault.components.verify import LedgerChecks
from trainvault.contamination.exclusions import EXCLUSIONS_SIDECAR
from trainvault.contamination.text_fields import TextFieldSurvey
from trainvault.errors import ApprovalError, ManifestError
from trainvault.refs import ObjectRef
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of
from trainvault.version import __version__


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
    with denials():
        return _gate(storage, request, policy, progress, threads)


def _gate(
    storage: Storage,
    request: ApprovalRequest,
    policy: ApprovalPolicy,
    progress: HashProgressCallback | None,
    threads: int,
) -> GateResult:
    refs = request.bindings()
    docs = hash_bound(storage, refs, threads)
    chain = judge_chain(storage, refs, docs, policy)
    # The descriptors the ledger checks and the drawn shards use come from the pack (one request,
    # checked against the manifest; each packed copy is bound to its descriptor_sha256 below).
    packed = chain.publication.read_pack(storage)
    ledgers = LedgerChecks(storage, refs, packed.manifest, refs["data_manifest"].sha256, packed.descriptors)
    survey = TextFieldSurvey(chain.index.contract, chain.index.normalizer)
    rescan = Rescan(storage, packed, chain.index, policy, survey)
    bound = {d.uri: d for d in docs.values()}  # an object bound twice was hashed once
    # The bar counts the bound documents too, as the summary does.
    shown = continued(progress, len(bound), sum(d.size for d in bound.values()))
    consumers = fed_by_hashing(ledgers.consumers(), rescan.consumers())
    hashed = hash_declared(storage, chain, DATA_ROLES, threads=threads, progress=shown, consumers=consumers)
    publication, descriptors_raw = attach_descriptors(chain.publication, hashed)
    for uri, desc in publication.descriptors.items():
        check_producer(desc, chain.pins, uri)
    checked = ledgers.finish()
    rescanned = rescan.finish(chain.report)
    exempted = check_text_fields(survey, chain.index.contract, policy)
    shard_sizes = {e.uri: e.size_bytes for _, e in publication.entries()}
    summary = _summary(
        refs,
        chain,
        rescanned,
        policy,
        AppliedPolicy.of(policy, shards_total=rescanned.shards_total, exempted_fields=exempted),
        files_hashed=len(hashed) + len(bound),
        bytes_hashed=sum(h.size for h in hashed.values()) + sum(d.size for d in bound.values()),
    )
    return GateResult(
        request, publication, descriptors_raw, shard_sizes, chain.report, summary, checked, chain.exclusions
    )


def _summary(
    refs: Mapping[str, ObjectRef],
    chain: BoundChain,
    rescan: RescanSummary,
    policy: ApprovalPolicy,
    applied: AppliedPolicy,
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
        policy=applied,
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
