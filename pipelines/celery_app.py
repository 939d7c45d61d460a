"""The Celery app of the deployment's workers (`dagster-celery worker start -A pipelines.celery_app`).

dagster-celery's own tasks, with one addition: a step task that the broker delivers a second
time (its worker died or lost the broker before acknowledging it: steps are acknowledged
only when done, pipelines/deploy/celery-worker.yaml) first writes an engine event into the
run's log naming the lost worker, so the step's second STEP_START has its reason beside it.
(Dagster's run monitoring watches run workers, not Celery's step workers, and the default run
launcher has no run-worker health check: only the worker that gets the step again can tell.)
"""

from __future__ import annotations

from typing import Any

from celery import Task
from dagster import DagsterEventType, DagsterInstance
from dagster._core.events import EngineEventData
from dagster._grpc.types import ExecuteStepArgs
from dagster._serdes import unpack_value
from dagster_celery.executor import CeleryExecutor
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task, create_task

#: The engine event metadata key dagster-celery gives the worker executing a step.
WORKER_KEY = "Celery worker"
LOST_KEY = "Lost Celery worker"


class ReportsRedelivery(Task):
    """A step task that says in the run's log when it is a redelivery."""

    def before_start(self, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (self.request.delivery_info or {}).get("redelivered"):
            # The executor sends its arguments by keyword (dagster_celery.executor._submit_task).
            packed = kwargs["execute_step_args_packed"] if "execute_step_args_packed" in kwargs else args[0]
            report_redelivery(unpack_value(packed, as_type=ExecuteStepArgs), self.request.hostname)


def report_redelivery(step_args: ExecuteStepArgs, hostname: str) -> None:
    """An engine event on the step: which worker was lost with it, and that it re-runs on `hostname`."""
    if step_args.instance_ref is None:
        return  # a step sent without its instance has no run log to report into
    instance = DagsterInstance.from_ref(step_args.instance_ref)
    run = instance.get_run_by_id(step_args.run_id)
    steps = list(step_args.step_keys_to_execute or [])
    # The workers that reported taking these steps before: the last one is the one lost.
    taken = [
        str(r.dagster_event.engine_event_data.metadata[WORKER_KEY].value)
        for r in instance.all_logs(step_args.run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if r.dagster_event is not None
        and r.step_key in steps
        and WORKER_KEY in (r.dagster_event.engine_event_data.metadata or {})
    ]
    lost = taken[-1] if taken else "a Celery worker (before it reported the step)"
    instance.report_engine_event(
        f"Celery worker lost: {lost} did not finish step {', '.join(steps)} (the broker redelivered "
        f"its unacknowledged task); the step runs again on {hostname}",
        run,
        EngineEventData({LOST_KEY: lost, "step_keys": ", ".join(steps), "Redelivered to": hostname}),
        CeleryExecutor,
        step_key=steps[0] if len(steps) == 1 else None,
    )


app = make_app()
execute_plan = create_task(app, base=ReportsRedelivery)
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
