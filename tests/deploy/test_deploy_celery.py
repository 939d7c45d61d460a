"""The code location run as deployed (issues 18, 25): a Dagster instance on PostgreSQL
(pipelines/deploy/dagster-celery.yaml, a fresh database dropped afterwards), the S3 store on a
moto server, and real processes on 127.0.0.1 — a code server, `dagster-daemon`,
`dagster-webserver` and two `dagster-celery` workers on the deployment's own RabbitMQ vhost
(made and deleted here). One deployment started process by process serves most checks; a
second, started by pipelines/deploy/local.sh (`make deploy-local`) beside it on the same
broker, serves the local.sh checks. Runs are launched through the webserver's GraphQL API.
"""

from __future__ import annotations

import os
import signal
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

dg = pytest.importorskip("dagster")
pytest.importorskip("dagster_celery")
pytest.importorskip("dagster_postgres")

from pipelines.catalog import load_datasets  # noqa: E402
from pipelines.celery_app import LOST_KEY  # noqa: E402
from pipelines.definitions import DEPLOYMENT_ENV, build_definitions  # noqa: E402
from resources.storage import StorageResource  # noqa: E402
from trainvault import TrainVault  # noqa: E402
from trainvault.approval import write_keypair  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Parameter `backfill_policy`")

GENERATOR = "support.gated_records:generate_records"
RECORDS = 20
#: The catalog: each check builds its own dataset (3 train stages x N shards + valid + test).
MAIN, KILL, RESTART, PAIR = "deploy_main", "deploy_kill", "deploy_restart", "deploy_pair"
SHARDS_PER_STAGE = {MAIN: 10, KILL: 10, RESTART: 2, PAIR: 2}
#: The local.sh deployment's catalog.
LOCAL_PAIR, LOCAL_KILL = "local_pair", "local_kill"
LOCAL_SHARDS_PER_STAGE = {LOCAL_PAIR: 2, LOCAL_KILL: 4}


@dataclass
class Celery:
    """The deployment, its datasets, where their data lives, and how to reach it."""

    deployment: Any  # support.deployment.Deployment
    procs: Any  # support.services.Processes
    specs: dict
    s3: TrainVault
    reference_s3: TrainVault
    gate: Path


@dataclass
class Site:
    """What a deployment's processes share: a catalog on S3 (a bucket of its own), a key pair, a gate,
    and their environment (less the database and the S3 endpoint)."""

    tmp: Path
    catalog: Path
    bucket: str
    gate: Path
    base_env: dict[str, str]

    def env(self, s3_server: str, db: str) -> dict[str, str]:
        return {**self.base_env, "DAGSTER_PG_DB": db, "TRAINVAULT_S3_URL": s3_server}


@pytest.fixture(scope="module")
def make_site(
    services: ModuleType, dagster_deploy: ModuleType, gated: ModuleType, s3_key_id: str, s3_secret: str
) -> Callable[[Path, dict[str, int]], Site]:
    """`make_site(tmp, shards_per_stage)`: a Site in `tmp` serving those datasets."""

    def make(tmp: Path, shards_per_stage: dict[str, int]) -> Site:
        keys = tmp / "approver"
        write_keypair(keys)
        bucket = dagster_deploy.unique_name("deploy").replace("_", "-")
        root = f"s3://{bucket}/publications"
        catalog = dagster_deploy.write_catalog(
            tmp / "datasets.yaml",
            [
                dagster_deploy.dataset_entry(name, root, keys, shards_per_stage=n, records=RECORDS, generator=GENERATOR)
                for name, n in shards_per_stage.items()
            ],
        )
        gate = tmp / "gate"
        gate.touch()
        env = services.base_env(
            DAGSTER_HOME=str(tmp / "home"),
            PYTHONPATH=f"{dagster_deploy.REPO}:{dagster_deploy.REPO / 'tests'}",
            **dagster_deploy.PG,
            TRAINVAULT_DATASETS=str(catalog),
            TRAINVAULT_EXECUTOR="celery",
            **DEPLOYMENT_ENV,
            TRAINVAULT_S3_REGION="us-east-1",
            TRAINVAULT_S3_KEY_ID=s3_key_id,
            TRAINVAULT_S3_SECRET=s3_secret,
            **{gated.GATE_ENV: str(gate)},
        )
        return Site(tmp, catalog, bucket, gate, env)

    return make


