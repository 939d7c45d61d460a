"""dataset_shards: one partition per shard (`<split>/<stage or _>/<shard_id>`).

Partitions derive, retry and backfill one by one; a run over a range of partitions (a
backfill, the CLI's ``--partition-range``) derives them `shard_threads` at a time, and a
run with no partition selection (the job launched as is) builds every shard. Saving is
deterministic and create-only: a shard already complete in this version's folder is
reused after a size check (its bytes are hashed by the verification pass next, and by the
gate), and nothing is written. Each partition's materialization carries
that shard's own figures.
"""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dagster as dg

from assets._common import BUILD, Metadata, asset_args, ins, link
from resources.dataset import DatasetSpec, parse_partition_key
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault import DatasetSaver

DESCRIPTION = (
    "The dataset's shards, one partition per shard (split/stage/shard id), saved deterministically "
    "and create-only into the version's data folder; an unchanged shard is verified and reused."
)


def save_shard(saver: DatasetSaver, spec: DatasetSpec, key: str) -> dict[str, Any]:
    """Save (or reuse) one shard with the step's saver; what a person wants to see about it."""
    split, stage, shard_id = parse_partition_key(key)
    entry = saver.save(
        split,
        stage,
        spec.records(split, stage, shard_id),
        curriculum_metadata=spec.metadata_of_stage(split, stage),
        shard_id=shard_id,
    )
    return {
        "shard": key,
        "records": entry.record_count,
        "bytes": entry.size_bytes,
        "sha256": entry.sha256,
        "uri": entry.uri,
        "written": saver.wrote(split, entry.key),
    }


def shard_metadata(row: dict[str, Any], version: str) -> Metadata:
    """One shard's figures, as its partition's materialization shows them."""
    return {
        "version": version,
        "dagster/row_count": row["records"],
        "bytes": row["bytes"],
        "sha256": row["sha256"],
        "written": row["written"],
        "dagster/uri": row["uri"],
        "open": link(row["uri"]),
    }


def selected_shards(context: dg.AssetExecutionContext, spec: DatasetSpec) -> list[str]:
    """The run's partitions; every shard when the run selected none (the job launched as is)."""
    if context.has_partition_key or context.has_partition_key_range:
        return list(context.partition_keys)
    return spec.partition_keys()


def build_dataset_shards(spec: DatasetSpec) -> dg.AssetsDefinition:
    """The shard asset over the spec's shards."""
    args = asset_args(spec, "dataset_shards", BUILD, DESCRIPTION, spec.data_format.split(".")[0])
    args.pop("io_manager_key")  # shards are written by the saver; nothing is handed off per partition

    @dg.asset(
        **args,
        ins=ins(spec, "producer_pins"),
        partitions_def=dg.StaticPartitionsDefinition(spec.partition_keys()),
        retry_policy=dg.RetryPolicy(max_retries=2, delay=1),
        pool="trainvault_object_store",
    )
    def dataset_shards(context: dg.AssetExecutionContext, store: StorageResource, producer_pins: Handoff) -> None:
        keys = selected_shards(context, spec)
        layout = spec.layout_at(producer_pins.publication_version)
        # One saver for the step. A shard found complete is checked by size only: the fused
        # verification pass (contamination_scan) hashes every shard the manifest binds, and the gate again.
        saver = store.vault().dataset_saver(layout.manifest_uri, data_format=spec.data_format, rehash_reused=False)
        with ThreadPoolExecutor(max_workers=max(1, spec.shard_threads)) as pool:
            rows = list(pool.map(lambda k: save_shard(saver, spec, k), keys))
        partitioned = context.has_partition_key or context.has_partition_key_range
        for row in rows:
            if partitioned:
                context.add_asset_metadata(shard_metadata(row, layout.version), partition_key=row["shard"])
            else:
                # A run without partitions: each shard is still recorded against its own partition.
                context.log_event(
                    dg.AssetMaterialization(
                        context.asset_key, partition=row["shard"], metadata=shard_metadata(row, layout.version)
                    )
                )
        written = sum(r["written"] for r in rows)
        context.log.info(
            f"{len(rows)} shard(s) of {layout.version}: {written} written, {len(rows) - written} reused unchanged"
        )

    return dataset_shards
