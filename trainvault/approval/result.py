"""What the gate verified: the summary recorded in the approval statement, and the result
it hands an `ApprovedDataset` (kept apart from the gate so the approved dataset needs only
these, not the gate that produces them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainvault.approval.applied import AppliedPolicy
from trainvault.approval.request import ApprovalRequest
from trainvault.approval.rescan import RescanSummary
from trainvault.contamination.exclusions import Exclusions
from trainvault.contamination.report import ContaminationReport
from trainvault.documents import StrictModel
from trainvault.publication.pinned import Publication
from trainvault.refs import Sha256


class AttestationSummary(StrictModel):
    """The scanner keys that signed the report and the scan manifest, and the gate's re-scan."""

    report_signers: list[str]
    scan_manifest_signers: list[str]
    rescan: RescanSummary


class ExclusionSummary(StrictModel):
    """Records the bound exclusions leave out: in all, and per benchmark that gave a reason."""

    sha256: Sha256
    records: int
    per_benchmark: dict[str, int]


class VerificationSummary(StrictModel):
    """What the gate verified: recorded in the approval statement and shown to people."""

    data_manifest_sha256: str
    shards: int
    records: int
    shard_bytes: int
    files_hashed: int
    bytes_hashed: int
    evaluation_release_id: str
    benchmarks: list[str]
    contamination_method: str
    contaminated_items: int
    verdict_recomputed: bool
    trainvault_version: str
    #: With trusted scanner keys: who signed the report and scan manifest, and what the gate re-scanned.
    attestation: AttestationSummary | None = None
    #: With bound exclusions: how many records they leave out, per benchmark.
    exclusions: ExclusionSummary | None = None
    #: The policy the gate applied (None in records an older trainvault wrote): a trainer's open holds its own against it.
    policy: AppliedPolicy | None = None


@dataclass(frozen=True)
class GateResult:
    """Everything an `ApprovedDataset` is made from (internal)."""

    request: ApprovalRequest
    #: The manifest and every descriptor, parsed from the bytes the gate hashed.
    publication: Publication
    descriptors_raw: Mapping[str, bytes]
    shard_sizes: dict[str, int]
    report: ContaminationReport
    summary: VerificationSummary
    #: Split -> its bound component ledger, checked against every token (a CheckedLedger).
    ledgers: Mapping[str, Any] = field(default_factory=dict)
    #: The bound exclusions, checked to cover every hit (the loader skips their records).
    exclusions: Exclusions | None = None
