"""Launch paths through the Python API on real instances (the GraphQL and daemon paths are in
the deploy tests): the job launched with no partition selection, one partition, a range, the
schedule's run request; what each shard partition reports; and the fanned-out contamination
scan reducing to the same report bytes as the serial scan."""

from __future__ import annotations

from pathlib import Path

import pytest

dg = pytest.importorskip("dagster")

from pipelines.definitions import build_definitions, whole_build_tags  # noqa: E402
from pipelines.examples.spec import example_spec, key_fields  # noqa: E402
from resources.storage import StorageResource  # noqa: E402
from trainvault import ObjectRef, TrainVault  # noqa: E402
from trainvault.approval import read_attested, write_attestation, write_keypair  # noqa: E402
from trainvault.canonical import sha256_hex  # noqa: E402
from trainvault.contamination import ContaminationReport, load_index, scan_dataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("launch")
    write_keypair(tmp / "approver")
    write_keypair(tmp / "scanner")
    return example_spec(
        str(tmp / "store"),
        shards_per_stage=1,
        eval_shards=1,
        records=20,
        **key_fields(tmp / "approver", tmp / "scanner"),
    )


def same_keys(spec) -> dict[str, object]:
    return key_fields(spec.signing_key_path.removesuffix(".key"), spec.scanner_key_path.removesuffix(".key"))


def job_of(spec):
    return build_definitions([spec], StorageResource()).resolve_job_def(f"lifecycle_{spec.name}")


def partition_events(result, name: str) -> dict[str, dict]:
    return {
        e.partition: {k: getattr(v, "value", v) for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
        if e.asset_key.path[-1] == name and e.partition
    }


def made(result, name: str) -> dict:
    (ev,) = [
        e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == name and e.partition is None
    ]
    return {k: getattr(v, "value", v) for k, v in ev.materialization.metadata.items()}


@pytest.fixture(scope="module")
def unselected(spec):
    """The job launched as is: no partition, no range (the UI's Launchpad without a partition)."""
    result = job_of(spec).execute_in_process(instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    return result


def test_a_launch_without_partitions_builds_every_shard_and_approves(spec, unselected) -> None:
    assert unselected.success
    shards = partition_events(unselected, "dataset_shards")
    assert sorted(shards) == sorted(spec.partition_keys())
    assert sorted(partition_events(unselected, "contamination_scan")) == sorted(spec.partition_keys())
    approval = made(unselected, "approved_dataset")
    assert approval["shards"] == 5 and approval["dagster/row_count"] == 100


def test_each_shard_partition_reports_its_own_shard(spec, unselected) -> None:
    """Per partition: that shard's records, bytes and sha256 as the manifest binds them, not run totals."""
    manifest = TrainVault().load_manifest(made(unselected, "data_manifest")["uri"])
    entries = {
        f"{split}/{e.curriculum_stage or '_'}/{e.shard_id}": e
        for split, sm in manifest.splits.items()
        for e in sm.shards
    }
    ranged = job_of(spec).execute_in_process(instance=dg.DagsterInstance.ephemeral(), tags=whole_build_tags(spec))
    for result in (unselected, ranged):
        for key, meta in partition_events(result, "dataset_shards").items():
            entry = entries[key]
            assert (meta["dagster/row_count"], meta["bytes"], meta["sha256"]) == (
                entry.record_count,
                entry.size_bytes,
                entry.sha256,
            )
            assert meta["dagster/uri"].endswith(entry.uri.rsplit("/", 1)[-1])
    assert len({m["sha256"] for m in partition_events(ranged, "dataset_shards").values()}) == 5


def test_one_partition_builds_one_shard(spec, tmp_path) -> None:
    other = example_spec(str(tmp_path / "store"), shards_per_stage=1, eval_shards=1, records=20, **same_keys(spec))
    job = job_of(other)
    instance = dg.DagsterInstance.ephemeral()
    assert job.execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey([other.name, "producer_pins"])]
    ).success
    result = job.execute_in_process(
        instance=instance, partition_key="train/hard/0", asset_selection=[dg.AssetKey([other.name, "dataset_shards"])]
    )
    assert result.success
    assert list(partition_events(result, "dataset_shards")) == ["train/hard/0"]
    data = Path(other.layout().data_root.removeprefix("file://"))
    assert [p.name for p in data.rglob("*.msgpack.zst")] and all("hard" in str(p) for p in data.rglob("*.msgpack.zst"))


