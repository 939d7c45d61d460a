"""`make demo`'s progress lines: which dataset's run is at which step, read from the Dagster instance
the runs write to (the runs are other processes; their event logs are the one shared record)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import dagster as dg
from dagster import RunsFilter

#: A line at least this often while nothing changes, so a long step never looks like a hang.
HEARTBEAT_S = 10.0
STEP_EVENTS = {
    dg.DagsterEventType.STEP_START,
    dg.DagsterEventType.STEP_SUCCESS,
    dg.DagsterEventType.STEP_FAILURE,
    dg.DagsterEventType.STEP_SKIPPED,
}


@dataclass
class RunProgress:
    """One dataset's lifecycle run as its event log shows it so far."""

    job: str
    run_id: str | None = None
    total: int | None = None
    cursor: str | None = None
    running: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)

    def poll(self, instance: dg.DagsterInstance, since: float) -> bool:
        """Read the events written since the last poll; whether anything changed."""
        changed = False
        run_id = self.run_id
        if run_id is None:
            run_id = self._find_run(instance, since)
            if run_id is None:
                return False
            changed = True
        while True:
            result = instance.get_records_for_run(run_id, cursor=self.cursor, of_type=STEP_EVENTS, limit=200)
            for record in result.records:
                changed = True
                if (event := record.event_log_entry.dagster_event) is not None:
                    self._apply(event)
            self.cursor = result.cursor
            if not result.has_more:
                return changed

    def _find_run(self, instance: dg.DagsterInstance, since: float) -> str | None:
        """The id of the job's run created since `since` (None: none yet); its step count recorded."""
        runs = instance.get_runs(filters=RunsFilter(job_name=self.job), limit=1)
        if (
            not runs
            or (record := instance.get_run_record_by_id(runs[0].run_id)) is None
            or record.create_timestamp.timestamp() < since
        ):
            return None
        self.run_id = runs[0].run_id
        snapshot_id = runs[0].execution_plan_snapshot_id
        plan = instance.get_execution_plan_snapshot(snapshot_id) if snapshot_id else None
        self.total = len(plan.steps) if plan is not None else None
        return self.run_id

    def _apply(self, event: dg.DagsterEvent) -> None:
        if event.step_key is None:
            return  # a step event always names its step
        step = event.step_key.split("__", 1)[-1]
        if event.event_type == dg.DagsterEventType.STEP_START:
            self.running.append(step)
        else:
            if step in self.running:
                self.running.remove(step)
            self.finished.append(step)

    def line(self) -> str:
        if self.run_id is None:
            return "starting (loading the code location)"
        if self.running or len(self.finished) == self.total:
            now = f"; running {', '.join(self.running)}" if self.running else ""
        else:  # the multiprocess executor starts a process per step: seconds between steps
            now = (
                f"; {self.finished[-1]} done, starting the next step" if self.finished else "; starting the first step"
            )
        return f"{len(self.finished)}/{self.total or '?'} steps done{now}"


class DemoProgress:
    """Prints a line per dataset whenever its run moves on (a step starts or ends) and every
    `HEARTBEAT_S` otherwise, and one when a run's process exits."""

    def __init__(self, instance: dg.DagsterInstance, jobs: dict[str, str]) -> None:
        self.instance, self.start = instance, time.time()
        self.runs = {name: RunProgress(job) for name, job in jobs.items()}
        self.printed: dict[str, float] = {}
        self.exited: list[str] = []

    def poll(self) -> None:
        for name, run in self.runs.items():
            if name in self.exited:
                continue
            changed = run.poll(self.instance, self.start - 1)
            if changed or time.time() - self.printed.get(name, self.start) >= HEARTBEAT_S:
                self._print(name, run.line())

    def exited_run(self, name: str, rc: int) -> None:
        self.runs[name].poll(self.instance, self.start - 1)
        self.exited.append(name)
        outcome = "finished" if rc == 0 else f"exited {rc}"
        self._print(name, f"{outcome}: {self.runs[name].line()}")

    def _print(self, name: str, what: str) -> None:
        self.printed[name] = time.time()
        done = f"runs done {len(self.exited)}/{len(self.runs)}"
        print(f"  [{time.time() - self.start:6.1f} s] {name}: {what} ({done})", flush=True)
