"""The dataset_profile asset and its blocking check, on a real publication and a real Dagster instance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

dg = pytest.importorskip("dagster")
pytest.importorskip("trainvault.approval")

from assets.manifest import build_data_manifest  # noqa: E402
from assets.pins import build_producer_pins  # noqa: E402
from assets.profile import CHECK, build_dataset_profile, profile_digest  # noqa: E402
from pipelines.examples.spec import example_spec  # noqa: E402
from resources.handoff import HandoffIOManager  # noqa: E402
from resources.storage import StorageResource  # noqa: E402
from trainvault.profile import read_metrics_sidecar  # noqa: E402
from trainvault.publication.saver import DatasetSaver  # noqa: E402
from trainvault.storage import Storage  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")


class ExampleTask(BaseModel):
    """The example curriculum dataset's rows."""

    model_config = ConfigDict(extra="forbid")
    id: str
    task_id: str
    text: str
    tokens: list[int]


class EasyOnlyTask(ExampleTask):
    """A schema the medium, hard, valid and test rows break (their task ids are not easy/...)."""

    task_id: str = Field(pattern=r"^easy/")


def text_words(row: dict[str, Any]) -> dict[str, Any]:
    return {"text_words": len(row["text"].split()), "split_of_id": row["id"].split("-")[0]}


def published(tmp_path: Path) -> tuple[Any, dg.DagsterInstance]:
    """The example spec's shards saved (the manifest asset commits them in each run), and an instance."""
    spec = example_spec(root=str(tmp_path / "store"), shards_per_stage=2, eval_shards=1, records=30, plant=False)
    layout = spec.layout()
    saver = DatasetSaver(Storage(), layout.manifest_uri, data_format=spec.data_format)
    for split, stage, shard_id in spec.shards():
        saver.save(
            split,
            stage,
            spec.records(split, stage, shard_id),
            shard_id=shard_id,
            curriculum_metadata=spec.metadata_of_stage(split, stage),
        )
    return spec, dg.DagsterInstance.ephemeral()


@dg.asset(key=["demo_curriculum", "after_profile"], deps=[dg.AssetKey(["demo_curriculum", "dataset_profile"])])
def after_profile() -> None:
    """Stands for `approved_dataset`: it must not run when the blocking check fails."""


def run(spec: Any, instance: dg.DagsterInstance, **config: Any) -> dg.ExecuteInProcessResult:
    """Pins, manifest and profile in one run: the profile takes the manifest's hand-off as its input."""
    store = StorageResource()
    return dg.materialize(
        [build_producer_pins(spec), build_data_manifest(spec), build_dataset_profile(spec), after_profile],
        instance=instance,
        resources={"store": store, "handoffs_demo_curriculum": HandoffIOManager(store=store, dataset=spec)},
        run_config={"ops": {"demo_curriculum__dataset_profile": {"config": config}}},
        raise_on_error=False,
    )


def profile_metadata(result: dg.ExecuteInProcessResult) -> dict:
    (ev,) = [e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == "dataset_profile"]
    return ev.materialization.metadata


def ran_after_profile(result: dg.ExecuteInProcessResult) -> bool:
    return any(e.asset_key.path[-1] == "after_profile" for e in result.get_asset_materialization_events())


def test_profile_asset_tables_sidecars_and_passing_check(tmp_path: Path) -> None:
    spec, instance = published(tmp_path)
    result = run(
        spec,
        instance,
        task_schema=f"{__name__}:ExampleTask",
        validation="error",
        extra_metrics=f"{__name__}:text_words",
    )
    assert result.success
    meta = profile_metadata(result)
    sidecars = meta["sidecars"].value
    assert set(sidecars) == {"train_metrics", "valid_metrics", "test_metrics"}
    assert meta["sha256"].value == profile_digest(sidecars)
    doc = read_metrics_sidecar(Storage(), sidecars["train_metrics"]["uri"], sidecars["train_metrics"]["sha256"])
    assert doc.metrics["number_of_examples"] == 3 * 2 * 30
    assert doc.metrics["number_of_tasks"] == 3 * 30  # task ids repeat across the shards of a stage
    counts = {r.data["split"]: r.data for r in meta["examples and tasks"].value.records}
    assert counts["train"]["examples"] == 180 and counts["valid"]["examples"] == 30
    metrics = {(r.data["split"], r.data["metric"]) for r in meta["metrics"].value.records}
    assert ("train", "json_dumped_number_of_words") in metrics and ("train", "extra.text_words") in metrics
    labels = {(r.data["split"], r.data["label"]): r.data["count"] for r in meta["labels"].value.records}
    assert labels[("train", "train")] == 180
    [check] = result.get_asset_check_evaluations()
    assert check.check_name == CHECK and check.passed
    assert ran_after_profile(result)

    # The sidecars join an approval request by digest.
    from trainvault.approval import ApprovalRequest

    ref = {"uri": sidecars["train_metrics"]["uri"], "sha256": "b" * 64}
    request = ApprovalRequest.model_validate(
        {
            **{
                k: ref
                for k in (
                    "data_manifest",
                    "training_scan_manifest",
                    "evaluation_release",
                    "contamination_report",
                    "verifier_contract",
                    "producer_pins",
                )
            },
            "sidecars": sidecars,
        }
    )
    assert request.bindings()["valid_metrics"].sha256 == sidecars["valid_metrics"]["sha256"]


def test_profile_check_blocks_in_error_mode_and_warns_in_warn_mode(tmp_path: Path) -> None:
    spec, instance = published(tmp_path)
    result = run(spec, instance, task_schema=f"{__name__}:EasyOnlyTask", validation="error")
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["offending rows"].value == 120 + 30 + 30  # medium, hard, valid, test
    assert not ran_after_profile(result)  # blocked
    meta = profile_metadata(result)
    assert len(meta["offending rows"].value.records) == 50

    # Same data, warn mode: the sidecars change (so overwrite is asked), the check only warns.
    conflict = run(spec, instance, task_schema=f"{__name__}:EasyOnlyTask", validation="warn")
    assert not conflict.success  # the error-mode sidecars differ in validation.mode
    warned = run(spec, instance, task_schema=f"{__name__}:EasyOnlyTask", validation="warn", overwrite=True)
    [check] = warned.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert ran_after_profile(warned)
