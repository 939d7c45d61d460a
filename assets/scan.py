"""training_scan: every file the data manifest declares, re-hashed from storage, with totals.

The contamination report and the approval bind this scan manifest by digest; the gate
checks its file set equals the manifest's, so no shard goes unscanned.
"""


import dagster as dg

from assets._common import GROUP, link, upstream
from resources.dataset import DatasetSpec
from resources.storage import ObjectStore
from trainvault.approval import build_training_scan_manifest, write_training_scan_manifest


@dg.asset(
    group_name=GROUP,
    kinds={"python"},
    code_version="1",
    deps=["data_manifest"],
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def training_scan(context: dg.AssetExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
    vault = store.vault()
    pub = dataset.publication()
    manifest = upstream(context, "data_manifest")
    if manifest.get("version") != pub.version:
        raise dg.Failure(f"data_manifest was last materialized for {manifest.get('version')}; this spec builds {pub.version}")
    scan = build_training_scan_manifest(vault, manifest["uri"], manifest_sha256=manifest["sha256"])
    bound = write_training_scan_manifest(vault, pub.scan_manifest_uri, scan)
    totals = scan.totals.model_dump()
    return dg.MaterializeResult(
        metadata={
            "version": pub.version,
            "uri": bound.uri,
            "open": link(bound.uri),
            "sha256": bound.sha256,
            "data_manifest_sha256": scan.data_manifest_sha256,
            "files": totals.pop("files"),
            "bytes hashed": totals.pop("file_bytes"),
            "totals": dg.MetadataValue.json(totals),
        },
        data_version=dg.DataVersion(bound.sha256),
    )
