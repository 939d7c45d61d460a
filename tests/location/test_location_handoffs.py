"""Typed hand-offs between assets: two overlapping runs on one instance never cross, and the
hand-off IO manager refuses what it cannot vouch for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

dg = pytest.importorskip("dagster")

from pipelines.catalog import load_datasets  # noqa: E402
from pipelines.definitions import build_definitions, whole_build_tags  # noqa: E402
from resources.handoff import Handoff, HandoffIOManager  # noqa: E402
from resources.storage import StorageResource  # noqa: E402
from trainvault import TrainVault  # noqa: E402
from trainvault.approval import load_verifying_key, write_keypair  # noqa: E402
from trainvault.errors import ConfigurationError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")
ROOT = Path(__file__).resolve().parents[2]
BOUND = {
    "data_manifest": "data_manifest",
    "training_scan": "training_scan_manifest",
    "evaluation_release": "evaluation_release",
    "contamination_report": "contamination_report",
    "producer_pins": "producer_pins",
}


def write_catalog(path: Path, root: Path, keys: Path, records: int) -> Path:
    """One dataset named `notes`: the same name (so the same asset keys) in both catalogs, another version."""
    path.write_text(
        yaml.safe_dump(
            {
                "datasets": [
                    {
                        "name": "notes",
                        "root_uri": str(root),
                        "data_format": "jsonl.gz",
                        "stage_metadata": None,
                        "generator": "pipelines.examples.notes:generate_notes",
                        "records_per_shard": records,
                        "splits": [{"name": "train", "shards": 2}, {"name": "valid", "shards": 1}],
                        "evaluation_sources": ["pipelines.examples.benchmarks:synthetic_benchmark"],
                        "ngram_n": 8,
                        "signing_key_path": f"{keys}.key",
                        "trusted_keys_path": f"{keys}.pub",
                    }
                ]
            }
        )
    )
    return path


def run_metadata(instance, run_id: str) -> dict[str, dict]:
    """The unpartitioned materializations' metadata of one run, by asset name."""
    out = {}
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
        mat = record.event_log_entry.asset_materialization
        if mat.partition is None:
            out[mat.asset_key.path[-1]] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def test_two_overlapping_runs_of_two_versions_each_approve_only_their_own_inputs(tmp_path) -> None:
    """Two `dagster job execute` processes (multiprocess executor) on one instance, at once: the
    same asset keys, two versions; each approval binds its own run's manifest, scan, release,
    report and pins."""
    keys = tmp_path / "approver"
    write_keypair(keys)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dg.DagsterInstance.from_config(str(home)).dispose()  # the instance's databases exist before two runs open them
    root = tmp_path / "store"
    catalogs = [write_catalog(tmp_path / f"catalog-{n}.yaml", root, keys, n) for n in (30, 31)]
    specs = [load_datasets(c)[0] for c in catalogs]
    assert specs[0].layout().version != specs[1].layout().version
    procs = []
    for catalog, spec in zip(catalogs, specs, strict=False):
        env = {**os.environ, "DAGSTER_HOME": str(home), "TRAINVAULT_DATASETS": str(catalog), "PYTHONWARNINGS": "ignore"}
        env.pop("TRAINVAULT_EXECUTOR", None)
        cmd = [
            str(Path(sys.executable).with_name("dagster")),
            "job",
            "execute",
            "-m",
            "pipelines.definitions",
            "-j",
            "lifecycle_notes",
            "--tags",
            json.dumps({**whole_build_tags(spec), "catalog": catalog.name}),
        ]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=500)[0].decode(errors="replace"))
    finally:
        for proc in procs:
            proc.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)

    os.environ["DAGSTER_HOME"] = str(home)
    try:
        instance = dg.DagsterInstance.get()
        runs = {r.tags["catalog"]: r for r in instance.get_runs(filters=dg.RunsFilter(job_name="lifecycle_notes"))}
        seen_manifests = set()
        for catalog, spec in zip(catalogs, specs, strict=False):
            run = runs[catalog.name]
            made = run_metadata(instance, run.run_id)
            approval = made["approved_dataset"]
            assert approval["version"] == spec.layout().version
            approved = TrainVault().open_approved(
                approval["uri"],
                approval["sha256"],
                trusted_keys=[load_verifying_key(f"{keys}.pub")],
                policy=spec.approval_policy(),
            )
            for asset, binding in BOUND.items():
                ref = approved.bindings[binding]
                assert (ref.uri, ref.sha256) == (made[asset]["uri"], made[asset]["sha256"]), (catalog.name, asset)
            assert f"/notes/{spec.layout().version}/" in approved.bindings["data_manifest"].uri
            assert approved.approval.provenance["dagster_run_id"] == run.run_id
            seen_manifests.add(approved.manifest_sha256)
        assert len(seen_manifests) == 2
    finally:
        del os.environ["DAGSTER_HOME"]


