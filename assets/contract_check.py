"""within_contract: the contamination report's blocking check, and what it says.

It re-reads the report by digest and recomputes the verdict under the contract's policy
(after exclusions, where the dataset's policy allows them: every hit is then left out of the
approval). When it fails, nothing downstream in the run executes (approved_dataset refuses on
its own too), and it says on approved_dataset which approval stays current (assets/current.py).
"""

import dagster as dg

from assets.contamination import attested_report
from assets.current import observe_blocked
from resources.dataset import DatasetSpec
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault.contamination import ContaminationReport, VerifierContract
from trainvault.contamination.exclusions import truncated_items
from trainvault.publication import read_document


def build_within_contract(spec: DatasetSpec, report_asset: dg.AssetsDefinition) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=report_asset,
        blocking=True,
        name="within_contract",
        description="the report passes the verifier contract's policy",
    )
    def within_contract(
        context: dg.AssetCheckExecutionContext, store: StorageResource, report: Handoff
    ) -> dg.AssetCheckResult:
        vault = store.vault()
        contract_ref = report.also["contract"]
        doc = attested_report(vault, report.ref)
        contract = read_document(vault.storage, VerifierContract, contract_ref.uri, sha256=contract_ref.sha256).document
        same_contract = doc.verifier_contract.sha256 == contract_ref.sha256
        excluded = spec.policy.allow_exclusions and excludable(doc, contract)
        passed = same_contract and (doc.recompute_pass(contract.policy) or excluded)
        contaminated = [f"{it.benchmark}:{it.item_id}" for it in doc.contaminated_items]
        failing = [
            b.name
            for b in doc.benchmarks
            if not contract.policy.benchmark_passes(b.name, b.n_items, b.n_checkable, b.n_uncheckable, b.n_contaminated)
        ]
        description = (
            f"the report was made under contract {doc.verifier_contract.sha256}, not {contract_ref.sha256}"
            if not same_contract
            else verdict(passed, contaminated, failing, exclusion_note(spec, doc, contract))
        )
        if not passed:  # approved_dataset will not run: say on its page which approval stays current
            observe_blocked(
                context.op_execution_context,
                spec,
                f"the blocking check within_contract failed on contamination report {report.ref.sha256}",
            )
        return dg.AssetCheckResult(
            passed=passed,
            severity=dg.AssetCheckSeverity.ERROR,
            description=description,
            metadata={
                "report sha256": report.ref.sha256,
                "contaminated": len(contaminated),
                "contaminated item ids": dg.MetadataValue.json(contaminated),
                "benchmarks failing": dg.MetadataValue.json(failing),
                "passes after exclusions": excluded,
            },
        )

    return within_contract


def verdict(passed: bool, contaminated: list[str], failing: list[str], note: str = "") -> str:
    """The check's one-line verdict for people; `note` says why exclusions cannot make a failing report pass."""
    items = f"{len(contaminated)} contaminated item(s): {', '.join(contaminated[:10])}"
    if passed:
        return (
            f"within contract after exclusions: {items}, every hit excluded"
            if contaminated
            else "within contract: no benchmark over its limits"
        )
    if not contaminated:
        return f"benchmarks over their limits: {', '.join(failing)}"
    return f"{items}; {note}" if note else items


#: What a blocked run means for the approval asset (the UI shows it Failed beside an earlier approval's metadata).
NOT_APPROVED = (
    "nothing is approved: approved_dataset does not run, and an approval it shows is an earlier run's, "
    "made under that run's policy (its 'approval policy' metadata); the observation this check logs on "
    "approved_dataset names the approval that stays current"
)


def exclusion_note(spec: DatasetSpec, report: ContaminationReport, contract: VerifierContract) -> str:
    """Why leaving out the contaminated records does not make `report` pass (empty when it does)."""
    if not spec.policy.allow_exclusions:
        return (
            f"the policy of {spec.name} forbids exclusions (allow_exclusions: false), so the records holding them "
            "cannot be left out; " + NOT_APPROVED
        )
    if not excludable(report, contract):
        return (
            "excluding the records that hold them is not enough (a benchmark over its uncheckable limit, "
            "a non-exhaustive method or capped hits); " + NOT_APPROVED
        )
    return ""


def excludable(report: ContaminationReport, contract: VerifierContract) -> bool:
    """Whether leaving out every record a hit names makes `report` pass: no benchmark over its
    uncheckable limit, an exhaustive method, and every hit listed (none capped)."""
    clean = all(
        contract.policy.benchmark_passes(b.name, b.n_items, b.n_checkable, b.n_uncheckable, 0)
        for b in report.benchmarks
    )
    return clean and report.method.exhaustive and not truncated_items(report)
