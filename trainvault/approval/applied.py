"""The policy an approver's gate applied, as the signed record carries it, and a trainer's policy
held against it.

The gate judges some things only by reading data: which record fields carry text (the field
survey) and whether the report is true of the shards (the re-scan). A trainer's open reads no
data, so what it relies on there is what the approver's gate did, under the policy recorded
here and signed with the record; `check_applied` refuses a record whose approver allowed more
than the trainer's policy does. Everything else the policy decides (scanner signatures,
contract looseness, exclusions and their fraction, producer pins, the release) is judged again
on the bound documents under the trainer's own policy.
"""

from __future__ import annotations

from typing import Literal

from trainvault.approval.policy import ApprovalPolicy
from trainvault.contamination.contract import BenchmarkLimits
from trainvault.contamination.text_fields import exempt
from trainvault.documents import StrictModel
from trainvault.errors import ApprovalError, UnscannedFieldError


class AppliedPolicy(StrictModel):
    """The `ApprovalPolicy` the gate approved under (scanner keys by key id), and what it did
    with it: the shards it re-scanned and the text-carrying fields it found and exempted."""

    version: Literal[1] = 1
    # None fields are left out of the signed record (it is dumped without them): they default to None.
    evaluation_release_sha256: str | None = None
    verifier_contract_sha256: str | None = None
    allowed_producers: dict[str, list[str]] | None = None
    min_policy: BenchmarkLimits
    #: Key ids of the trusted scanner keys (None: no report trusted, every shard re-scanned).
    scanner_keys: list[str] | None = None
    scanner_threshold: int
    rescan_min_shards: int
    #: (numerator, denominator), as JSON holds it.
    rescan_fraction: list[int]
    #: Distinct shard objects the gate re-scanned and surveyed, of `shards_total`.
    shards_rescanned: int
    shards_total: int
    allow_exclusions: bool
    max_excluded_fraction: list[int]
    unscanned_fields: list[str]
    #: Fields the survey found carrying text that the contract does not scan, exempted by `unscanned_fields`.
    exempted_fields: list[str]

    @classmethod
    def of(cls, policy: ApprovalPolicy, *, shards_total: int, exempted_fields: list[str]) -> AppliedPolicy:
        """What the gate applied: `policy` over `shards_total` distinct shard objects."""
        producers = policy.allowed_producers
        return cls(
            evaluation_release_sha256=policy.evaluation_release_sha256,
            verifier_contract_sha256=policy.verifier_contract_sha256,
            allowed_producers=None if producers is None else {k: sorted(v) for k, v in producers.items()},
            min_policy=policy.min_policy,
            scanner_keys=None if policy.scanner_keys is None else sorted(k.keyid for k in policy.scanner_keys),
            scanner_threshold=policy.scanner_threshold,
            rescan_min_shards=policy.rescan_min_shards,
            rescan_fraction=list(policy.rescan_fraction),
            shards_rescanned=policy.rescan_count(shards_total),
            shards_total=shards_total,
            allow_exclusions=policy.allow_exclusions,
            max_excluded_fraction=list(policy.max_excluded_fraction),
            unscanned_fields=list(policy.unscanned_fields),
            exempted_fields=sorted(exempted_fields),
        )

    def describe(self) -> list[str]:
        """One line per setting, as `trainvault verify` and the asset's metadata show them."""
        keys = (
            "none (every shard re-scanned)"
            if self.scanner_keys is None
            else ", ".join(k[:16] for k in self.scanner_keys)
        )
        n, d = self.max_excluded_fraction
        return [
            f"scanner keys: {keys} (threshold {self.scanner_threshold})",
            f"re-scanned: {self.shards_rescanned} of {self.shards_total} shards",
            f"exclusions: {'allowed, at most ' + f'{n}/{d}' if self.allow_exclusions else 'not allowed'}",
            f"unscanned fields allowed: {', '.join(self.unscanned_fields) or 'none'}"
            + (f" (found carrying text: {', '.join(self.exempted_fields)})" if self.exempted_fields else ""),
            "contract: " + (self.verifier_contract_sha256 or f"any no looser than {self.min_policy.model_dump_json()}"),
        ]


def check_applied(trainer: ApprovalPolicy, applied: AppliedPolicy | None, where: str) -> None:
    """Refuse, naming what differs, a record whose approver exempted a field the trainer does not
    or re-scanned fewer shards than the trainer's policy asks for (`ApprovalError`)."""
    if applied is None:
        raise ApprovalError(
            f"approval denied: {where} does not record the policy its gate applied (written by an older trainvault): "
            "open it with audit=True (trainvault verify --full) to run the gate yourself, or re-approve"
        )
    missing = [f for f in applied.unscanned_fields if not exempt(f, trainer.unscanned_fields)]
    if missing:
        raise UnscannedFieldError(
            f"approval denied: the approver of {where} let record field(s) {', '.join(map(repr, missing))} go "
            "unscanned (found carrying text: "
            f"{', '.join(map(repr, applied.exempted_fields)) or 'none in the shards it surveyed'}); this trainer's "
            "policy does not exempt them: pass ApprovalPolicy(unscanned_fields=[...]) (--unscanned-field NAME) if "
            "the trainer never trains on them",
            tuple(missing),
        )
    wanted = trainer.rescan_count(applied.shards_total)
    if applied.shards_rescanned < wanted:
        trust = "trusts no scanner key" if trainer.scanner_keys is None else "asks for a larger re-scan"
        raise ApprovalError(
            f"approval denied: the approver of {where} re-scanned {applied.shards_rescanned} of "
            f"{applied.shards_total} shards; this trainer's policy {trust} ({wanted} shards): open it with "
            "audit=True (trainvault verify --full) to re-scan yourself, or pass the approver's scanner keys and "
            "re-scan sample in the policy"
        )