@pytest.fixture
def notes(tmp_path):
    keys = tmp_path / "approver"
    write_keypair(keys)
    (spec,) = load_datasets(write_catalog(tmp_path / "catalog.yaml", tmp_path / "store", keys, 12))
    return spec


def test_a_step_run_alone_reads_the_one_hand_off_of_its_version(notes) -> None:
    instance = dg.DagsterInstance.ephemeral()
    job = build_definitions([notes], StorageResource()).resolve_job_def("lifecycle_notes")
    first = job.execute_in_process(instance=instance, tags=whole_build_tags(notes))
    assert first.success
    alone = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(["notes", "approved_dataset"])])
    assert alone.success  # its inputs: the hand-offs in notes/<version>/handoffs/, one per asset


def test_a_step_run_alone_refuses_when_its_upstream_is_missing_or_ambiguous(notes, tmp_path) -> None:
    instance = dg.DagsterInstance.ephemeral()
    job = build_definitions([notes], StorageResource()).resolve_job_def("lifecycle_notes")
    missing = job.execute_in_process(
        instance=instance, raise_on_error=False, asset_selection=[dg.AssetKey(["notes", "training_scan"])]
    )
    assert not missing.success
    error = next(e for e in missing.all_events if e.is_step_failure).event_specific_data.error
    assert error.cause.cls_name == "ConfigurationError"
    assert "notes/data_manifest: no hand-off" in error.cause.message and "lifecycle_notes" in error.cause.message

    assert job.execute_in_process(instance=instance, tags=whole_build_tags(notes)).success
    handoffs = Path(notes.layout().base.removeprefix("file://")) / "handoffs"
    (manifest,) = handoffs.glob("data_manifest-*.json")
    (handoffs / "data_manifest-0000000000000000.json").write_bytes(manifest.read_bytes())
    ambiguous = job.execute_in_process(
        instance=instance, raise_on_error=False, asset_selection=[dg.AssetKey(["notes", "training_scan"])]
    )
    assert not ambiguous.success
    error = next(e for e in ambiguous.all_events if e.is_step_failure).event_specific_data.error
    assert "2 hand-offs" in error.cause.message


def test_the_io_manager_stores_only_hand_offs(notes) -> None:
    manager = HandoffIOManager(store=StorageResource(), dataset=notes)
    context = dg.build_output_context(asset_key=dg.AssetKey(["notes", "data_manifest"]))
    with pytest.raises(ConfigurationError, match=r"notes/data_manifest: returned dict.*stores only"):
        manager.handle_output(context, {"uri": "file:///x", "sha256": "0" * 64})
    # A hand-off is a strict document: a damaged one is refused when read.
    with pytest.raises(Exception, match=r"dagster-handoff"):
        Handoff.from_json_bytes(b'{"format": "something-else", "version": 1}', source="x")


def test_an_altered_shard_scan_result_fails_the_rerun_and_no_approval_follows(notes) -> None:
    """A shard's published scan result is create-only: altered bytes stop the next run at the scan."""
    instance = dg.DagsterInstance.ephemeral()
    job = build_definitions([notes], StorageResource()).resolve_job_def("lifecycle_notes")
    assert job.execute_in_process(instance=instance, tags=whole_build_tags(notes)).success
    base = Path(notes.layout().base.removeprefix("file://"))
    (result,) = base.glob("contamination/*/shards/train._.0.json")
    doc = json.loads(result.read_bytes())
    doc["items"] = []
    result.write_bytes(json.dumps(doc).encode())
    approvals = sorted((base / "approvals").iterdir())
    again = job.execute_in_process(instance=instance, tags=whole_build_tags(notes), raise_on_error=False)
    assert not again.success
    failed = [e.step_key for e in again.all_events if e.is_step_failure]
    assert failed == ["notes__contamination_scan"]
    assert "already exists with different content" in str(
        next(e for e in again.all_events if e.is_step_failure).event_specific_data.error
    )
    assert sorted((base / "approvals").iterdir()) == approvals
