"""The lifecycle at 10,000 shards through the Celery deployment (issue 26).

tests/deploy/scale_datasets.yaml's dataset (3 train stages x 3,332 + 2 valid + 2 test shard
partitions of 10 records) runs as ONE asset backfill through a deployment as
tests/test_deploy_celery.py starts it: PostgreSQL, its own RabbitMQ vhost, a code server,
two `dagster-celery` workers, the daemon and the webserver. The data lives in a local
folder every process shares (the S3 path is covered at 32 shards by test_deploy_celery.py).
The daemon is killed and restarted while the backfill runs; every shard is recorded once.
An unchanged rebuild (the lifecycle job launched as one run over every shard, as the nightly
schedule launches it) reuses every shard and writes nothing. The UI's partitions page of
the shard asset and the page of the 10,000-partition run render in headless Chromium; the
figures (location load, backfill and rebuild wall time with each run's, render times) are
printed, never asserted.

``TRAINVAULT_SCALE_SHARDS`` (shards per train stage, default 3,332) makes it smaller.
`make test-scale` runs this file alone (`make test` runs it too).
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

dg = pytest.importorskip("dagster")
pytest.importorskip("dagster_celery")
pytest.importorskip("dagster_postgres")


from pipelines.catalog import load_datasets  # noqa: E402
from pipelines.definitions import DEPLOYMENT_ENV, whole_build_tags  # noqa: E402
from trainvault.approval import write_keypair  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Parameter `backfill_policy`")

CATALOG = Path(__file__).with_name("scale_datasets.yaml")
NAME = "scale"
SHARDS_PER_STAGE = os.environ.get("TRAINVAULT_SCALE_SHARDS", "3332")
PARTITIONED = ("dataset_shards", "contamination_scan")
CHECKS = {"within_contract", "approval_opens"}


@dataclass
class Scale:
    services: ModuleType
    deploy: ModuleType
    deployment: Any
    instance: dg.DagsterInstance
    spec: object
    data_root: Path


def scale_env(tmp: Path, keys: Path) -> dict[str, str]:
    """What the catalog reads from the environment, for the deployment and for this process."""
    return {
        "TRAINVAULT_DATASETS": str(CATALOG),
        "TRAINVAULT_SCALE_ROOT": str(tmp / "store"),
        "TRAINVAULT_SCALE_KEYS": str(keys),
        "TRAINVAULT_SCALE_SHARDS": SHARDS_PER_STAGE,
    }


@pytest.fixture(scope="module")
def scale(services: ModuleType, dagster_deploy: ModuleType, tmp_path_factory, request) -> Iterator[Scale]:
    services.require_services("PostgreSQL", "RabbitMQ")
    deploy = dagster_deploy
    tmp = tmp_path_factory.mktemp("scale")
    keys = tmp / "approver"
    write_keypair(keys)
    catalog_env = scale_env(tmp, keys)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in catalog_env.items():
            mp.setenv(name, value)
        (spec,) = load_datasets(CATALOG)
    home = deploy.write_home(tmp / "home", deploy.DEPLOY / "dagster-celery.yaml")
    name = deploy.unique_name("scale_deploy")
    with services.postgres_db(name) as db, services.rabbitmq_vhost(name) as broker:
        env = services.base_env(
            DAGSTER_HOME=str(home),
            PYTHONPATH=f"{deploy.REPO}:{deploy.REPO / 'tests'}",
            **deploy.PG,
            DAGSTER_PG_DB=db,
            TRAINVAULT_EXECUTOR="celery",
            **DEPLOYMENT_ENV,
            **catalog_env,
        )
        with services.processes(tmp / "logs", env, request) as procs:
            deployment = deploy.Deployment(procs, home, tmp / "workspace.yaml", broker=broker)
            start = time.perf_counter()
            deployment.start_code_server()
            print(f"\ncode server up with {len(spec.partition_keys())} partitions: {time.perf_counter() - start:.1f} s")
            for worker in ("w1", "w2"):
                deployment.start_worker(worker, deploy.DEPLOY / "celery-worker.yaml")
            deployment.start_webserver()
            deployment.start_daemon()
            with deploy.instance_of(deployment) as inst:
                yield Scale(services, deploy, deployment, inst, spec, tmp / "store" / spec.name)


def backfill_runs(instance, backfill_id: str) -> list:
    return list(instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id})))


def wait_backfill(scale: Scale, backfill_id: str, timeout: float) -> str:
    done = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}
    deployment = scale.deployment
    return scale.services.wait_for(
        lambda: (s := deployment.backfill(backfill_id)["status"]) in done and s, timeout, "the backfill to end", 2
    )


def materializations(instance, run_ids: list[str]) -> Counter:
    """How many times each (asset name, partition) was materialized by these runs."""
    counts: Counter = Counter()
    for run_id in run_ids:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            counts[(record.dagster_event.asset_key.path[-1], record.dagster_event.partition)] += 1
    return counts


def shard_metadata(instance, run_ids: list[str]) -> dict[str, dict]:
    """{partition: metadata} of the dataset_shards materializations of these runs."""
    out = {}
    for run_id in run_ids:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            event = record.dagster_event
            if event.asset_key.path[-1] == "dataset_shards":
                meta = event.step_materialization_data.materialization.metadata
                out[event.partition] = {k: v.value for k, v in meta.items()}
    return out


def stored(root: Path) -> dict[str, int]:
    """{path: mtime_ns} of every file under the dataset's root."""
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def deadline(scale: Scale) -> float:
    """Seconds a run or backfill over every shard may take before the test fails."""
    return 900 + 0.5 * len(scale.spec.partition_keys())


