"""Every way a Dagster user launches the lifecycle, through the GraphQL API of a real
`dagster-webserver` (and `dagster-daemon`) on 127.0.0.1: launchRun without partitions, a
partition backfill of every shard (the UI's "Materialize all"), and the schedule's tick."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

dg = pytest.importorskip("dagster")

from deployment import REPO, Deployment, write_home  # noqa: E402
from pipelines.examples.spec import example_spec  # noqa: E402
from services import base_env, processes, wait_for  # noqa: E402
from trainvault.approval import write_keypair  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Parameter `backfill_policy`")
SHARD_ASSET = "dataset_shards"
APPROVAL_ASSET = "approved_dataset"


@pytest.fixture(scope="module")
def location(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[tuple[Deployment, object]]:
    """Code server, webserver and daemon on a sqlite instance; 8 shards of 20 records in a local store."""
    tmp = tmp_path_factory.mktemp("launch")
    keys = tmp / "approver"
    write_keypair(keys)
    settings = {"TRAINVAULT_DEMO_ROOT": str(tmp / "store"), "TRAINVAULT_DEMO_SHARDS": "2",
                "TRAINVAULT_DEMO_EVAL_SHARDS": "1", "TRAINVAULT_DEMO_RECORDS": "20",
                "TRAINVAULT_SIGNING_KEY": f"{keys}.key", "TRAINVAULT_TRUSTED_KEY": f"{keys}.pub"}
    home = write_home(tmp / "home", None)
    env = base_env(DAGSTER_HOME=str(home), PYTHONPATH=f"{REPO}:{REPO / 'tests'}", **settings)
    spec = example_spec(settings["TRAINVAULT_DEMO_ROOT"], shards_per_stage=2, eval_shards=1, records=20,
                        signing_key_path=f"{keys}.key", trusted_keys_path=f"{keys}.pub")
    with processes(tmp / "logs", env, request) as procs:
        deployment = Deployment(procs, home, tmp / "workspace.yaml", "deploy_location")
        deployment.start_code_server()
        deployment.start_webserver()
        deployment.start_daemon()
        yield deployment, spec


def shard_partitions(deployment: Deployment, run_id: str) -> list[str]:
    return sorted(p for key, p in deployment.materialized(run_id) if key.endswith(SHARD_ASSET))


def shard_descriptors(spec) -> list[Path]:
    return sorted(Path(spec.publication().data_root).rglob("*.complete.json"))


def test_launch_run_without_partitions_builds_every_shard(location) -> None:
    deployment, spec = location
    run_id = deployment.launch_run()
    assert deployment.wait_run(run_id) == "SUCCESS"
    assert shard_partitions(deployment, run_id) == sorted(spec.partition_keys())
    assert len(shard_descriptors(spec)) == len(spec.partition_keys()) == 8
    assert any(key.endswith(APPROVAL_ASSET) for key, _ in deployment.materialized(run_id))


def test_materialize_all_backfill_completes_in_as_few_runs_as_the_policy_allows(location) -> None:
    deployment, spec = location
    keys = deployment.asset_keys()
    backfill_id = deployment.launch_backfill(keys, spec.partition_keys())
    final = wait_for(lambda: (b := deployment.backfill(backfill_id))["status"] not in ("REQUESTED", "CANCELING", "FAILING") and b,
                     300, f"backfill {backfill_id} to finish", 1)
    assert final["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), final
    runs = final["runs"]
    assert runs and all(r["status"] == "SUCCESS" for r in runs), runs
    # single_run backfill policy: every shard partition in one run. An asset backfill puts
    # unpartitioned assets in runs of their own: one for the pins upstream of the shards, one
    # for the stages downstream of them; nothing is materialized twice.
    with_shards = [r["runId"] for r in runs if shard_partitions(deployment, r["runId"])]
    assert len(with_shards) == 1 and shard_partitions(deployment, with_shards[0]) == sorted(spec.partition_keys())
    assert len(runs) == 3
    materialized = [(key, p) for r in runs for key, p in deployment.materialized(r["runId"])]
    assert len(materialized) == len(set(materialized))
    assert {"/".join(k) for k in keys} == {key for key, _ in materialized}


def test_the_daemon_s_schedule_tick_launches_a_run_that_completes(location) -> None:
    deployment, spec = location
    with deployment.schedule_running():
        # One-minute cron: the daemon's next tick is at most a minute away.
        runs = wait_for(lambda: deployment.runs(tags=[{"key": "dagster/schedule_name", "value": "nightly_rebuild"}]),
                        150, "a run launched by the schedule's tick", 2)
    run_id = runs[0]["runId"]
    assert deployment.wait_run(run_id) == "SUCCESS"
    assert shard_partitions(deployment, run_id) == sorted(spec.partition_keys())
