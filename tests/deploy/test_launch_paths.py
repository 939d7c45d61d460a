"""Every way a Dagster user launches a dataset's lifecycle, through the GraphQL API of a real
`dagster-webserver` (and `dagster-daemon`) on 127.0.0.1 serving pipelines.definitions: the
schedule's tick (a test catalog with a one-minute cron, enabled), launchRun without a
partition selection, and a partition backfill of every shard (the UI's "Materialize all")."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

dg = pytest.importorskip("dagster")

from pipelines.catalog import load_datasets  # noqa: E402
from trainvault import TrainVault  # noqa: E402
from trainvault.approval import write_keypair  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Parameter `backfill_policy`")
GENERATOR = "pipelines.examples.curriculum:generate_records"
LAUNCHED, TICKED, BACKFILLED = "launched", "ticked", "backfilled"


@pytest.fixture(scope="module")
def location(
    dagster_deploy: ModuleType,
    services: ModuleType,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Any, dict, str]]:
    """Code server, webserver and daemon on a sqlite instance; three datasets of 8 shards of 20
    records in a local store: one launched by hand, one rebuilt every minute from the start, and
    one backfilled from the start (the backfill daemon acts every 30 s, so its five waves of
    runs proceed while the other tests run; the last test checks how it ended)."""
    tmp = tmp_path_factory.mktemp("launch")
    keys = tmp / "approver"
    write_keypair(keys)
    store = str(tmp / "store")
    catalog = dagster_deploy.write_catalog(
        tmp / "datasets.yaml",
        [
            dagster_deploy.dataset_entry(LAUNCHED, store, keys, shards_per_stage=2, records=20, generator=GENERATOR),
            dagster_deploy.dataset_entry(
                TICKED, store, keys, shards_per_stage=2, records=20, generator=GENERATOR, enabled=True
            ),
            dagster_deploy.dataset_entry(BACKFILLED, store, keys, shards_per_stage=2, records=20, generator=GENERATOR),
        ],
    )
    specs = {s.name: s for s in load_datasets(catalog)}
    home = dagster_deploy.write_home(tmp / "home", None)
    env = services.base_env(
        DAGSTER_HOME=str(home), PYTHONPATH=str(dagster_deploy.REPO), TRAINVAULT_DATASETS=str(catalog)
    )
    with services.processes(tmp / "logs", env, request) as procs:
        deployment = dagster_deploy.Deployment(procs, home, tmp / "workspace.yaml")
        deployment.start_code_server()
        deployment.start_webserver()
        deployment.start_daemon()
        backfill_id = deployment.launch_backfill(deployment.asset_keys(BACKFILLED))
        yield deployment, specs, backfill_id


def shard_partitions(deployment: Any, run_id: str) -> list[str]:
    # A run over every shard also records the asset once without a partition (its run totals).
    return sorted(p for key, p in deployment.materialized(run_id) if key.endswith("/dataset_shards") and p)


def shard_descriptors(spec) -> list[str]:
    return [o.uri for o in TrainVault().storage.list(spec.layout().data_root) if o.uri.endswith(".complete.json")]


def test_the_daemon_s_schedule_tick_launches_a_run_that_completes(services: ModuleType, location) -> None:
    deployment, specs, _ = location
    # One-minute cron, enabled in the catalog: the daemon's first tick is at most a minute away.
    runs = services.wait_for(lambda: deployment.scheduled_runs(TICKED), 150, "a run launched by the schedule's tick", 2)
    deployment.stop_schedule(TICKED)  # one tick is the test; no more runs competing for the CPUs
    run_id = runs[-1]["runId"]
    assert deployment.wait_run(run_id) == "SUCCESS"
    assert shard_partitions(deployment, run_id) == sorted(specs[TICKED].partition_keys())
    assert f"{TICKED}/approved_dataset" in {key for key, _ in deployment.materialized(run_id)}


def test_launch_run_without_partitions_builds_every_shard(location) -> None:
    deployment, specs, _ = location
    spec = specs[LAUNCHED]
    run_id = deployment.launch_run(LAUNCHED)
    assert deployment.wait_run(run_id) == "SUCCESS"
    assert shard_partitions(deployment, run_id) == sorted(spec.partition_keys())
    assert len(shard_descriptors(spec)) == len(spec.partition_keys()) == 8
    assert f"{LAUNCHED}/approved_dataset" in {key for key, _ in deployment.materialized(run_id)}


def test_materialize_all_backfill_completes_in_as_few_runs_as_the_policy_allows(services: ModuleType, location) -> None:
    deployment, specs, backfill_id = location
    spec = specs[BACKFILLED]
    keys = deployment.asset_keys(BACKFILLED)
    final = services.wait_for(
        lambda: (b := deployment.backfill(backfill_id))["status"] not in ("REQUESTED", "CANCELING", "FAILING") and b,
        300,
        f"backfill {backfill_id} to finish",
        1,
    )
    assert final["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), final
    runs = final["runs"]
    assert runs and all(r["status"] == "SUCCESS" for r in runs), runs
    # single_run backfill policy: all partitions of a partitioned asset in one run. An asset
    # backfill runs partitioned and unpartitioned assets apart, so the graph's five layers
    # (pins | shards | manifest | per-shard scans | report, approval) take five runs at most.
    materialized = [(key, p) for r in runs for key, p in deployment.materialized(r["runId"])]
    assert len(materialized) == len(set(materialized))
    assert {"/".join(k) for k in keys} == {key for key, _ in materialized}
    for asset in (f"{BACKFILLED}/dataset_shards", f"{BACKFILLED}/contamination_scan"):
        (run,) = [r["runId"] for r in runs if any(k == asset for k, _ in deployment.materialized(r["runId"]))]
        assert sorted(p for k, p in deployment.materialized(run) if k == asset and p) == sorted(spec.partition_keys())
    assert len(runs) <= 5, [deployment.materialized(r["runId"]) for r in runs]