def backfill_across_a_daemon_restart(scale: Scale) -> tuple[str, list[str], float]:
    """One backfill of every asset and partition of the dataset; the daemon is killed once the
    shard run has written a shard, and started again. (id, run ids, wall s)."""
    deployment, timeout = scale.deployment, deadline(scale)
    start = time.perf_counter()
    backfill_id = deployment.launch_backfill(deployment.asset_keys(NAME))
    scale.services.wait_for(
        lambda: any(scale.data_root.rglob("*.complete.json")), timeout, "the shard run to write its first shard", 1
    )
    deployment.procs.get("daemon").kill9()
    assert deployment.backfill(backfill_id)["status"] == "REQUESTED"
    deployment.start_daemon()
    status = wait_backfill(scale, backfill_id, timeout)
    wall = time.perf_counter() - start
    runs = backfill_runs(scale.instance, backfill_id)
    if status != "COMPLETED_SUCCESS":
        for run in runs:
            print(run.run_id, run.status, *deployment.failures(run.run_id), sep="\n  ")
    assert status == "COMPLETED_SUCCESS"
    return backfill_id, [r.run_id for r in runs], wall


def step_times(instance, run_id: str) -> str:
    """Each step's wall time in the run, longest first."""
    stats = [s for s in instance.get_run_step_stats(run_id) if s.start_time and s.end_time]
    stats.sort(key=lambda s: s.end_time - s.start_time, reverse=True)
    return ", ".join(f"{s.step_key.split('__')[-1]} {s.end_time - s.start_time:.1f} s" for s in stats)


def run_spans(instance, run_ids: list[str]) -> str:
    """Each run's wall time and the wait before it (after the previous run ended), in start order:
    where a backfill's time goes besides its steps."""
    records = sorted(
        (r for r in instance.get_run_records(filters=dg.RunsFilter(run_ids=run_ids)) if r.start_time and r.end_time),
        key=lambda r: r.start_time,
    )
    spans, previous_end = [], None
    for r in records:
        wait = "" if previous_end is None else f"after {r.start_time - previous_end:.1f} s, "
        spans.append(f"{wait}{r.end_time - r.start_time:.1f} s")
        previous_end = r.end_time
    return "; ".join(spans)


@pytest.fixture(scope="module")
def build(scale) -> tuple[str, list[str]]:
    backfill_id, run_ids, wall = backfill_across_a_daemon_restart(scale)
    shards = len(scale.spec.partition_keys())
    print(f"\nbackfill of {shards} shards ({len(run_ids)} runs, daemon restarted): {wall:.1f} s")
    print(f"its runs (wall, and the wait before each): {run_spans(scale.instance, run_ids)}")
    return backfill_id, run_ids


