"""data_manifest: the fan-in. Recover every shard of the spec from its descriptor (a size
check, no hash: the verification pass hashes every shard next), register curricula, commit.

The manifest is create-only and a pure function of the shards and registrations, so
committing an unchanged build again is a no-op. The version folder is the one the run's
producer pins decided.
"""

import dagster as dg

from assets._common import BUILD, Metadata, asset_args, ins, key, object_metadata, table
from resources.dataset import DatasetSpec
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault import DataManifest, TrainVaultError
from trainvault.publication import ShardEntry

DESCRIPTION = (
    "The data manifest: every shard of the version recovered from its descriptor, curricula registered, "
    "committed create-only; what a trainer's loader reads."
)


def summary_tables(manifest: DataManifest) -> Metadata:
    summary = manifest.summary()
    rows = [
        {"split": split, "stage": stage, "shards": st["shards"], "records": st["records"], "bytes": st["bytes"]}
        for split, info in summary["splits"].items()
        for stage, st in info["stages"].items()
    ]
    curricula = [
        {"split": split, "curriculum": name, "shards": n}
        for split, info in summary["splits"].items()
        for name, n in info["curricula"].items()
    ]
    return {
        "dagster/row_count": sum(r["records"] for r in rows),
        "bytes": sum(r["bytes"] for r in rows),
        "shards": sum(r["shards"] for r in rows),
        "splits and stages": table(
            rows, [("split", "string"), ("stage", "string"), ("shards", "int"), ("records", "int"), ("bytes", "int")]
        ),
        "curricula": table(curricula, [("split", "string"), ("curriculum", "string"), ("shards", "int")]),
    }


def build_data_manifest(spec: DatasetSpec) -> dg.AssetsDefinition:
    @dg.asset(
        **asset_args(spec, "data_manifest", BUILD, DESCRIPTION, "python"),
        ins=ins(spec, "producer_pins"),
        deps=[key(spec, "dataset_shards")],
    )
    def data_manifest(
        context: dg.AssetExecutionContext, store: StorageResource, producer_pins: Handoff
    ) -> dg.Output[Handoff]:
        vault = store.vault()
        layout = spec.layout_at(producer_pins.publication_version)
        # Each shard is recovered from its descriptor with a size check: the verification pass
        # (contamination_scan) hashes every shard against this manifest next, and the gate again.
        saver = vault.dataset_saver(layout.manifest_uri, data_format=spec.data_format, rehash_reused=False)
        entries: dict[tuple[str, str | None], list[ShardEntry]] = {}
        for split, stage, shard_id in spec.shards():
            try:
                entry = saver.recover(split, stage, shard_id=shard_id)
            except TrainVaultError as exc:
                raise dg.Failure(
                    f"shard {split}/{stage or '_'}/{shard_id} of {spec.name} {layout.version}: {exc}"
                ) from exc
            entries.setdefault((split, stage), []).append(entry)
        for cur in spec.curricula:
            shards = [e for stage in cur.stages for e in entries.get((cur.split, stage), [])]
            saver.register_curriculum(cur.split, cur.name, shards, curriculum_metadata={"stages": list(cur.stages)})
        committed = saver.commit_manifest()
        manifest, sha256 = committed.document, committed.sha256
        return dg.Output(
            Handoff.of(layout, "data_manifest", layout.manifest_uri, sha256),
            metadata={
                **object_metadata(layout.manifest_uri, sha256, layout.version),
                "data_format": manifest.data_format,
                **summary_tables(manifest),
            },
            data_version=dg.DataVersion(sha256),
        )

    return data_manifest
