"""The code location the launch-path and deployment tests serve: pipelines.definitions for the
example spec (configured by TRAINVAULT_DEMO_* as in a deployment), its nightly rebuild on the
cron in TRAINVAULT_TEST_CRON (the tests use every minute, switched on through the API), the
records from the generator in TRAINVAULT_TEST_GENERATOR when set."""

from __future__ import annotations

import os

import dagster as dg

from pipelines.definitions import build_definitions, whole_build_tags
from pipelines.examples.spec import example_spec


def _definitions() -> dg.Definitions:
    generator = os.environ.get("TRAINVAULT_TEST_GENERATOR")
    spec = example_spec(**({"generator": generator} if generator else {}))
    base = build_definitions(spec, executor=os.environ.get("TRAINVAULT_EXECUTOR"))
    (lifecycle,) = base.jobs

    @dg.schedule(name="nightly_rebuild", job=lifecycle, cron_schedule=os.environ.get("TRAINVAULT_TEST_CRON", "* * * * *"),
                 default_status=dg.DefaultScheduleStatus.STOPPED)
    def rebuild(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        return dg.RunRequest(run_key=None, tags=whole_build_tags(spec))

    return dg.Definitions(assets=base.assets, asset_checks=base.asset_checks, jobs=base.jobs, schedules=[rebuild],
                          resources=base.resources, executor=base.executor)


defs = _definitions()