def test_the_schedule_requests_one_run_over_every_shard_and_backfills_are_single_runs(spec) -> None:
    defs = build_definitions([spec], StorageResource())
    schedule = defs.resolve_schedule_def(f"nightly_rebuild_{spec.name}")
    (request,) = schedule.evaluate_tick(dg.build_schedule_context(instance=dg.DagsterInstance.ephemeral())).run_requests
    assert whole_build_tags(spec).items() <= request.tags.items()
    graph = defs.resolve_asset_graph()
    # "Materialize all" is a partition backfill: one run per backfill when every asset is single-run.
    for key in graph.get_all_asset_keys():
        assert graph.get(key).backfill_policy == dg.BackfillPolicy.single_run(), key


def test_the_fanned_out_scan_reduces_to_the_serial_scans_report_bytes(spec, unselected, tmp_path) -> None:
    vault = TrainVault()
    report = made(unselected, "contamination_report")
    release = made(unselected, "evaluation_release")
    manifest, scan, pins = (made(unselected, n) for n in ("data_manifest", "training_scan", "producer_pins"))
    index = load_index(
        vault,
        ObjectRef(uri=release["uri"], sha256=release["sha256"]),
        ObjectRef(uri=release["contract_uri"], sha256=release["contract_sha256"]),
    )
    serial = scan_dataset(
        vault,
        manifest["uri"],
        index,
        manifest_sha256=manifest["sha256"],
        scan_manifest_sha256=scan["sha256"],
        producer_pins_sha256=pins["sha256"],
        progress=False,
    )
    # Signed with the same scanner key (Ed25519 signatures are deterministic): the same envelope bytes.
    bound = write_attestation(
        vault, str(tmp_path / "serial-report.dsse.json"), serial, signing_keys=spec.scanner_key_path
    )
    assert bound.sha256 == report["sha256"]
    stored = vault.storage.get(report["uri"])
    assert (tmp_path / "serial-report.dsse.json").read_bytes() == stored and sha256_hex(stored) == report["sha256"]
    attested = read_attested(
        stored, ContaminationReport, trusted_keys=[spec.trusted_scanner_keys[0]], source=report["uri"]
    )
    assert attested.document.passed and attested.signers


def test_a_backfill_in_waves_of_runs_hands_off_through_the_version_folder(spec, tmp_path) -> None:
    """An asset backfill may run unpartitioned and partitioned assets in separate runs: each
    wave reads the one hand-off of its upstream in the version's folder, and the last approves."""
    other = example_spec(str(tmp_path / "store"), shards_per_stage=1, eval_shards=1, records=20, **same_keys(spec))
    job = job_of(other)
    instance = dg.DagsterInstance.ephemeral()
    waves = [
        (["producer_pins", "evaluation_release"], {}),
        (["dataset_shards"], whole_build_tags(other)),
        (["data_manifest"], {}),
        (["contamination_scan"], whole_build_tags(other)),  # the verification pass, before what uses it
        (
            [
                "training_scan",
                "dataset_profile",
                "contamination_report",
                "contamination_exclusions",
                "approved_dataset",
            ],
            {},
        ),
    ]
    for names, tags in waves:
        result = job.execute_in_process(
            instance=instance,
            tags=tags,
            raise_on_error=False,
            asset_selection=[dg.AssetKey([other.name, n]) for n in names],
        )
        assert result.success, names
    approval = made(result, "approved_dataset")
    assert approval["version"] == other.layout().version and approval["shards"] == 5
