"""What the lifecycle reads, counted at the storage layer (trainvault.storage.READS), on real
ephemeral instances in process: a fresh build streams each shard byte at most twice (the
verification pass and the gate), an unchanged rebuild at most once (the gate), and a rebuild
in which one shard changed verifies and profiles only that shard."""

from __future__ import annotations

from pathlib import Path

import pytest

dg = pytest.importorskip("dagster")

from pipelines.definitions import build_definitions, whole_build_tags  # noqa: E402
from pipelines.examples.spec import example_spec, key_fields  # noqa: E402
from resources.storage import StorageResource  # noqa: E402
from trainvault import TrainVault  # noqa: E402
from trainvault.approval import write_keypair  # noqa: E402
from trainvault.publication.pinned import Publication  # noqa: E402
from trainvault.storage.reads import READS  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:Parameter `backfill_policy`"),
    pytest.mark.filterwarnings("ignore:Parameter `data_version`"),
]


def run(spec, instance):
    job = build_definitions([spec], StorageResource(), executor="in_process").resolve_job_def(f"lifecycle_{spec.name}")
    before = READS.snapshot()
    result = job.execute_in_process(instance=instance, tags=whole_build_tags(spec), raise_on_error=False)
    assert result.success, [str(e) for e in result.all_events if e.is_step_failure]
    return result, READS.snapshot() - before


def shards_read(result, asset: str) -> dict[str | None, int]:
    """The ``shards read`` each materialization of `asset` in the run recorded, by partition."""
    return {
        e.partition: e.materialization.metadata["shards read"].value
        for e in result.get_asset_materialization_events()
        if e.asset_key.path[-1] == asset
    }


def stored(spec) -> int:
    """Bytes of the shards of the spec's publication."""
    manifest = Publication.load(TrainVault().storage, spec.layout().manifest_uri).manifest
    return sum(e.size_bytes for sm in manifest.splits.values() for e in sm.shards)


def test_each_shard_byte_is_read_twice_in_a_build_once_in_a_rebuild_and_a_changed_shard_alone_is_verified(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "approver"
    write_keypair(keys)
    instance = dg.DagsterInstance.ephemeral()

    def spec_of(plant: bool):
        return example_spec(
            str(tmp_path / "store"), shards_per_stage=2, eval_shards=1, records=300, plant=plant, **key_fields(keys)
        )

    clean = spec_of(False)
    built, read = run(clean, instance)
    shard_bytes = stored(clean)
    # Streamed (documents are read whole): shards, by the verification pass and the gate's hash pass
    # (its re-scan fed from it).
    assert read.streamed <= 2 * shard_bytes
    assert sorted(shards_read(built, "contamination_scan").values()) == [1] * 8
    assert shards_read(built, "dataset_profile") == {None: 0}

    rebuilt, read = run(clean, instance)
    assert read.streamed <= shard_bytes
    assert sorted(shards_read(rebuilt, "contamination_scan").values()) == [0] * 8
    assert shards_read(rebuilt, "dataset_profile") == {None: 0}

    planted = spec_of(True)  # train/hard/0 changes, a new version: the other 7 shards' results are reused
    changed, read = run(planted, instance)
    scanned = shards_read(changed, "contamination_scan")
    assert {k for k, n in scanned.items() if n} == {"train/hard/0"} and len(scanned) == 8
    assert shards_read(changed, "dataset_profile") == {None: 0}
    planted_bytes = stored(planted)
    hard0 = next(
        e.size_bytes
        for e in Publication.load(TrainVault().storage, planted.layout().manifest_uri).manifest.splits["train"].shards
        if e.key == "hard/0"
    )
    assert read.streamed <= planted_bytes + hard0
