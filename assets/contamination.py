"""contamination_report and its blocking check `within_contract`.

The report scans every shard the data manifest binds against the evaluation release,
under the verifier contract, and binds all five inputs (data manifest, scan manifest,
release, contract, producer pins) by SHA-256. The check re-reads the report by digest
and recomputes the verdict from its counts under the contract's policy; when it fails,
nothing downstream in the run executes, and `approved_dataset` refuses on its own too.
"""


import dagster as dg

from assets._common import GROUP, link, table, upstream
from resources.dataset import DatasetSpec
from resources.storage import ObjectStore
from trainvault.contamination import (
    ContaminationReport,
    VerifierContract,
    load_index,
    read_document,
    read_report,
    scan_dataset,
    write_report,
)


def report_metadata(report: ContaminationReport) -> dict[str, object]:
    """Per-benchmark results as a table and the contaminated item ids, for the UI."""
    rows = [
        {
            "benchmark": b.name,
            "items": b.n_items,
            "checkable": b.n_checkable,
            "contaminated": b.n_contaminated,
            "uncheckable": b.n_uncheckable,
            "pass": b.passed,
        }
        for b in report.benchmarks
    ]
    ids = [f"{it.benchmark}: {it.item_id} (shard {it.hits[0].split}/{it.hits[0].shard}, record {it.hits[0].record_index})"
           for it in report.contaminated_items]
    return {
        "pass": report.passed,
        "per benchmark": table(
            rows,
            [("benchmark", "string"), ("items", "int"), ("checkable", "int"), ("contaminated", "int"),
             ("uncheckable", "int"), ("pass", "bool")],
        ),
        "contaminated items": dg.MetadataValue.md("\n".join(f"- `{i}`" for i in ids) or "none"),
        "contaminated item ids": dg.MetadataValue.json([f"{it.benchmark}:{it.item_id}" for it in report.contaminated_items]),
        "coverage": dg.MetadataValue.json(report.coverage.model_dump()),
    }


@dg.asset(
    group_name=GROUP,
    kinds={"python"},
    code_version="1",
    deps=["data_manifest", "training_scan", "evaluation_release", "producer_pins"],
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def contamination_report(context: dg.AssetExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
    vault = store.vault()
    pub = dataset.publication()
    manifest = upstream(context, "data_manifest")
    scan = upstream(context, "training_scan")
    release = upstream(context, "evaluation_release")
    pins = upstream(context, "producer_pins")
    for name, meta in (("data_manifest", manifest), ("training_scan", scan), ("producer_pins", pins)):
        if meta.get("version") != pub.version:
            raise dg.Failure(f"{name} was last materialized for {meta.get('version')}, this spec builds {pub.version}: materialize it first")
    index = load_index(
        vault,
        release_uri=release["uri"],
        contract_uri=release["contract_uri"],
        release_sha256=release["sha256"],
        contract_sha256=release["contract_sha256"],
    )
    report = scan_dataset(
        vault,
        manifest["uri"],
        index,
        manifest_sha256=manifest["sha256"],
        scan_manifest_sha256=scan["sha256"],
        producer_pins_sha256=pins["sha256"],
        progress=False,
    )
    bound = write_report(vault, pub.report_uri(release["sha256"], release["contract_sha256"]), report)
    return dg.MaterializeResult(
        metadata={
            "version": pub.version,
            "uri": bound.uri,
            "open": link(bound.uri),
            "sha256": bound.sha256,
            **report_metadata(report),
        },
        data_version=dg.DataVersion(bound.sha256),
    )


@dg.asset_check(asset=contamination_report, blocking=True, description="the report passes the verifier contract's policy")
def within_contract(context: dg.AssetCheckExecutionContext, store: ObjectStore) -> dg.AssetCheckResult:
    vault = store.vault()
    meta = upstream(context, "contamination_report")
    release = upstream(context, "evaluation_release")
    report = read_report(vault, meta["uri"], sha256=meta["sha256"]).document
    contract = read_document(vault.storage, VerifierContract, release["contract_uri"], sha256=release["contract_sha256"]).document
    same_contract = report.verifier_contract.sha256 == release["contract_sha256"]
    passed = same_contract and report.recompute_pass(contract.policy)
    contaminated = [f"{it.benchmark}:{it.item_id}" for it in report.contaminated_items]
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            "within contract: no benchmark over its limits"
            if passed
            else f"the report was made under contract {report.verifier_contract.sha256}, not {release['contract_sha256']}"
            if not same_contract
            else f"{len(contaminated)} contaminated item(s): {', '.join(contaminated[:10])}"
        ),
        metadata={
            "report sha256": meta["sha256"],
            "contaminated": len(contaminated),
            "contaminated item ids": dg.MetadataValue.json(contaminated),
            "benchmarks failing": dg.MetadataValue.json([b.name for b in report.benchmarks
                                                         if not contract.policy.benchmark_passes(
                                                             b.name, b.n_items, b.n_checkable, b.n_uncheckable, b.n_contaminated)]),
        },
    )
