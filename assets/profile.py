"""dataset_profile and its blocking check `task_data_valid` (issue 8).

Under the default settings (no task schema, no extra-metrics hook) the step reads no
shard: it merges, per split in manifest order, the per-shard profiles the verification
pass (contamination_scan) stored by content. With a schema or hook it reads every shard of
the committed manifest (blocks verified), computes the metrics per shard on a thread pool,
merges them the same way and checks rows against the schema. Either way it writes
``<split>_metrics.json`` beside the manifest. The UI shows the metrics as tables; the
hand-off names the manifest profiled and the sidecars by (uri, sha256), so
`approved_dataset` binds them in the approval request.

Validation runs in the configured mode; offending rows are recorded in the sidecars
either way, and in ``error`` mode the blocking check fails, so nothing downstream in the
run (the approval) executes. The check re-reads the sidecars by digest rather than
trusting the step's memory.
"""

from collections.abc import Iterator
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from assets._common import BUILD, asset_args, ins, key, link, table
from assets.verified import shard_surveys
from resources.dataset import DatasetSpec, load_callable
from resources.handoff import Handoff
from resources.storage import StorageResource
from trainvault import ConflictError, IntegrityError, ObjectRef, ProfileError
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.profile import (
    DatasetProfile,
    MetricsSidecar,
    approval_sidecars,
    profile_publication,
    read_metrics_sidecar,
    write_metrics_sidecars,
)
from trainvault.storage import Storage
from trainvault.verification import profile_from_surveys

CHECK = "task_data_valid"
NUMERIC = ("json_dumped_number_of_words", "number_of_turns", "number_of_tools", "temperature")
SHOWN_OFFENDING = 50
SHOWN_LABELS = 20


class ProfileConfig(dg.Config):
    """How the profile is computed. The schema and hook are part of what the sidecars record."""

    task_schema: str | None = Field(default=None, description="the dataset's task-data schema: 'module:PydanticModel'")
    validation: Literal["off", "warn", "error", "auto"] = Field(
        default="auto", description="off | warn | error | auto (error when a schema is given, else off)"
    )
    extra_metrics: str | None = Field(default=None, description="'module:function(row) -> {name: value}' hook")
    overwrite: bool = Field(default=False, description="replace sidecars whose values differ (else the step fails)")
    workers: int = Field(default=8, description="shards read at once")


def profile_digest(sidecars: dict[str, dict[str, str]]) -> str:
    """One digest for the whole profile: of the sidecars' (uri, sha256) pairs, canonically."""
    return sha256_hex(canonical_json(sidecars))


def _num(value: Any) -> Any:
    return "" if value is None else value


def metrics_metadata(profile: DatasetProfile) -> dict[str, Any]:
    """Counts, numeric metrics, extra labels and offending rows as UI tables."""
    counts, numeric, labels = [], [], []
    for split, sp in profile.splits.items():
        m = sp.metrics.to_json()
        counts.append(
            {
                "split": split,
                "shards": len(sp.shards),
                "examples": m["number_of_examples"],
                "tasks": m["number_of_tasks"],
                "responses rows": m["number_of_responses_rows"],
                "offending rows": sp.offending_count,
            }
        )
        extra_numeric = {f"extra.{k}": v for k, v in m["extra"].items() if "mean" in v}
        for name, s in [*((k, m[k]) for k in NUMERIC), *extra_numeric.items()]:
            numeric.append(
                {
                    "split": split,
                    "metric": name,
                    "count": s["count"],
                    "mean": _num(s["mean"]),
                    "min": _num(s["min"]),
                    "max": _num(s["max"]),
                    "stddev": _num(s["stddev"]),
                }
            )
        for name, s in m["extra"].items():
            if "counts" not in s:
                continue
            top = sorted(s["counts"].items(), key=lambda kv: (-kv[1], kv[0]))[:SHOWN_LABELS]
            shown = sum(n for _, n in top)
            for label, n in top:
                labels.append({"split": split, "metric": name, "label": label, "count": n})
            if s["total_count"] > shown:
                labels.append({"split": split, "metric": name, "label": "(other)", "count": s["total_count"] - shown})
    offending = [
        {"split": o.split, "shard": o.shard_key, "record": o.record_index, "error": o.error}
        for o in profile.offending[:SHOWN_OFFENDING]
    ]
    return {
        "examples and tasks": table(
            counts,
            [
                ("split", "string"),
                ("shards", "int"),
                ("examples", "int"),
                ("tasks", "int"),
                ("responses rows", "int"),
                ("offending rows", "int"),
            ],
        ),
        "metrics": table(
            numeric,
            [
                ("split", "string"),
                ("metric", "string"),
                ("count", "int"),
                ("mean", "float"),
                ("min", "float"),
                ("max", "float"),
                ("stddev", "float"),
            ],
        ),
        "labels": table(labels, [("split", "string"), ("metric", "string"), ("label", "string"), ("count", "int")]),
        "offending rows": table(
            offending, [("split", "string"), ("shard", "string"), ("record", "int"), ("error", "string")]
        ),
    }


