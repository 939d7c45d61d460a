"""contamination_scan (one partition per shard), contamination_report (its blocking check
`within_contract` is assets/contract_check.py), and contamination_exclusions (only where the dataset's policy allows them).

The scan fans out: each shard partition is the lifecycle's verification pass
(`trainvault.verification.verify_shard`): one read of the shard, hashed and every block
checked, serves its scan against the evaluation release under the verifier contract, its
profile and its field survey. Both results are stored by content under the dataset's
``shard-results/<scanner key id>/`` (keyed by shard sha256 + contract + release, and shard
sha256 + profile settings), signed by the scanner's key, so a later version reuses an
unchanged shard's results without reading it; one that key did not sign is logged and
recomputed. The scan result is published create-only beside the report
(``contamination/<release>-<contract>/shards/``); a multiprocess, Celery or k8s executor
spreads the partitions, and a run over many partitions verifies `shard_threads` at once.
The report asset reduces every shard's result with `trainvault.contamination.reduce_report`, the same reduction `scan_dataset` applies, so
the report is the one a serial scan makes; it binds the data manifest, scan manifest,
release, contract and producer pins by SHA-256 and is published signed by the scanner's
key (an in-toto statement in a DSSE envelope). Whether the signer is trusted is the gate's
to judge, in `approved_dataset`.
"""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dagster as dg

from assets._common import EVALUATE, Metadata, Once, asset_args, ins, key, object_metadata, table
from assets.shards import selected_shards
from resources.dataset import DatasetSpec, VersionLayout, parse_partition_key
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault import DataManifest, IntegrityError, ObjectNotFoundError, ObjectRef, TrainVault
from trainvault.approval import read_attested, write_attestation
from trainvault.canonical import sha256_hex
from trainvault.contamination import (
    ContaminationReport,
    ShardScanResult,
    exclusions_from_report,
    load_index,
    reduce_report,
)
from trainvault.publication import Publication, ShardEntry, write_document
from trainvault.verification import VerifiedShard, stored_verification, verify_shard

SCAN_DESCRIPTION = (
    "The verification pass, one partition per shard: one verified read of the shard serves its "
    "contamination scan (n-gram overlap under the verifier contract, reduced into the report), its "
    "profile and its field survey; a shard whose results are stored by content is not read again."
)
REPORT_DESCRIPTION = (
    "The contamination report: every shard's scan reduced against the evaluation release, "
    "binding manifest, scan manifest, release, contract and pins by digest, signed by the scanner's key. "
    "Blocking check: within_contract."
)
EXCLUSIONS_DESCRIPTION = (
    "The training records the approval leaves out: every record a hit of the contamination report "
    "names, with the benchmark items found there (exclusions-v1); the approved loader skips them."
)


def attested_report(vault: TrainVault, ref: ObjectRef) -> ContaminationReport:
    """The report a hand-off names, read by digest (signed or not: the gate judges the signer)."""
    data = vault.storage.get_document(ref.uri)
    if sha256_hex(data) != ref.sha256:
        raise IntegrityError(
            f"{ref.uri}: the contamination report changed since it was handed off; rerun the lifecycle"
        )
    return read_attested(data, ContaminationReport, trusted_keys=None, source=ref.uri).document


def shard_entry(manifest: DataManifest, partition: str) -> ShardEntry:
    """The manifest's entry for a shard partition key."""
    split, stage, shard_id = parse_partition_key(partition)
    for entry in manifest.split(split).shards:
        if entry.curriculum_stage == stage and entry.shard_id == shard_id:
            return entry
    raise dg.Failure(f"shard {partition} is not in the data manifest: rebuild the manifest")


def _item_line(it: Any) -> str:
    """A listed item of a report (contaminated or uncounted; the library does not export their types)."""
    hit = it.hits[0]
    return f"{it.benchmark}: {it.item_id} (shard {hit.split}/{hit.shard}, record {hit.record_index})"


def report_metadata(report: ContaminationReport) -> Metadata:
    """Per-benchmark results as a table, the contaminated item ids and, under an evidence rule
    (ngram-exact-v3), the matched items it does not count and why, for the UI."""
    columns = [
        ("benchmark", "string"),
        ("items", "int"),
        ("checkable", "int"),
        ("contaminated", "int"),
        ("uncounted", "int"),
        ("uncheckable", "int"),
        ("pass", "bool"),
    ]
    rows = [
        {
            "benchmark": b.name,
            "items": b.n_items,
            "checkable": b.n_checkable,
            "contaminated": b.n_contaminated,
            "uncounted": b.n_uncounted or 0,
            "uncheckable": b.n_uncheckable,
            "pass": b.passed,
        }
        for b in report.benchmarks
    ]
    meta: Metadata = {
        "pass": report.passed,
        "per benchmark": table(rows, columns),
        "contaminated items": dg.MetadataValue.md(
            "\n".join(f"- `{_item_line(i)}`" for i in report.contaminated_items) or "none"
        ),
        "contaminated item ids": dg.MetadataValue.json(
            [f"{it.benchmark}:{it.item_id}" for it in report.contaminated_items]
        ),
        "coverage": dg.MetadataValue.json(report.coverage.model_dump()),
    }
    if report.uncounted_items is not None:
        meta["uncounted items"] = dg.MetadataValue.md(
            "\n".join(f"- `{_item_line(i)}`: {i.reason}" for i in report.uncounted_items) or "none"
        )
    return meta