def make_bucket(server: str, bucket: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{server}/{bucket}", method="PUT"), timeout=5).read()


@pytest.fixture(scope="module")
def celery(
    make_site: Callable[[Path, dict[str, int]], Site],
    s3_config: Callable[..., Any],
    dagster_deploy: ModuleType,
    services: ModuleType,
    s3_server,
    tmp_path_factory,
    request,
) -> Iterator[Celery]:
    services.require_services("PostgreSQL", "RabbitMQ")
    site = make_site(tmp_path_factory.mktemp("deploy"), SHARDS_PER_STAGE)
    home = dagster_deploy.write_home(site.tmp / "home", dagster_deploy.DEPLOY / "dagster-celery.yaml")
    name = dagster_deploy.unique_name("trainvault_deploy")  # the database's and the vhost's, as local.sh names them
    with (
        services.postgres_db(name) as db,
        services.rabbitmq_vhost(name) as broker,
        services.processes(site.tmp / "logs", site.env(s3_server, db), request) as procs,
    ):
        reference = start_moto(procs, services)
        for server in (s3_server, reference):
            make_bucket(server, site.bucket)
        deployment = dagster_deploy.Deployment(procs, home, site.tmp / "workspace.yaml", broker=broker)
        deployment.start_code_server()
        for name in ("w1", "w2"):
            deployment.start_worker(name, dagster_deploy.DEPLOY / "celery-worker.yaml")
        deployment.start_webserver()
        deployment.start_daemon()
        yield Celery(
            deployment,
            procs,
            {s.name: s for s in load_datasets(site.catalog)},
            TrainVault(storage=s3_config(s3_server)),
            TrainVault(storage=s3_config(reference)),
            site.gate,
        )


def start_moto(procs: Any, services: ModuleType) -> str:
    """A second S3 server for in-process reference runs: same bucket and URIs, other bytes store."""
    port = services.free_port()
    procs.start(
        "reference-s3", ["moto_server", "-H", "127.0.0.1", "-p", str(port)], ready=lambda p: services.port_open(port)
    )
    return f"http://127.0.0.1:{port}"


def reference_run(celery: Celery, name: str, s3_key_id: str, s3_secret: str) -> dict[str, bytes]:
    """The same spec at the same URIs, in process on the reference S3: {uri: bytes} of its data."""
    spec = celery.specs[name]
    server = celery.reference_s3.storage.config.s3_base_url
    store = StorageResource(
        s3_base_url=server, region="us-east-1", access_key_id=s3_key_id, secret_access_key=s3_secret
    )
    result = (
        build_definitions([spec], store)
        .resolve_job_def(f"lifecycle_{name}")
        .execute_in_process(instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    )
    assert result.success
    return data_objects(celery.reference_s3, spec)


def data_objects(vault: TrainVault, spec) -> dict[str, bytes]:
    """Every object under the publication's data folder: {uri: bytes}."""
    return {o.uri: vault.storage.get(o.uri) for o in vault.storage.list(spec.layout().data_root)}


def celery_hosts(instance, run_id: str) -> dict[str, set[str]]:
    """{step key: the Celery workers that executed it}, from the run's engine events."""
    hosts: dict[str, set[str]] = {}
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        data = record.dagster_event.engine_event_data
        worker = data.metadata.get("Celery worker") if data and data.metadata else None
        if worker is not None:
            hosts.setdefault(record.step_key, set()).add(worker.value)
    return hosts


def entry_id(entry) -> tuple:
    return entry.timestamp, entry.step_key, entry.user_message


@pytest.fixture(scope="module")
def instance(celery, dagster_deploy: ModuleType) -> Iterator[dg.DagsterInstance]:
    with dagster_deploy.instance_of(celery.deployment) as inst:
        yield inst


def step_story(instance, run_id: str, step: str) -> list[tuple[str, dict]]:
    """The step's STEP_STARTs ("start", {}) and lost-worker notices ("lost", their metadata), in log order."""
    story = []
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None or record.step_key != step:
            continue
        if event.event_type == dg.DagsterEventType.STEP_START:
            story.append(("start", {}))
        elif event.event_type == dg.DagsterEventType.ENGINE_EVENT and LOST_KEY in event.engine_event_data.metadata:
            story.append(("lost", {k: v.value for k, v in event.engine_event_data.metadata.items()}))
    return story


@pytest.fixture(scope="module")
def main_run(celery) -> str:
    """The lifecycle of the 32-shard dataset through the Celery executor, launched by launchRun."""
    run_id = celery.deployment.launch_run(MAIN)
    assert celery.deployment.wait_run(run_id) == "SUCCESS"
    return run_id


def shard_step(name: str) -> str:
    return f"{name}__dataset_shards"


def test_lifecycle_through_celery_workers_to_an_approval(
    s3_secret: str, s3_key_id: str, dagster_deploy: ModuleType, celery, instance, main_run
) -> None:
    spec = celery.specs[MAIN]
    assert len(spec.partition_keys()) >= 32
    materialized = celery.deployment.materialized(main_run)
    assert sorted(p for k, p in materialized if k == f"{MAIN}/dataset_shards" and p) == sorted(spec.partition_keys())
    assert f"{MAIN}/approved_dataset" in {k for k, _ in materialized}
    checks = dagster_deploy.check_results(instance, main_run)
    assert {"within_contract", "approval_opens"} <= set(checks) and all(checks.values()), checks
    hosts = celery_hosts(instance, main_run)
    assert {h.split("@")[0] for hs in hosts.values() for h in hs} == {"w1", "w2"}, hosts
    deployed = data_objects(celery.s3, spec)
    assert spec.layout().manifest_uri in deployed
    assert deployed == reference_run(celery, MAIN, s3_key_id, s3_secret)  # the manifest and every shard, byte for byte


def catalog_rows(text: str, assets: list[str]) -> dict[str, str]:
    """The catalog's text cut into one row per asset (a row runs from its name to the next name)."""
    lines = text.splitlines()
    starts = sorted((lines.index(key), key) for key in assets)
    ends = [i for i, _ in starts[1:]] + [len(lines)]
    return {key: "\n".join(lines[i:end]) for (i, key), end in zip(starts, ends, strict=False)}


def visit(page, url: str, shot: Path) -> None:
    """Open `url`, wave away the first-visit newsletter dialog, screenshot (also when an assertion fails later)."""
    page.goto(url)
    page.wait_for_load_state("networkidle")
    skip = page.get_by_role("button", name="Skip")
    if skip.count():
        skip.first.click()
    page.screenshot(path=shot, full_page=True)


def test_the_ui_shows_the_assets_the_check_and_the_approval(celery, instance, main_run, browser_page, tmp_path) -> None:
    from playwright.sync_api import expect

    page, base = browser_page, f"http://127.0.0.1:{celery.deployment.ui_port}"
    approval = instance.fetch_materializations(dg.AssetKey([MAIN, "approved_dataset"]), limit=1).records[0]
    sha256 = approval.asset_materialization.metadata["sha256"].value
    # The location's assets of this dataset (with contamination_exclusions where its policy allows them).
    assets = [key[1] for key in celery.deployment.asset_keys(MAIN)]
    assert {"dataset_shards", "contamination_scan", "contamination_report", "approved_dataset"} <= set(assets)
    shards = len(celery.specs[MAIN].partition_keys())

    # Every asset of the dataset is in the dataset's own group, as the UI's lineage draws it (a job
    # graph of one group draws no group box, so the webserver's answer is checked).
    nodes = celery.deployment.graphql("{ assetNodes { assetKey { path } groupName } }")["assetNodes"]
    groups = {node["groupName"] for node in nodes if node["assetKey"]["path"][0] == MAIN}
    assert groups == {MAIN}, groups
    # The dataset's asset graph (its job's view): every asset; the catalog below shows each one's status.
    visit(page, f"{base}/locations/trainvault/jobs/lifecycle_{MAIN}", tmp_path / "asset-graph.png")
    expect(page.get_by_text(f"View {len(assets)} assets").first).to_be_visible()

    visit(page, f"{base}/assets/{MAIN}", tmp_path / "catalog.png")
    expect(page.get_by_text("Materialized").first).to_be_visible()
    rows = catalog_rows(page.inner_text("body"), assets)
    # Every partition materialized: "All" of the 32, none missing, failed or in progress.
    for partitioned in ("dataset_shards", "contamination_scan"):
        assert f"{shards} partitions" in rows.pop(partitioned)
    assert all("Materialized" in row for row in rows.values()), rows

    visit(page, f"{base}/assets/{MAIN}/approved_dataset", tmp_path / "approved-dataset.png")
    expect(page.get_by_text(sha256, exact=True).first).to_be_visible()

    for asset, check in (("contamination_report", "within_contract"), ("approved_dataset", "approval_opens")):
        visit(page, f"{base}/assets/{MAIN}/{asset}?view=checks", tmp_path / f"{check}.png")
        expect(page.get_by_text(check).first).to_be_visible()
        expect(page.get_by_text("Passed", exact=True).first).to_be_visible()


def test_a_worker_killed_mid_shards_the_run_completes_on_the_survivor(
    s3_secret: str, s3_key_id: str, dagster_deploy: ModuleType, services: ModuleType, celery, instance, main_run
) -> None:
    spec = celery.specs[KILL]
    celery.gate.unlink()  # hard shards wait: the shard step is mid-way when its worker dies
    try:
        run_id = celery.deployment.launch_run(KILL)
        hosts = services.wait_for(
            lambda: celery_hosts(instance, run_id).get(shard_step(KILL)), 300, "a worker to take the shard step", 1
        )
        (victim,) = hosts
        services.wait_for(
            lambda: len(celery.s3.storage.list(spec.layout().data_root)) >= 4,
            120,
            "the first shards to be written",
            0.5,
        )
        celery.procs.get(victim.split("@")[0]).kill9()
    finally:
        celery.gate.touch()
    assert celery.deployment.wait_run(run_id, timeout=600) == "SUCCESS"
    shard_hosts = celery_hosts(instance, run_id)[shard_step(KILL)]
    assert victim in shard_hosts and len(shard_hosts) == 2  # redelivered to the survivor
    # The log says why the step started twice: the victim was lost, the survivor re-runs it.
    story = step_story(instance, run_id, shard_step(KILL))
    assert [kind for kind, _ in story] == ["start", "lost", "start"], story
    assert story[1][1][LOST_KEY] == victim and story[1][1]["Redelivered to"] == (shard_hosts - {victim}).pop()
    # Same objects, same bytes, nothing extra (no half-published shard) as the in-process run.
    assert data_objects(celery.s3, spec) == reference_run(celery, KILL, s3_key_id, s3_secret)
    # The killed worker comes back for the checks after this one.
    celery.deployment.start_worker(victim.split("@")[0], dagster_deploy.DEPLOY / "celery-worker.yaml")


def test_daemon_and_webserver_killed_mid_run_lose_no_run_record(
    services: ModuleType, celery, instance, main_run
) -> None:
    deployment = celery.deployment
    celery.gate.unlink()
    try:
        run_id = deployment.launch_run(RESTART)
        services.wait_for(
            lambda: celery_hosts(instance, run_id).get(shard_step(RESTART)), 300, "the shard step to start", 1
        )
        before = [entry_id(r) for r in instance.all_logs(run_id)]
        for name in ("daemon", "webserver"):
            celery.procs.get(name).kill9()
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.STARTED
        deployment.start_webserver()
        deployment.start_daemon()
    finally:
        celery.gate.touch()
    assert deployment.wait_run(run_id, timeout=600) == "SUCCESS"
    records = instance.all_logs(run_id)
    assert before == [entry_id(r) for r in records][: len(before)]
    types = [r.dagster_event.event_type for r in records if r.dagster_event]
    assert types.count(dg.DagsterEventType.RUN_SUCCESS) == 1 and dg.DagsterEventType.RUN_START in types
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS


def test_the_nightly_tick_rebuilds_reusing_every_shard_and_ends_approved(
    services: ModuleType, dagster_deploy: ModuleType, celery, instance, main_run
) -> None:
    spec = celery.specs[MAIN]
    before = {o.uri: o.etag for o in celery.s3.storage.list(spec.layout().base)}
    deployment = celery.deployment
    deployment.start_schedule(MAIN)  # cron every minute: the daemon's next tick is at most a minute away
    try:
        runs = services.wait_for(
            lambda: deployment.scheduled_runs(MAIN), 150, "a run launched by the schedule's tick", 2
        )
    finally:
        deployment.stop_schedule(MAIN)
    run_id = runs[-1]["runId"]
    assert deployment.wait_run(run_id) == "SUCCESS"
    # Nothing written: every shard reused, the same approval record reused.
    assert {o.uri: o.etag for o in celery.s3.storage.list(spec.layout().base)} == before
    shards = [
        r.dagster_event.step_materialization_data.materialization
        for r in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
        if r.dagster_event.asset_key == dg.AssetKey([MAIN, "dataset_shards"]) and r.dagster_event.partition
    ]
    assert len(shards) == len(spec.partition_keys())
    assert not any(m.metadata["written"].value for m in shards)
    assert f"{MAIN}/approved_dataset" in {k for k, _ in deployment.materialized(run_id)}
    checks = dagster_deploy.check_results(instance, run_id)
    assert {"within_contract", "approval_opens"} <= set(checks) and all(checks.values()), checks


# -- pipelines/deploy/local.sh (`make deploy-local`) beside the deployment above --------------


@dataclass
class Local:
    """The local.sh deployment: its site, its instance, local.sh's own output up to ready."""

    deployment: Any  # support.deployment.Deployment
    site: Site
    instance: dg.DagsterInstance
    startup_log: str


@pytest.fixture(scope="module")
def local(
    make_site: Callable[[Path, dict[str, int]], Site],
    dagster_deploy: ModuleType,
    services: ModuleType,
    celery,
    s3_server,
    tmp_path_factory,
    request,
) -> Iterator[Local]:
    """local.sh on free ports, a fresh database and a vhost of its own, on the same broker and
    S3 server as `celery` (both deployments run at once)."""
    site = make_site(tmp_path_factory.mktemp("local"), LOCAL_SHARDS_PER_STAGE)
    make_bucket(s3_server, site.bucket)
    name = dagster_deploy.unique_name("trainvault_local")  # the database's and the vhost's, as local.sh names them
    with (
        services.postgres_db(name) as db,
        services.rabbitmq_vhost(name) as broker,
        services.processes(site.tmp / "logs", site.env(s3_server, db), request) as procs,
    ):
        deployment = dagster_deploy.Deployment(
            procs, site.tmp / "home", site.tmp / "home" / "workspace.yaml", broker=broker
        )
        script = deployment.start_local()
        try:
            with dagster_deploy.instance_of(deployment) as inst:
                yield Local(deployment, site, inst, script.log.read_text(errors="replace"))
        finally:
            script.stop(grace=60)  # local.sh stops its processes itself (SIGKILL after 10 s)


def workers_of(instance, run_id: str) -> set[str]:
    """The names (before the @host) of the workers that ran the run's steps."""
    return {host.split("@")[0] for hosts in celery_hosts(instance, run_id).values() for host in hosts}


def test_local_sh_starts_the_webserver_and_daemon_once_the_code_server_answers(celery, local) -> None:
    log = local.startup_log
    assert "Traceback" not in log, log
    answered = log.index("Started Dagster code proxy server")
    assert answered < log.index("Instance is configured with the following daemons")
    assert answered < log.index("Serving dagster-webserver")
    # Neither fresh instance covers its first page with the "Join the Dagster community" dialog.
    assert not local.deployment.shows_nux() and not celery.deployment.shows_nux()


def test_two_deployments_on_one_broker_run_steps_only_on_their_own_workers(celery, instance, local) -> None:
    runs = celery.deployment.launch_run(PAIR), local.deployment.launch_run(LOCAL_PAIR)
    assert celery.deployment.wait_run(runs[0]) == "SUCCESS" and local.deployment.wait_run(runs[1]) == "SUCCESS"
    # Each run's steps went to its own deployment's workers (w1, w2 / w1.<vhost>, w2.<vhost>) only.
    vhost = local.deployment.vhost
    assert set() < workers_of(instance, runs[0]) <= {"w1", "w2"}
    assert set() < workers_of(local.instance, runs[1]) <= {f"w1.{vhost}", f"w2.{vhost}"}


def test_local_sh_restarts_a_killed_worker_and_the_run_completes(
    dagster_deploy: ModuleType, services: ModuleType, celery, local
) -> None:
    deployment, spec = local.deployment, load_datasets(local.site.catalog)[1]
    assert spec.name == LOCAL_KILL
    script = deployment.procs.get("local.sh")
    local.site.gate.unlink()  # hard shards wait: the shard step is mid-way when its worker dies
    try:
        run_id = deployment.launch_run(LOCAL_KILL)
        (victim,) = services.wait_for(
            lambda: celery_hosts(local.instance, run_id).get(shard_step(LOCAL_KILL)),
            300,
            "a worker to take the shard step",
            1,
        )
        services.wait_for(
            lambda: len(celery.s3.storage.list(spec.layout().data_root)) >= 4,
            120,
            "the first shards to be written",
            0.5,
        )
        name = victim.split(".")[0]
        wrapper, main = deployment.local_worker(name)
        others = {pid for pid, _ in dagster_deploy.children(script.pid)} - {wrapper}
        os.kill(main, signal.SIGKILL)  # the Celery worker's main process, as a crash would
        services.wait_for(
            lambda: f"worker {name} (pid {wrapper}) exited; starting it again" in script.log_tail(100_000),
            60,
            "local.sh to start the killed worker again",
            0.5,
        )
    finally:
        local.site.gate.touch()
    assert deployment.wait_run(run_id, timeout=600) == "SUCCESS"
    story = step_story(local.instance, run_id, shard_step(LOCAL_KILL))
    assert [kind for kind, _ in story] == ["start", "lost", "start"], story
    assert story[1][1][LOST_KEY] == victim
    # Nothing else stopped: local.sh, its code server, daemon, webserver and the other worker
    # are the processes they were, and the killed worker runs again.
    assert script.alive()
    now = {pid for pid, _ in dagster_deploy.children(script.pid)}
    assert others <= now and len(now - others) == 1
    deployment.local_worker(name)
