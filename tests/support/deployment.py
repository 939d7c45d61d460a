"""A Dagster deployment of the code location on 127.0.0.1, as pipelines/deploy/ and README
"Deploy" describe it: a code server, `dagster-webserver`, `dagster-daemon` and (for the
Celery executor) `dagster-celery` workers, all on one instance ($DAGSTER_HOME/dagster.yaml),
driven through the webserver's GraphQL API as the UI drives it. Each Deployment has its own
broker URL (its own RabbitMQ vhost: `services.rabbitmq_vhost`); its processes start one by
one here, or all together through pipelines/deploy/local.sh (`start_local`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dagster as dg
import pytest
import yaml

from pipelines.examples.spec import key_fields
from support.services import BIN, Process, Processes, free_port, port_open, wait_for

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "pipelines" / "deploy"
LOCATION = "trainvault"
REPOSITORY = "__repository__"  # the repository a Definitions object is served as
DONE = {"SUCCESS", "FAILURE", "CANCELED"}

LAUNCH_RUN = """
mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message stack }
  ... on RunConfigValidationInvalid { errors { message } } ... on Error { message } } }"""
LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message stack }
  ... on Error { message } } }"""
BACKFILL = """
query($id: String!) { partitionBackfillOrError(backfillId: $id) { __typename
  ... on PartitionBackfill { status runs(limit: 100) { runId status } } } }"""
RUN = """
query($id: ID!) { runOrError(runId: $id) { __typename ... on Run { runId status tags { key value } } } }"""
RUNS = """
query($filter: RunsFilter) { runsOrError(filter: $filter) { ... on Runs { results { runId status tags { key value } } } } }"""
START_SCHEDULE = """
mutation($selector: ScheduleSelector!) { startSchedule(scheduleSelector: $selector) {
  __typename ... on ScheduleStateResult { scheduleState { status } } ... on Error { message } } }"""
STOP_SCHEDULE = """
mutation($id: String!) { stopRunningSchedule(id: $id) { __typename ... on Error { message } } }"""
SCHEDULE_STATE = """
query($selector: ScheduleSelector!) { scheduleOrError(scheduleSelector: $selector) {
  ... on Schedule { scheduleState { id status } } } }"""
LOCATION_LOADED = """
{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } } } } } }"""
MATERIALIZED = """
query($id: ID!) { runOrError(runId: $id) { ... on Run { assetMaterializations { assetKey { path } partition } } } }"""
FAILURES = """
query($id: ID!) { logsForRun(runId: $id, limit: 10000) { ... on EventConnection { events { __typename
  ... on ExecutionStepFailureEvent { stepKey error { message } }
  ... on RunFailureEvent { message } } } } }"""
ASSET_KEYS = "{ assetNodes { assetKey { path } isPartitioned } }"
DAEMONS = "{ instance { daemonHealth { allDaemonStatuses { daemonType healthy required } } } }"
SHOWS_NUX = "{ shouldShowNux }"
#: A fresh instance without a dagster.yaml of its own: telemetry and the community dialog off.
INSTANCE_YAML = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"


