"""data_manifest: the fan-in. Recover every shard of the spec, register curricula, commit.

The manifest is create-only and a pure function of the shards and registrations, so
committing an unchanged build again is a no-op.
"""


import dagster as dg

from assets._common import GROUP, link, table
from resources.dataset import DatasetSpec
from resources.storage import ObjectStore
from trainvault.canonical import sha256_hex


@dg.asset(
    group_name=GROUP,
    kinds={"python"},
    code_version="1",
    deps=["dataset_shards"],
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def data_manifest(context: dg.AssetExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
    vault = store.vault()
    pub = dataset.publication()
    saver = vault.dataset_saver(pub.manifest_uri, data_format=dataset.data_format)
    entries: dict[tuple[str, str | None], list] = {}
    for split, stage, shard_id in dataset.shards():
        try:
            entry = saver.recover(split, stage, shard_id=shard_id)
        except Exception as exc:  # noqa: BLE001 - name the missing partition, keep the library's message
            raise dg.Failure(f"shard {split}/{stage or '_'}/{shard_id} of {pub.version}: {exc}") from exc
        entries.setdefault((split, stage), []).append(entry)
    for cur in dataset.curricula:
        shards = [e for stage in cur.stages for e in entries.get((cur.split, stage), [])]
        saver.register_curriculum(cur.split, cur.name, shards, curriculum_metadata={"stages": list(cur.stages)})
    manifest = saver.commit_manifest()
    sha256 = sha256_hex(vault.storage.get(pub.manifest_uri))
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
    return dg.MaterializeResult(
        metadata={
            "version": pub.version,
            "uri": pub.manifest_uri,
            "open": link(pub.manifest_uri),
            "sha256": sha256,
            "data_format": manifest.data_format,
            "dagster/row_count": sum(r["records"] for r in rows),
            "bytes": sum(r["bytes"] for r in rows),
            "shards": sum(r["shards"] for r in rows),
            "splits and stages": table(
                rows, [("split", "string"), ("stage", "string"), ("shards", "int"), ("records", "int"), ("bytes", "int")]
            ),
            "curricula": table(curricula, [("split", "string"), ("curriculum", "string"), ("shards", "int")]),
        },
        data_version=dg.DataVersion(sha256),
    )