def test_one_backfill_records_every_shard_once_across_a_daemon_restart(scale, build) -> None:
    _, run_ids = build
    keys = scale.spec.partition_keys()
    counts = materializations(scale.instance, run_ids)
    for asset in PARTITIONED:
        assert {p for (a, p) in counts if a == asset} == set(keys)
        assert {n for (a, _), n in counts.items() if a == asset} == {1}
    # Every other asset once, unpartitioned.
    others = {a: n for (a, p), n in counts.items() if a not in PARTITIONED}
    assert {"data_manifest", "contamination_report", "approved_dataset"} <= set(others)
    assert set(others.values()) == {1}
    # Each partitioned asset in one run of the whole range (the single-run backfill policy).
    for asset in PARTITIONED:
        assert len({r for r in run_ids if any(a == asset for a, _ in materializations(scale.instance, [r]))}) == 1
    checks = {}
    for run_id in run_ids:
        checks.update(scale.deploy.check_results(scale.instance, run_id))
    assert set(checks) >= CHECKS and all(checks.values()), checks


def test_an_unchanged_rebuild_reuses_every_shard(scale, build) -> None:
    # What the nightly schedule launches: the lifecycle job as one run over every shard partition.
    # Every shard is found complete and reused, every stage after it reuses its stored results, and
    # the same inputs approved again reuse the approval record: nothing under the dataset is written.
    before = stored(scale.data_root)
    start = time.perf_counter()
    run_id = scale.deployment.launch_run(NAME, tags=whole_build_tags(scale.spec))
    status = scale.deployment.wait_run(run_id, timeout=deadline(scale))
    wall = time.perf_counter() - start
    assert status == "SUCCESS"
    print(
        f"\nunchanged rebuild of the whole lifecycle, {len(scale.spec.partition_keys())} shards, one run: "
        f"{wall:.1f} s (the run {run_spans(scale.instance, [run_id])}; steps: {step_times(scale.instance, run_id)})"
    )
    meta = shard_metadata(scale.instance, [run_id])
    assert set(meta) == set(scale.spec.partition_keys())
    assert not any(m["written"] for m in meta.values())
    counts = materializations(scale.instance, [run_id])
    assert {a for a, _ in counts} >= {"data_manifest", "contamination_report", "approved_dataset"}
    assert stored(scale.data_root) == before  # no shard, result, manifest or approval written again


def render(page, url: str, shown, shot: Path) -> float:
    """Seconds from navigating to `url` until the locator `shown(page)` is on the page; a screenshot after."""
    start = time.perf_counter()
    page.goto(url)
    shown(page).first.wait_for(state="attached")
    took = time.perf_counter() - start
    page.screenshot(path=shot)
    return took


def test_the_partitions_page_and_the_shard_run_page_render(scale, build, browser_page, tmp_path) -> None:
    page = browser_page
    page.set_default_timeout(300_000)  # 10,000 partitions: the first paint of a page takes a while
    base, shards = f"http://127.0.0.1:{scale.deployment.ui_port}", len(scale.spec.partition_keys())
    (run_id,) = [r for r in build[1] if any(a == "dataset_shards" for a, _ in materializations(scale.instance, [r]))]
    # A first visit shows a dialog once; the timed visits come after it.
    page.goto(base)
    page.wait_for_load_state("networkidle")
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()
    partitions = render(
        page,
        f"{base}/assets/{NAME}/dataset_shards?view=partitions",
        # The status filter's "Materialized (N)" counts every partition.
        lambda p: p.get_by_role("checkbox", name=re.compile(rf"^Materialized\s*\(({shards}|{shards:,})\)$")),
        tmp_path / "partitions.png",
    )
    run = render(
        page, f"{base}/runs/{run_id}", lambda p: p.get_by_text(re.compile(r"^\s*Success\s*$")), tmp_path / "run.png"
    )
    print(f"\nUI render, {shards} partitions: asset partitions page {partitions:.1f} s, shard run page {run:.1f} s")
