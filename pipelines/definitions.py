"""The code location loaded by workspace.yaml: assets, checks, the lifecycle job, the rebuild schedule.

`defs` serves the example dataset spec (pipelines/examples/spec.py, configured through
the environment); `build_definitions(spec, store)` builds the same code location for any
other spec, which is what tests and other deployments use.
"""

from __future__ import annotations

import os
import warnings

import dagster as dg

# backfill_policy is Beta in 1.13; it is what lets one run (and the CLI) cover a range of shards.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

from assets.approval import approval_opens, approved_dataset  # noqa: E402
from assets.contamination import contamination_report, within_contract  # noqa: E402
from assets.evaluation import evaluation_release  # noqa: E402
from assets.manifest import data_manifest  # noqa: E402
from assets.pins import producer_pins  # noqa: E402
from assets.profile import dataset_profile  # noqa: E402
from assets.scan import training_scan  # noqa: E402
from assets.shards import build_dataset_shards  # noqa: E402
from pipelines.examples.spec import example_spec  # noqa: E402
from resources.dataset import DatasetSpec  # noqa: E402
from resources.storage import ObjectStore, object_store_from_env  # noqa: E402

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def whole_build_tags(spec: DatasetSpec) -> dict[str, str]:
    """Run tags that cover every shard partition: one run builds the whole lifecycle."""
    keys = spec.partition_keys()
    return {RANGE_START: keys[0], RANGE_END: keys[-1]}


def executor_for(name: str | None) -> dg.ExecutorDefinition | None:
    """The executor named by TRAINVAULT_EXECUTOR: unset or ``multiprocess`` for Dagster's default
    (a process per step, or in_process by run config); ``k8s`` for a pod per step; ``celery``
    for a Celery worker pool (broker in TRAINVAULT_CELERY_BROKER)."""
    if name in (None, "", "multiprocess", "default"):
        return None
    if name == "in_process":
        return dg.in_process_executor
    if name == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor.configured({"max_concurrent": 16})
    if name == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured({"broker": {"env": "TRAINVAULT_CELERY_BROKER"}} if os.environ.get("TRAINVAULT_CELERY_BROKER") else {})
    raise ValueError(f"TRAINVAULT_EXECUTOR={name!r}: expected multiprocess, in_process, k8s or celery")


def build_definitions(spec: DatasetSpec, store: ObjectStore | None = None, executor: str | None = None) -> dg.Definitions:
    dataset_shards = build_dataset_shards(spec.partition_keys())
    lifecycle = dg.define_asset_job(
        "lifecycle",
        selection=dg.AssetSelection.all(),
        description="Every stage: pins, shards, manifest, scan, evaluation release, contamination report, approval.",
        tags={"trainvault/dataset": spec.name},
    )

    @dg.schedule(
        job=lifecycle,
        cron_schedule="0 3 * * *",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Nightly rebuild of the whole lifecycle; unchanged inputs reuse every shard (switch on in the UI).",
    )
    def nightly_rebuild(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        return dg.RunRequest(run_key=None, tags=whole_build_tags(spec))

    return dg.Definitions(
        assets=[
            producer_pins,
            dataset_shards,
            data_manifest,
            training_scan,
            evaluation_release,
            contamination_report,
            dataset_profile,
            approved_dataset,
        ],
        asset_checks=[within_contract, approval_opens],
        jobs=[lifecycle],
        schedules=[nightly_rebuild],
        resources={"store": store or object_store_from_env(), "dataset": spec},
        # Default executor: multiprocess (one process per step; shard partitions of one run
        # derive `shard_threads` at a time inside their step; run config can pick in_process).
        # At scale TRAINVAULT_EXECUTOR=k8s or celery (see pipelines/deploy/).
        executor=executor_for(executor),
    )


defs = build_definitions(example_spec(), executor=os.environ.get("TRAINVAULT_EXECUTOR"))
