"""The code location loaded by workspace.yaml: every dataset of the catalog, its assets,
checks, job and schedule.

`defs` serves the datasets of the YAML catalog (pipelines/catalog.py says where the file
is); `build_definitions(specs, store)` builds the same code location for any list of
specs, which is what tests and other deployments use. Each dataset gets asset keys
prefixed by its name, its own shard partitions, the job ``lifecycle_<name>`` and the
schedule ``nightly_rebuild_<name>``.
"""

from __future__ import annotations

import os
import warnings

import dagster as dg

# backfill_policy is Beta in 1.13; it is what lets one run (and the CLI) cover a range of shards.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

from assets._common import handoff_io  # noqa: E402
from assets.approval import build_approved_dataset  # noqa: E402
from assets.contamination import (  # noqa: E402
    build_contamination_exclusions,
    build_contamination_report,
    build_contamination_scan,
)
from assets.contract_check import build_within_contract  # noqa: E402
from assets.evaluation import build_evaluation_release  # noqa: E402
from assets.manifest import build_data_manifest  # noqa: E402
from assets.pins import build_producer_pins  # noqa: E402
from assets.profile import build_dataset_profile  # noqa: E402
from assets.scan import build_training_scan  # noqa: E402
from assets.shards import build_dataset_shards  # noqa: E402
from pipelines.catalog import datasets_path, load_datasets  # noqa: E402
from resources.dataset import DatasetSpec  # noqa: E402
from resources.handoff import HandoffIOManager  # noqa: E402
from resources.storage import StorageResource, storage_from_env  # noqa: E402
from trainvault import ConfigurationError  # noqa: E402

__all__ = ["DEPLOYMENT_ENV", "build_definitions", "dataset_definitions", "defs", "load_datasets", "whole_build_tags"]

#: The environment every process of a deployment gets (daemon, webserver, code server, workers, the CLI).
#: A run over a range of shard partitions logs one "materialization planned" event per asset with the
#: range, not one per partition (Dagster's price: a failed run does not mark each of its partitions
#: failed; they show as missing and the next run derives them). A step's per-partition
#: materializations are stored 1,000 to a database write, not one write (and index update) each:
#: at 10,000 shards these per-event writes were most of Dagster's overhead.
DEPLOYMENT_ENV = {"DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "1", "DAGSTER_EVENT_BATCH_SIZE": "1000"}
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
EXECUTORS = ("multiprocess", "in_process", "k8s", "celery")


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

        return celery_executor.configured(
            {"broker": {"env": "TRAINVAULT_CELERY_BROKER"}} if os.environ.get("TRAINVAULT_CELERY_BROKER") else {}
        )
    raise ConfigurationError(f"TRAINVAULT_EXECUTOR={name!r}: expected one of {', '.join(EXECUTORS)}")


def dataset_definitions(spec: DatasetSpec) -> dg.Definitions:
    """One dataset's assets, checks, lifecycle job and rebuild schedule (resources come from the caller)."""
    report = build_contamination_report(spec)
    approval = build_approved_dataset(spec)
    profile = build_dataset_profile(spec)
    assets = [
        build_producer_pins(spec),
        build_dataset_shards(spec),
        build_data_manifest(spec),
        build_training_scan(spec),
        profile,
        build_evaluation_release(spec),
        build_contamination_scan(spec),
        report,
        approval,
    ]
    if spec.policy.allow_exclusions:
        assets.append(build_contamination_exclusions(spec))
    lifecycle = dg.define_asset_job(
        f"lifecycle_{spec.name}",
        selection=dg.AssetSelection.key_prefixes([spec.name]),
        description=(
            f"{spec.name}: every stage (pins, shards, manifest, profile, scan, evaluation release, contamination "
            "scan and report, exclusions where the policy allows them, approval and Croissant card). Launched "
            "without a partition selection it builds every shard."
        ),
        tags={"trainvault/dataset": spec.name},
    )

    @dg.schedule(
        name=f"nightly_rebuild_{spec.name}",
        job=lifecycle,
        cron_schedule=spec.schedule.cron,
        default_status=dg.DefaultScheduleStatus.RUNNING if spec.schedule.enabled else dg.DefaultScheduleStatus.STOPPED,
        description=f"Rebuild {spec.name}'s whole lifecycle in one run; unchanged inputs reuse every shard.",
    )
    def nightly_rebuild(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        return dg.RunRequest(run_key=None, tags=whole_build_tags(spec))

    return dg.Definitions(
        assets=assets,
        asset_checks=[build_within_contract(spec, report)],
        jobs=[lifecycle],
        schedules=[nightly_rebuild],
    )


def build_definitions(
    specs: list[DatasetSpec], store: StorageResource | None = None, executor: str | None = None
) -> dg.Definitions:
    """The code location for these datasets, on one object store (a single spec counts as a list of one)."""
    if isinstance(specs, DatasetSpec):
        specs = [specs]
    store = store or storage_from_env()
    resources: dict[str, object] = {"store": store}
    for spec in specs:
        resources[handoff_io(spec)] = HandoffIOManager(store=store, dataset=spec)
    merged = dg.Definitions.merge(*(dataset_definitions(spec) for spec in specs))
    return dg.Definitions(
        assets=merged.assets,
        asset_checks=merged.asset_checks,
        jobs=merged.jobs,
        schedules=merged.schedules,
        resources=resources,
        # Default executor: multiprocess (one process per step; shard partitions of one run
        # derive `shard_threads` at a time inside their step; run config can pick in_process).
        # At scale TRAINVAULT_EXECUTOR=k8s or celery (see pipelines/deploy/).
        executor=executor_for(executor),
    )


defs = build_definitions(load_datasets(datasets_path()), executor=os.environ.get("TRAINVAULT_EXECUTOR"))
