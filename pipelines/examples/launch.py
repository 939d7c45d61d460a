"""Runs `make demo` launches as the UI launches them: created through the code location that
workspace.yaml loads, so each run carries that location's origin (the UI's Overview timeline
and Jobs pages list a run under the location and repository it names, and list a run without
one nowhere).

A run is created here from the location's job (its snapshot, execution plan and origin), then
executed by Dagster's own run worker (``dagster api execute_run``, what the instance's run
launcher starts) in a process whose output goes to the caller's log file. The demo has no
daemon, so the run skips the run queue: it starts at once, as ``dagster job execute`` did.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from dagster._core.remote_representation.code_location import CodeLocation
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import serialize_value

from trainvault import ConfigurationError

#: The code location workspace.yaml names (what the UI shows the runs under).
LOCATION = "trainvault"
#: The one repository of a `Definitions` code location.
REPOSITORY = "__repository__"


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`env` as this process's environment while the block runs: the code server it starts inherits it,
    so it loads the same catalog as the run workers (started with `env`) do."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def code_location(instance: dg.DagsterInstance, workspace: Path, name: str = LOCATION) -> Iterator[CodeLocation]:
    """The code location `name` of the workspace file, loaded as the UI loads it (its own code server)."""
    target = WorkspaceFileTarget(paths=[str(workspace)])
    # The code server's own lines (started, stopping) are not the demo's to print.
    with WorkspaceProcessContext(instance, target, code_server_log_level="WARNING") as process:
        request = process.create_request_context()
        if not request.has_code_location_name(name):
            names = ", ".join(request.code_location_names) or "none"
            raise ConfigurationError(f"{workspace}: no code location {name!r} (it loads: {names}); name it there")
        errors = request.get_code_location_error(name)
        if errors is not None:
            raise ConfigurationError(f"{workspace}: code location {name!r} failed to load: {errors.message}")
        yield request.get_code_location(name)


def create_run(
    instance: dg.DagsterInstance, location: CodeLocation, job_name: str, tags: dict[str, str]
) -> dg.DagsterRun:
    """A run of `job_name` created from the location's job, carrying its origin, not yet started."""
    repository = location.get_repository(REPOSITORY)
    if not repository.has_job(job_name):
        raise ConfigurationError(f"code location {location.name!r} has no job {job_name!r}: check the dataset catalog")
    job = repository.get_full_job(job_name)
    plan = location.get_execution_plan(job, {}, step_keys_to_execute=None, known_state=None, instance=instance)
    return instance.create_run(
        job_name=job_name,
        run_id=None,
        run_config={},
        resolved_op_selection=None,
        step_keys_to_execute=None,
        op_selection=None,
        status=None,
        root_run_id=None,
        parent_run_id=None,
        tags={**job.tags, **tags},
        job_snapshot=job.job_snapshot,
        execution_plan_snapshot=plan.execution_plan_snapshot,
        parent_job_snapshot=job.parent_job_snapshot,
        remote_job_origin=job.get_remote_origin(),
        job_code_origin=job.get_python_origin(),
        asset_selection=None,
        asset_check_selection=None,
        asset_graph=repository.asset_graph,
    )


def run_worker_command(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """Dagster's run worker for `run` under the code's own interpreter (exit status 1 when the run fails).

    By the interpreter's path, not the ``dagster`` entry point the origin names: that is on PATH only
    inside an activated environment."""
    origin = run.job_code_origin
    if origin is None:
        raise ConfigurationError(f"run {run.run_id} has no code origin: create it with create_run")
    args = ExecuteRunArgs(
        job_origin=origin, run_id=run.run_id, instance_ref=instance.get_ref(), set_exit_code_on_failure=True
    )
    return [origin.executable_path, "-m", "dagster", "api", "execute_run", serialize_value(args)]