def graphql_post(port: int, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    if answer.get("errors"):
        raise AssertionError(f"GraphQL errors: {answer['errors']}")
    return answer["data"]


def write_home(home: Path, instance_yaml: Path | None) -> Path:
    """$DAGSTER_HOME with `instance_yaml` as its dagster.yaml (none: sqlite, INSTANCE_YAML)."""
    home.mkdir(parents=True, exist_ok=True)
    if instance_yaml is None:
        (home / "dagster.yaml").write_text(INSTANCE_YAML)
    else:
        shutil.copy(instance_yaml, home / "dagster.yaml")
    return home


def dataset_entry(
    name: str,
    root_uri: str,
    keys: Path,
    *,
    shards_per_stage: int,
    records: int,
    generator: str,
    cron: str = "* * * * *",
    enabled: bool = False,
) -> dict[str, Any]:
    """A catalog entry: the shipped demo_curriculum entry with these settings (3 train stages of
    `shards_per_stage` shards, one valid and one test shard), signed and scanned with `keys`."""
    demo = yaml.safe_load((REPO / "pipelines" / "datasets.yaml").read_text())["datasets"][0]
    return {
        **demo,
        "name": name,
        "root_uri": root_uri,
        "generator": generator,
        "records_per_shard": records,
        "splits": [
            {"name": "train", "stages": ["easy", "medium", "hard"], "shards": shards_per_stage},
            {"name": "valid", "shards": 1},
            {"name": "test", "shards": 1},
        ],
        **key_fields(keys),
        "schedule": {"cron": cron, "enabled": enabled},
    }


def write_catalog(path: Path, entries: list[dict[str, Any]]) -> Path:
    """The dataset catalog the location serves ($TRAINVAULT_DATASETS)."""
    path.write_text(yaml.safe_dump({"datasets": entries}, sort_keys=False))
    return path


def code_server_answers(port: int) -> bool:
    """The code server at 127.0.0.1:`port` answers gRPC health checks (its location is loaded)."""
    if not port_open(port):
        return False
    check = subprocess.run(
        [str(BIN / "dagster"), "api", "grpc-health-check", "-h", "127.0.0.1", "-p", str(port)],
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return check.returncode == 0


def children(pid: int) -> list[tuple[int, list[str]]]:
    """(pid, argv) of each live child of `pid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:  # gone meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append((int(entry.name), argv))
    return found


def write_workspace(path: Path, code_port: int) -> Path:
    """A workspace that reaches the code location's gRPC server (the deployed shape: webserver,
    daemon and runs all use one code server, which outlives a restart of the other two)."""
    path.write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {code_port}\n"
        f"      location_name: {LOCATION}\n"
    )
    return path


@dataclass
class Deployment:
    """The processes of one deployment and the GraphQL API of its webserver."""

    procs: Processes
    home: Path
    workspace: Path
    #: The Celery broker of this deployment's workers and runs (amqp://.../<its own vhost>).
    broker: str | None = None
    code_module: str = "pipelines.definitions"
    code_port: int = 0
    ui_port: int = 0

    @property
    def env(self) -> dict[str, str]:
        """What each of its processes gets on top of `procs.env`."""
        return {"TRAINVAULT_CELERY_BROKER": self.broker} if self.broker else {}

    @property
    def vhost(self) -> str:
        return urlsplit(self.broker or "").path.lstrip("/")

    # -- processes -------------------------------------------------------------

    def start_code_server(self) -> Process:
        self.code_port = self.code_port or free_port()
        write_workspace(self.workspace, self.code_port)
        return self.procs.start(
            "code-server",
            [
                "dagster",
                "code-server",
                "start",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.code_port),
                "-m",
                self.code_module,
                "--working-directory",
                str(REPO),
                "--location-name",
                LOCATION,
            ],
            env=self.env,
            cwd=REPO,
            ready=lambda p: code_server_answers(self.code_port),
        )

    def start_webserver(self) -> Process:
        self.ui_port = self.ui_port or free_port()
        proc = self.procs.start(
            "webserver",
            ["dagster-webserver", "-w", str(self.workspace), "-h", "127.0.0.1", "-p", str(self.ui_port)],
            env=self.env,
            cwd=REPO,
            ready=lambda p: port_open(self.ui_port),
        )
        wait_for(self.location_loaded, 120, "the webserver to load the code location")
        return proc

    def start_daemon(self) -> Process:
        proc = self.procs.start("daemon", ["dagster-daemon", "run", "-w", str(self.workspace)], env=self.env, cwd=REPO)
        wait_for(self.daemons_healthy, 120, "the daemon's heartbeats (scheduler, run queue, backfills)", interval=1)
        return proc

    def start_worker(self, name: str, config_yaml: Path) -> Process:
        """A dagster-celery worker: one task at a time, its name in every step it executes."""
        return self.procs.start(
            name,
            [
                "dagster-celery",
                "worker",
                "start",
                "-A",
                "pipelines.celery_app",
                "-n",
                name,
                "-y",
                str(config_yaml),
                "--",
                "--concurrency=1",
                "--without-gossip",
                "--without-mingle",
            ],
            env=self.env,
            cwd=REPO,
            ready=lambda p: b" ready." in p.log.read_bytes(),
        )

    def start_local(self, timeout: float = 300) -> Process:
        """pipelines/deploy/local.sh (`make deploy-local`) on free ports, $DAGSTER_HOME `home`, making
        and using the vhost of `broker`; returns once the location is loaded and the daemon healthy."""
        self.code_port, self.ui_port = self.code_port or free_port(), self.ui_port or free_port()
        env = {
            **self.env,
            "TRAINVAULT_CELERY_BROKER": "",
            "TRAINVAULT_CELERY_VHOST": self.vhost,
            "DAGSTER_HOME": str(self.home),
            "UI_PORT": str(self.ui_port),
            "CODE_PORT": str(self.code_port),
            "VENV": str(BIN.parent),
        }
        proc = self.procs.start(
            "local.sh",
            [str(DEPLOY / "local.sh")],
            env=env,
            cwd=REPO,
            ready=lambda p: port_open(self.ui_port),
            timeout=timeout,
        )
        wait_for(self.location_loaded, 120, "the webserver to load the code location")
        wait_for(self.daemons_healthy, 120, "the daemon's heartbeats (scheduler, run queue, backfills)", interval=1)
        return proc

    def local_worker(self, name: str) -> tuple[int, int]:
        """(dagster-celery wrapper pid, Celery main process pid) of local.sh's worker `name`."""
        (wrapper,) = [
            pid
            for pid, argv in children(self.procs.get("local.sh").pid)
            if "worker" in argv and f"{name}.{self.vhost}" in argv
        ]
        (main,) = [pid for pid, argv in children(wrapper) if "worker" in argv]
        return wrapper, main

    # -- GraphQL -----------------------------------------------------------------

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        return graphql_post(self.ui_port, query, variables)

    def location_loaded(self) -> bool:
        try:
            entries = self.graphql(LOCATION_LOADED)["workspaceOrError"]["locationEntries"]
        except OSError:
            return False
        for entry in entries:
            if entry["name"] == LOCATION and entry["loadStatus"] == "LOADED":
                error = entry["locationOrLoadError"]
                if error and error["__typename"] == "PythonError":
                    raise AssertionError(f"code location failed to load: {error['message']}")
                return True
        return False

    def shows_nux(self) -> bool:
        """Whether the UI opens with Dagster's "Join the Dagster community" dialog."""
        return self.graphql(SHOWS_NUX)["shouldShowNux"]

    def daemons_healthy(self) -> bool:
        statuses = self.graphql(DAEMONS)["instance"]["daemonHealth"]["allDaemonStatuses"]
        wanted = {"SCHEDULER", "QUEUED_RUN_COORDINATOR", "BACKFILL"}
        return wanted <= {s["daemonType"] for s in statuses if s["healthy"]}

    def launch_run(self, dataset: str, *, tags: dict[str, str] | None = None) -> str:
        """launchRun of the dataset's lifecycle job, no partition chosen, as the launchpad does it; the run's id."""
        params = {
            "selector": {
                "repositoryLocationName": LOCATION,
                "repositoryName": REPOSITORY,
                "jobName": f"lifecycle_{dataset}",
            },
            "runConfigData": {},
            "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
        }
        result = self.graphql(LAUNCH_RUN, params=params)["launchRun"]
        assert result["__typename"] == "LaunchRunSuccess", result
        return result["run"]["runId"]

    def launch_backfill(self, asset_keys: list[list[str]]) -> str:
        """launchPartitionBackfill of every partition of these assets (the UI's "Materialize all")."""
        params = {"assetSelection": [{"path": k} for k in asset_keys], "allPartitions": True, "fromFailure": False}
        result = self.graphql(LAUNCH_BACKFILL, params=params)["launchPartitionBackfill"]
        assert result["__typename"] == "LaunchBackfillSuccess", result
        return result["backfillId"]

    def run_status(self, run_id: str) -> str:
        return self.graphql(RUN, id=run_id)["runOrError"]["status"]

    def wait_run(self, run_id: str, timeout: float = 300) -> str:
        """The run's final status (bounded wait)."""
        status = wait_for(lambda: (s := self.run_status(run_id)) in DONE and s, timeout, f"run {run_id} to finish", 1)
        if status != "SUCCESS":
            # Printed, so a failed assertion on the status shows why the run failed.
            print(f"run {run_id} ended {status}:", *self.failures(run_id), sep="\n  ")
        return status

    def failures(self, run_id: str) -> list[str]:
        """The run's step and run failure messages, from its event log."""
        events = self.graphql(FAILURES, id=run_id)["logsForRun"].get("events", [])
        return [
            f"{e.get('stepKey') or 'run'}: {(e.get('error') or {}).get('message') or e.get('message')}"
            for e in events
            if e["__typename"] in ("ExecutionStepFailureEvent", "RunFailureEvent")
        ]

    def materialized(self, run_id: str) -> list[tuple[str, str | None]]:
        """(asset key, partition) of every materialization the run recorded."""
        events = self.graphql(MATERIALIZED, id=run_id)["runOrError"]["assetMaterializations"]
        return [("/".join(e["assetKey"]["path"]), e["partition"]) for e in events]

    def asset_keys(self, dataset: str) -> list[list[str]]:
        return [
            n["assetKey"]["path"] for n in self.graphql(ASSET_KEYS)["assetNodes"] if n["assetKey"]["path"][0] == dataset
        ]

    def backfill(self, backfill_id: str) -> dict[str, Any]:
        return self.graphql(BACKFILL, id=backfill_id)["partitionBackfillOrError"]

    def runs(self, **filter: Any) -> list[dict[str, Any]]:
        return self.graphql(RUNS, filter=filter)["runsOrError"]["results"]

    @staticmethod
    def schedule_selector(dataset: str) -> dict[str, str]:
        return {
            "repositoryLocationName": LOCATION,
            "repositoryName": REPOSITORY,
            "scheduleName": f"nightly_rebuild_{dataset}",
        }

    def schedule_status(self, dataset: str) -> str:
        return self.graphql(SCHEDULE_STATE, selector=self.schedule_selector(dataset))["scheduleOrError"][
            "scheduleState"
        ]["status"]

    def start_schedule(self, dataset: str) -> None:
        """Switch the dataset's rebuild schedule on, as the UI's toggle does."""
        result = self.graphql(START_SCHEDULE, selector=self.schedule_selector(dataset))["startSchedule"]
        assert result["__typename"] == "ScheduleStateResult", result

    def stop_schedule(self, dataset: str) -> None:
        state = self.graphql(SCHEDULE_STATE, selector=self.schedule_selector(dataset))["scheduleOrError"][
            "scheduleState"
        ]
        result = self.graphql(STOP_SCHEDULE, id=state["id"])["stopRunningSchedule"]
        assert result["__typename"] == "ScheduleStateResult", result

    def scheduled_runs(self, dataset: str) -> list[dict[str, Any]]:
        """Runs the dataset's schedule launched, newest first."""
        return self.runs(tags=[{"key": "dagster/schedule_name", "value": f"nightly_rebuild_{dataset}"}])


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@contextmanager
def instance_of(deployment: Deployment) -> Iterator[dg.DagsterInstance]:
    """A deployment's instance read from this process (same dagster.yaml, same database)."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in deployment.procs.env.items():
            if name.startswith("DAGSTER_PG_"):
                mp.setenv(name, value)
        with dg.DagsterInstance.from_config(str(deployment.home)) as inst:
            yield inst


def check_results(instance, run_id: str) -> dict[str, bool]:
    """{check name: passed} of the run's asset check evaluations."""
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    return {r.dagster_event.event_specific_data.check_name: r.dagster_event.event_specific_data.passed for r in records}


#: The Postgres settings every deployment's dagster.yaml reads (trust auth on 127.0.0.1).
PG = {"DAGSTER_PG_USER": "postgres", "DAGSTER_PG_PASSWORD": "", "DAGSTER_PG_HOST": "127.0.0.1"}
#: Debian's Chromium, which the UI checks drive through Playwright (never a downloaded browser).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
