"""training_scan: every file the data manifest declares, re-hashed from storage, with totals.

The contamination report and the approval bind this scan manifest by digest; the gate
checks its file set equals the manifest's, so no shard goes unscanned.
"""


import dagster as dg

from assets._common import BUILD, asset_args, ins, object_metadata
from resources.dataset import DatasetSpec
from resources.handoff import Handoff
from resources.storage import ObjectStore
from trainvault.approval import build_training_scan_manifest, write_training_scan_manifest

DESCRIPTION = "Every file the data manifest declares, re-hashed from storage, with totals (the training scan manifest)."


def build_training_scan(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(**asset_args(spec, "training_scan", BUILD, DESCRIPTION, "python"), ins=ins(spec, "data_manifest"))
    def training_scan(context: dg.AssetExecutionContext, store: ObjectStore, data_manifest: Handoff) -> dg.Output[Handoff]:
        vault = store.vault()
        pub = spec.publication_at(data_manifest.publication_version)
        scan = build_training_scan_manifest(vault, data_manifest.ref.uri, manifest_sha256=data_manifest.ref.sha256)
        bound = write_training_scan_manifest(vault, pub.scan_manifest_uri, scan)
        totals = scan.totals.model_dump()
        return dg.Output(
            Handoff.of(pub, "training_scan", bound.uri, bound.sha256),
            metadata={
                **object_metadata(bound.uri, bound.sha256, pub.version),
                "data_manifest_sha256": scan.data_manifest_sha256,
                "files": totals.pop("files"),
                "bytes hashed": totals.pop("file_bytes"),
                "totals": dg.MetadataValue.json(totals),
            },
            data_version=dg.DataVersion(bound.sha256),
        )

    return training_scan
