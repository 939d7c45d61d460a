"""training_scan: every file the data manifest declares, with its size and sha256 as checked
against storage, and totals.

Every data object was hashed by the verification pass (contamination_scan, which this
waits for): a shard read there, or one whose results are stored by content (its bytes were
written with that digest by the saver and hashed by an earlier pass), is listed as the
manifest binds it, without a second read; descriptors are hashed here. The gate re-hashes
every file before approval, so a shard changed since is refused there.

The scan manifest is published as an attestation (an in-toto statement in a DSSE
envelope signed with the scanner's key); the contamination report and the approval bind
the envelope by digest; the gate checks the signer against the policy's trusted scanner
keys and that its file set equals the manifest's, so no shard goes unscanned.
"""

import dagster as dg

from assets._common import BUILD, asset_args, ins, key, object_metadata
from assets.verified import shard_surveys
from resources.dataset import DatasetSpec
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault.approval import build_training_scan_manifest, write_attestation

DESCRIPTION = (
    "Every file the data manifest declares with its size and sha256 as checked against storage (data objects "
    "by the verification pass, descriptors here), with totals (the training scan manifest, signed by the "
    "scanner's key)."
)


def build_training_scan(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(
        **asset_args(spec, "training_scan", BUILD, DESCRIPTION, "python"),
        ins=ins(spec, "data_manifest"),
        deps=[key(spec, "contamination_scan")],
    )
    def training_scan(
        context: dg.AssetExecutionContext, store: StorageResource, data_manifest: Handoff
    ) -> dg.Output[Handoff]:
        vault = store.vault()
        layout = spec.layout_at(data_manifest.publication_version)
        surveys = shard_surveys(vault.storage, spec, data_manifest)
        scan = build_training_scan_manifest(
            vault,
            data_manifest.ref.uri,
            manifest_sha256=data_manifest.ref.sha256,
            verified={e.uri for pairs in surveys.values() for e, _ in pairs},
        )
        key = spec.scanner_signing_key()
        bound = write_attestation(vault, layout.scan_manifest_uri(key.keyid), scan, signing_keys=key)
        totals = scan.totals.model_dump()
        return dg.Output(
            Handoff.of(layout, "training_scan", bound.uri, bound.sha256),
            metadata={
                **object_metadata(bound.uri, bound.sha256, layout.version),
                "data_manifest_sha256": scan.data_manifest_sha256,
                "signed by (scanner key id)": key.keyid,
                "files": totals.pop("files"),
                "bytes hashed": totals.pop("file_bytes"),
                "totals": dg.MetadataValue.json(totals),
            },
            data_version=dg.DataVersion(bound.sha256),
        )

    return training_scan