def signed_scan(
    vault: TrainVault, spec: DatasetSpec, manifest: DataManifest, partition: str, release: str, contract: str
) -> ShardScanResult:
    """Shard `partition`'s scan result, stored and signed by the dataset's scanner key; a missing or
    refused one fails the step, naming it (the scan step recomputes it)."""
    stored = stored_verification(
        vault.storage,
        spec.shard_results_root,
        manifest.data_format,
        shard_entry(manifest, partition),
        release_sha256=release,
        contract_sha256=contract,
        scanner_key=spec.scanner_signing_key(),
    )
    if stored.scan is None:
        raise IntegrityError(
            f"{stored.scan_uri}: shard {partition}'s scan result is missing or not signed by the scanner key "
            f"(see the warning above): materialize contamination_scan for {partition} again"
        )
    return stored.scan.result


def build_contamination_scan(spec: DatasetSpec) -> dg.AssetsDefinition:
    args = asset_args(spec, "contamination_scan", EVALUATE, SCAN_DESCRIPTION, "python")
    args.pop("io_manager_key")  # each shard's result is published beside the report

    @dg.asset(
        **args,
        ins=ins(spec, "data_manifest", "evaluation_release"),
        partitions_def=dg.StaticPartitionsDefinition(spec.partition_keys()),
    )
    def contamination_scan(
        context: dg.AssetExecutionContext, store: StorageResource, data_manifest: Handoff, evaluation_release: Handoff
    ) -> None:
        vault = store.vault()
        layout = spec.layout_at(data_manifest.publication_version)
        manifest = Publication.load(vault.storage, data_manifest.ref.uri, sha256=data_manifest.ref.sha256).manifest
        release, contract = evaluation_release.ref.sha256, evaluation_release.also["contract"].sha256
        folder, data_format = spec.shard_results_root, manifest.data_format
        scanner = spec.scanner_signing_key()
        # The release's index is built only when a shard's stored results do not cover it.
        index = Once(lambda: load_index(vault, evaluation_release.ref, evaluation_release.also["contract"]))

        def verify(partition: str) -> tuple[str, VerifiedShard]:
            split = parse_partition_key(partition)[0]
            entry = shard_entry(manifest, partition)
            # One lookup of the stored results serves both: a shard they cover is not read, and a
            # changed one is verified without looking them up again.
            stored = stored_verification(
                vault.storage,
                folder,
                data_format,
                entry,
                release_sha256=release,
                contract_sha256=contract,
                scanner_key=scanner,
            )
            # verify_shard reuses them too, but would need the index (built on first use) to be called.
            return partition, stored.verified or verify_shard(
                vault.storage, folder, data_format, split, entry, index.get(), signing_key=scanner, stored=stored
            )

        partitioned = context.has_partition_key or context.has_partition_key_range
        with ThreadPoolExecutor(max_workers=max(1, spec.shard_threads)) as pool:
            for partition, verified in pool.map(verify, selected_shards(context, spec)):
                result = verified.scan
                bound = write_document(vault.storage, layout.shard_scan_uri(release, contract, partition), result)
                meta: Metadata = {
                    **object_metadata(bound.uri, bound.sha256, layout.version),
                    "dagster/row_count": result.records,
                    "tokens": result.tokens,
                    "items hit": len(result.items),
                    "shards read": int(verified.read),
                }
                if partitioned:
                    context.add_asset_metadata(meta, partition_key=partition)
                else:
                    context.log_event(dg.AssetMaterialization(context.asset_key, partition=partition, metadata=meta))

    return contamination_scan


