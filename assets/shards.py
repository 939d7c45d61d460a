"""dataset_shards: one partition per shard (`<split>/<stage or _>/<shard_id>`).

Partitions derive, retry and backfill one by one; a run over a range of partitions (the
CLI's ``--partition-range``, the `lifecycle` job) derives them `shard_threads` at a time.
Saving is deterministic and create-only: a shard already complete in this version's
folder is verified and reused, and nothing is written.
"""


from concurrent.futures import ThreadPoolExecutor

import dagster as dg

from assets._common import GROUP, link, table
from resources.dataset import DatasetSpec, Publication, parse_partition_key
from resources.storage import ObjectStore
from trainvault.manifest import shard_descriptor_uri


#: Runs over at most this many shards also carry the per-shard table.
TABLE_MAX_SHARDS = 16


def save_shard(store: ObjectStore, dataset: DatasetSpec, pub: Publication, key: str) -> dict:
    """Save (or verify and reuse) one shard; what a person wants to see about it."""
    vault = store.vault()
    split, stage, shard_id = parse_partition_key(key)
    reused = vault.storage.exists(shard_descriptor_uri(pub.data_root, split, stage, shard_id))
    saver = vault.dataset_saver(pub.manifest_uri, data_format=dataset.data_format)
    entry = saver.save(
        split,
        stage,
        dataset.records(split, stage, shard_id),
        curriculum_metadata=dataset.metadata_of_stage(split, stage),
        shard_id=shard_id,
    )
    return {
        "shard": key,
        "records": entry.record_count,
        "bytes": entry.size_bytes,
        "sha256": entry.sha256,
        "uri": entry.uri,
        "written": not reused,
    }


def build_dataset_shards(partition_keys: list[str]) -> dg.AssetsDefinition:
    """The shard asset over these partitions (the shards of the dataset spec)."""
    partitions = dg.StaticPartitionsDefinition(partition_keys)

    @dg.asset(
        name="dataset_shards",
        group_name=GROUP,
        kinds={"python"},
        code_version="1",
        deps=["producer_pins"],
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        retry_policy=dg.RetryPolicy(max_retries=2, delay=1),
        pool="trainvault_object_store",
    )
    def dataset_shards(context: dg.AssetExecutionContext, store: ObjectStore, dataset: DatasetSpec) -> dg.MaterializeResult:
        keys = list(context.partition_keys)
        pub = dataset.publication()
        with ThreadPoolExecutor(max_workers=max(1, dataset.shard_threads)) as pool:
            rows = list(pool.map(lambda k: save_shard(store, dataset, pub, k), keys))
        for row in rows:
            # Per-shard figures on each partition (a range run records one materialization per partition).
            context.log_event(
                dg.AssetObservation(
                    asset_key=context.asset_key,
                    partition=row["shard"],
                    metadata={
                        "records": row["records"],
                        "bytes": row["bytes"],
                        "sha256": row["sha256"],
                        "written": row["written"],
                        "open": link(row["uri"]),
                    },
                )
            )
        written = sum(r["written"] for r in rows)
        context.log.info(f"{len(rows)} shard(s): {written} written, {len(rows) - written} reused unchanged")
        metadata = {
            "version": pub.version,
            "shards": len(rows),
            "written": written,
            "reused": len(rows) - written,
            "dagster/row_count": sum(r["records"] for r in rows),
            "bytes": sum(r["bytes"] for r in rows),
        }
        if len(rows) <= TABLE_MAX_SHARDS:
            # A range run repeats its metadata on every partition: the table only for small runs
            # (each partition's own figures are on its observation either way).
            metadata["shard table"] = table(
                rows, [("shard", "string"), ("records", "int"), ("bytes", "int"), ("sha256", "string"), ("written", "bool")]
            )
        if len(rows) == 1:
            metadata.update(sha256=rows[0]["sha256"], open=link(rows[0]["uri"]))
        return dg.MaterializeResult(metadata=metadata)

    return dataset_shards