def check_result(sidecars: dict[str, MetricsSidecar]) -> dg.AssetCheckResult:
    """Schema validity from the sidecars as written: blocking (ERROR) in error mode, a WARN otherwise."""
    modes = {doc.validation.mode for doc in sidecars.values()}
    mode = modes.pop() if len(modes) == 1 else "mixed"
    bad = {split: doc.validation.offending_count for split, doc in sidecars.items() if doc.validation.offending_count}
    rows = [r for doc in sidecars.values() for r in doc.validation.offending_rows][:10]
    where = "; ".join(f"{r['split']}/{r['shard_key']} record {r['record_index']}: {r['error']}" for r in rows)
    if mode == "off":
        description = "task-data validation is off (no schema configured, or mode 'off')"
    elif not bad:
        description = f"every row matches the task-data schema (mode {mode})"
    else:
        description = f"{sum(bad.values())} row(s) do not match the task-data schema (mode {mode}): {where}"
    return dg.AssetCheckResult(
        check_name=CHECK,
        passed=not bad,
        severity=dg.AssetCheckSeverity.ERROR if mode == "error" else dg.AssetCheckSeverity.WARN,
        description=description,
        metadata={
            "mode": mode,
            "schema": next((d.validation.schema_ref for d in sidecars.values() if d.validation.schema_ref), "") or "",
            "offending rows": sum(bad.values()),
            "offending per split": dg.MetadataValue.json(bad),
        },
    )


DESCRIPTION = (
    "Per-split metrics of every shard and task-data schema validation, written as "
    "<split>_metrics.json sidecars beside the manifest; the approval binds them. Blocking check: task_data_valid."
)


def computed_profile(
    storage: Storage, spec: DatasetSpec, config: ProfileConfig, data_manifest: Handoff
) -> tuple[DatasetProfile, int]:
    """The profile and how many shards were read for it: under the default settings, merged from
    the surveys the verification pass stored (no shard read); under a schema or hook, every shard read."""
    if config.task_schema is None and config.extra_metrics is None and config.validation == "auto":
        surveys = shard_surveys(storage, spec, data_manifest)
        return profile_from_surveys(data_manifest.ref.uri, data_manifest.ref.sha256, surveys), 0
    profile = profile_publication(
        storage,
        data_manifest.ref.uri,
        manifest_sha256=data_manifest.ref.sha256,
        schema=config.task_schema,
        validation=config.validation,
        hook=load_callable(config.extra_metrics) if config.extra_metrics else None,
        workers=config.workers,
        raise_on_invalid=False,  # the blocking check decides, from the sidecars as written
    )
    return profile, sum(len(sp.shards) for sp in profile.splits.values())


def build_dataset_profile(spec: DatasetSpec) -> dg.AssetsDefinition:
    """The profile asset of `spec`: its hand-off names the manifest profiled, its sidecars beside it."""
    asset_key = key(spec, "dataset_profile")

    @dg.asset(
        **asset_args(spec, "dataset_profile", BUILD, DESCRIPTION, "python"),
        ins=ins(spec, "data_manifest"),
        deps=[key(spec, "contamination_scan")],
        check_specs=[
            dg.AssetCheckSpec(
                CHECK,
                asset=asset_key,
                blocking=True,
                description="rows match the dataset's task-data schema (blocking in error mode)",
            )
        ],
    )
    def dataset_profile(
        context: dg.AssetExecutionContext, config: ProfileConfig, store: StorageResource, data_manifest: Handoff
    ) -> Iterator[dg.Output[Handoff] | dg.AssetCheckResult]:
        vault = store.vault()
        layout = spec.layout_at(data_manifest.publication_version)
        try:
            profile, read = computed_profile(vault.storage, spec, config, data_manifest)
            refs = write_metrics_sidecars(vault.storage, profile, overwrite=config.overwrite)
        except (ConflictError, ProfileError, IntegrityError) as exc:
            raise dg.Failure(str(exc)) from exc
        sidecars = approval_sidecars(refs)
        digest = profile_digest(sidecars)
        yield dg.Output(
            Handoff.of(
                layout,
                "dataset_profile",
                data_manifest.ref.uri,
                data_manifest.ref.sha256,
                **{name: ObjectRef(uri=ref["uri"], sha256=ref["sha256"]) for name, ref in sidecars.items()},
            ),
            metadata={
                "version": layout.version,
                "data_manifest_sha256": profile.manifest_sha256,
                "sha256": digest,
                "sidecars": dg.MetadataValue.json(sidecars),
                **{f"{split}_metrics.json": link(ref.uri) for split, ref in refs.items()},
                "validation": profile.validator.mode,
                "schema": config.task_schema or "",
                "dagster/row_count": sum(sp.records for sp in profile.splits.values()),
                "shards read": read,
                **metrics_metadata(profile),
            },
            data_version=dg.DataVersion(digest),
        )
        yield check_result(
            {split: read_metrics_sidecar(vault.storage, ref.uri, ref.sha256) for split, ref in refs.items()}
        )

    return dataset_profile