def build_contamination_report(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(
        **asset_args(spec, "contamination_report", EVALUATE, REPORT_DESCRIPTION, "python"),
        ins=ins(spec, "data_manifest", "training_scan", "evaluation_release", "producer_pins"),
        deps=[key(spec, "contamination_scan")],
    )
    def contamination_report(
        context: dg.AssetExecutionContext,
        store: StorageResource,
        data_manifest: Handoff,
        training_scan: Handoff,
        evaluation_release: Handoff,
        producer_pins: Handoff,
    ) -> dg.Output[Handoff]:
        vault = store.vault()
        layout = spec.layout_at(data_manifest.publication_version)
        release, contract = evaluation_release.ref.sha256, evaluation_release.also["contract"].sha256
        scanner = spec.scanner_signing_key()
        uri = layout.report_uri(release, contract, scanner.keyid)
        bindings = (data_manifest.ref.sha256, training_scan.ref.sha256, producer_pins.ref.sha256, release, contract)
        found = stored_report(vault, uri, bindings)
        if found is not None:
            # The same inputs (the manifest binds every shard, whose results are stored by content)
            # reduce to the same report: reuse it instead of rebuilding the index to reduce again.
            return report_output(layout, evaluation_release, scanner.keyid, *found)
        manifest = Publication.load(vault.storage, data_manifest.ref.uri, sha256=data_manifest.ref.sha256).manifest
        index = load_index(vault, evaluation_release.ref, evaluation_release.also["contract"])
        # Each shard's result as the scanner's key signed it in shard-results/ (this run's scan step or
        # an earlier one's): the publication's copies are hand-offs anyone with write access could
        # replace. reduce_report checks each against the manifest's shard.
        results = [signed_scan(vault, spec, manifest, k, release, contract) for k in spec.partition_keys()]
        report = reduce_report(
            index,
            manifest,
            results,
            data_manifest_sha256=data_manifest.ref.sha256,
            scan_manifest_sha256=training_scan.ref.sha256,
            producer_pins_sha256=producer_pins.ref.sha256,
        )
        bound = write_attestation(vault, uri, report, signing_keys=scanner)
        return report_output(layout, evaluation_release, scanner.keyid, bound.uri, bound.sha256, report)

    return contamination_report


def stored_report(
    vault: TrainVault, uri: str, bindings: tuple[str, ...]
) -> tuple[str, str, ContaminationReport] | None:
    """(uri, sha256, report) of the report stored at `uri` when it binds exactly `bindings` (data
    manifest, scan manifest, producer pins, release, contract digests); None when there is none."""
    try:
        data = vault.storage.get_document(uri)
    except ObjectNotFoundError:
        return None
    report = read_attested(data, ContaminationReport, trusted_keys=None, source=uri).document
    bound = (
        report.training.data_manifest_sha256,
        report.training.scan_manifest_sha256,
        report.producer_pins.sha256,
        report.eval_release.sha256,
        report.verifier_contract.sha256,
    )
    return (uri, sha256_hex(data), report) if bound == bindings else None


def report_output(
    layout: VersionLayout, evaluation_release: Handoff, keyid: str, uri: str, sha256: str, report: ContaminationReport
) -> dg.Output[Handoff]:
    return dg.Output(
        Handoff.of(layout, "contamination_report", uri, sha256, contract=evaluation_release.also["contract"]),
        metadata={
            **object_metadata(uri, sha256, layout.version),
            **report_metadata(report),
            "signed by (scanner key id)": keyid,
        },
        data_version=dg.DataVersion(sha256),
    )


def build_contamination_exclusions(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(
        **asset_args(spec, "contamination_exclusions", EVALUATE, EXCLUSIONS_DESCRIPTION, "python"),
        ins=ins(spec, "contamination_report"),
    )
    def contamination_exclusions(
        context: dg.AssetExecutionContext, store: StorageResource, contamination_report: Handoff
    ) -> dg.Output[Handoff]:
        vault = store.vault()
        layout = spec.layout_at(contamination_report.publication_version)
        report = attested_report(vault, contamination_report.ref)
        doc = exclusions_from_report(report, report_sha256=contamination_report.ref.sha256)
        uri = layout.exclusions_uri(
            report.eval_release.sha256, report.verifier_contract.sha256, spec.scanner_signing_key().keyid
        )
        bound = write_document(vault.storage, uri, doc)
        per = doc.per_benchmark()
        rows = [
            {"benchmark": b.name, "excluded records": per.get(b.name, 0), "contaminated items": b.n_contaminated}
            for b in report.benchmarks
        ]
        records = [
            f"{r.split}/{r.shard} record {r.record_index}: "
            + ", ".join(f"{x.benchmark}:{x.item_id}" for x in r.reasons)
            for r in doc.records
        ]
        return dg.Output(
            Handoff.of(layout, "contamination_exclusions", bound.uri, bound.sha256),
            metadata={
                **object_metadata(bound.uri, bound.sha256, layout.version),
                "excluded records": len(doc.records),
                "excluded per benchmark": table(
                    rows, [("benchmark", "string"), ("excluded records", "int"), ("contaminated items", "int")]
                ),
                "records": dg.MetadataValue.md("\n".join(f"- `{r}`" for r in records[:200]) or "none"),
            },
            data_version=dg.DataVersion(bound.sha256),
        )

    return contamination_exclusions
