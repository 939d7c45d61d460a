"""`make demo`'s program: each catalog dataset's lifecycle in one run launched through the code location (in-process
by default, multiprocess on request) on a project-style DAGSTER_HOME (telemetry off), and a trainer opens both approvals and reads batches;
with planted evaluation items, demo_curriculum is approved with them excluded (the trainer never
sees them) or, with exclusions switched off, blocked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dagster")

import dagster as dg

from trainvault.approval import write_keypair

ROOT = Path(__file__).resolve().parents[2]


def demo_env(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The demo's environment on a fresh store, instance and key pairs under `tmp_path`."""
    write_keypair(tmp_path / "approver")
    write_keypair(tmp_path / "scanner")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "TRAINVAULT_DEMO_ROOT": str(tmp_path / "store"),
        "TRAINVAULT_DEMO_SHARDS": "1",
        "TRAINVAULT_SIGNING_KEY_PATH": str(tmp_path / "approver.key"),
        "TRAINVAULT_TRUSTED_KEY": str(tmp_path / "approver.pub"),
        "TRAINVAULT_SCANNER_KEY_PATH": str(tmp_path / "scanner.key"),
        "TRAINVAULT_TRUSTED_SCANNER_KEY": str(tmp_path / "scanner.pub"),
    }
    for name in (
        "TRAINVAULT_DEMO_PLANT",
        "TRAINVAULT_DEMO_GENERATOR",
        "TRAINVAULT_DATASETS",
        "TRAINVAULT_DEMO_EVAL_SHARDS",
        "TRAINVAULT_DEMO_EXCLUSIONS",
        "TRAINVAULT_DEMO_EXECUTOR",
        "TRAINVAULT_EXECUTOR",
    ):
        env.pop(name, None)
    return {**env, **settings}


def run_demo(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.examples.demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "telemetry" not in out.stderr.lower()
    return out.stdout


def test_demo_runs_both_datasets_with_the_cli_and_a_trainer_reads_both_approvals(tmp_path) -> None:
    home = tmp_path / "dagster_home"
    text = run_demo(demo_env(tmp_path, TRAINVAULT_DEMO_RECORDS="40", TRAINVAULT_DEMO_EXECUTOR="multiprocess"))
    curriculum, notes = text.split("== demo_text ")
    assert "== demo_curriculum v-" in curriculum
    assert "dataset_shards         success  5 partitions: 5 written, 0 reused unchanged" in curriculum
    assert "dataset_shards         success  2 partitions: 2 written, 0 reused unchanged" in notes
    for part in (curriculum, notes):
        assert "check within_contract PASSED" in part and "check approval_opens PASSED" in part
        assert ": SUCCESS in " in part
        assert "TrainVault().open_approved(" in part and "trusted_keys=[load_verifying_key(" in part
    assert "train   easy          1       40" in curriculum
    assert "curricula: easy (1 shards), easy-to-hard (3 shards), hard (1 shards), medium (1 shards)" in curriculum
    assert "humaneval              164            0" in curriculum
    assert "batch 2: 8 records, train-easy-0-00008" in curriculum
    assert "format     jsonl.gz" in notes and "train   _             1       40" in notes
    assert "batch 2: 8 records, train-0-00008" in notes
    assert "/store/demo_text/v-" in notes and "/approvals/approval-" in notes
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"
    make = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", f"DAGSTER_HOME_DIR={tmp_path / 'make_home'}", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "printf 'telemetry:\\n  enabled: false\\nnux:\\n  enabled: false\\n'" in make  # the Makefile's is the same
    with dg.DagsterInstance.from_config(str(home)) as instance:  # the UI's "Join the Dagster community" modal: off
        assert not instance.nux_enabled and not instance.telemetry_enabled
    for part in (curriculum, notes):
        assert "/croissant-" in part and "trainvault trace " in part and "--allow-exclusions" not in part
    assert_runs_carry_the_code_location(home)


#: What the UI asks of a run to place it on the Overview timeline and a job's sparkline: the code location
#: and repository it was launched from (a run without them is listed under none).
RUNS_QUERY = """
query DemoRuns($job: String!) {
  runsOrError(filter: {pipelineName: $job}) {
    ... on Runs { results { runId status repositoryOrigin { repositoryLocationName repositoryName } } }
  }
}
"""


def assert_runs_carry_the_code_location(home: Path) -> None:
    """Each demo run was launched through the code location workspace.yaml loads, as the UI launches runs."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster_graphql.test.utils import execute_dagster_graphql

    with dg.DagsterInstance.from_config(str(home)) as instance:
        for name in ("demo_curriculum", "demo_text"):
            (run,) = instance.get_runs(filters=dg.RunsFilter(job_name=f"lifecycle_{name}"))
            origin = run.remote_job_origin
            assert origin is not None and origin.location_name == "trainvault", run.run_id
            assert origin.repository_origin.repository_name == "__repository__"
            # The UI filters a location's runs by this hidden tag, which run storage derives from the origin.
            located = instance.get_runs(
                filters=dg.RunsFilter(tags={".dagster/repository": "__repository__@trainvault"})
            )
            assert run.run_id in {r.run_id for r in located}
        target = WorkspaceFileTarget(paths=[str(ROOT / "workspace.yaml")])
        with WorkspaceProcessContext(instance, target, code_server_log_level="WARNING") as process:
            result = execute_dagster_graphql(
                process.create_request_context(), RUNS_QUERY, variables={"job": "lifecycle_demo_text"}
            )
    ((shown),) = result.data["runsOrError"]["results"]
    assert shown["status"] == "SUCCESS"
    assert shown["repositoryOrigin"] == {"repositoryLocationName": "trainvault", "repositoryName": "__repository__"}


def test_planted_items_are_excluded_and_the_trace_command_it_prints_names_the_first_batch(tmp_path) -> None:
    # 5 planted records of 505: within demo_curriculum's max_excluded_fraction of 1/100.
    text = run_demo(demo_env(tmp_path, TRAINVAULT_DEMO_PLANT="1", TRAINVAULT_DEMO_RECORDS="100"))
    curriculum, notes = text.split("== demo_text ")
    assert "contamination_exclusions success  5 records to exclude" in curriculum
    assert "check within_contract PASSED" in curriculum and "check approval_opens PASSED" in curriculum
    assert "excluded from the approval: 5 records" in curriculum
    for item in ("HumanEval/0", "HumanEval/7", "HumanEval/42", "wordprob/3", "wordprob/11"):
        assert f" {item}" in curriculum.split("excluded from the approval:")[1]
    assert (
        "the trainer's batches: 300 records of train, 0 planted (as expected: no excluded record reaches the trainer)"
        in curriculum
    )
    assert "max_excluded_fraction=(1, 100)" in curriculum
    assert "check within_contract PASSED: within contract after exclusions: " in curriculum
    assert "every hit excluded" in curriculum
    assert "excluded: the approval leaves out the 5 records that hold them" in curriculum
    # Progress while the runs go: which dataset, which step, runs done; then what to do next.
    progress = [line for line in text.splitlines() if line.startswith("  [") and " s] " in line]
    assert any("demo_curriculum: " in line and "steps done; running " in line for line in progress)
    assert progress[-1].endswith("(runs done 2/2)")
    for dataset in ("demo_curriculum", "demo_text"):  # each run ends with every one of its steps done
        assert any(re.search(rf"\] {dataset}: finished: (\d+)/\1 steps done \(", line) for line in progress), dataset
    assert "\nnext:\n  make ui " in text
    assert "check approval_opens PASSED" in notes and "contamination_exclusions" not in notes

    # The printed trace command, run as printed (the venv's own `trainvault`, by its path from the
    # demo's folder): step 0 of the approved loader over the curriculum. It is printed again under "next:".
    venv_trainvault = str(Path(sys.executable).with_name("trainvault").absolute().relative_to(ROOT))
    (command,) = {line.strip() for line in curriculum.splitlines() if " trace " in line and "--sha256" in line}
    assert command.startswith(venv_trainvault + " trace ")
    assert f"\n  {command}\n" in text.split("\nnext:\n  make ui ")[1]
    assert "--allow-exclusions --max-excluded 1/100" in command and "--scanner-key" in command
    out = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "step 0 rank 0 epoch 0: 8 records"
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[:4] for r in rows] == [["train", "easy/0", str(i), f'"train-easy-0-{i:05d}"'] for i in range(8)]
    assert json.loads(rows[0][4])["id"] == "train-easy-0-00000"


def test_with_exclusions_off_planted_items_block_the_approval(tmp_path) -> None:
    text = run_demo(
        demo_env(tmp_path, TRAINVAULT_DEMO_PLANT="1", TRAINVAULT_DEMO_EXCLUSIONS="0", TRAINVAULT_DEMO_RECORDS="40")
    )
    curriculum, notes = text.split("== demo_text ")
    assert "check within_contract FAILED" in curriculum and "approved_dataset was not executed" in curriculum
    assert "approval records written by this run for demo_curriculum: 0 (0 from earlier runs)" in curriculum
    assert "the policy of demo_curriculum forbids exclusions (allow_exclusions: false)" in curriculum
    assert "as expected: contaminated data is never approved" in curriculum
    assert "check approval_opens PASSED" in notes


def test_blocked_after_the_planted_demo_counts_only_its_own_run(tmp_path, monkeypatch) -> None:
    # README's order: the planted demo (approved with exclusions), then the same with exclusions off, in the
    # same store: the second run's version folder already holds the first run's approval.
    env = demo_env(
        tmp_path, TRAINVAULT_DEMO_PLANT="1", TRAINVAULT_DEMO_RECORDS="100", TRAINVAULT_DEMO_EXECUTOR="in_process"
    )
    first = run_demo(env).split("== demo_text ")[0]
    assert "HumanEval" in first and "excluded: the approval leaves out the 5 records that hold them" in first
    text = run_demo({**env, "TRAINVAULT_DEMO_EXCLUSIONS": "0"})
    curriculum, notes = text.split("== demo_text ")
    assert "check within_contract FAILED" in curriculum and "approved_dataset was not executed" in curriculum
    assert "the policy of demo_curriculum forbids exclusions (allow_exclusions: false)" in curriculum
    assert "approval records written by this run for demo_curriculum: 0 (1 from earlier runs)" in curriculum
    assert "as expected: contaminated data is never approved" in curriculum
    assert "check approval_opens PASSED" in notes

    # What the UI reads, from the demo's own instance: the current approval is the planted run's, made
    # under that run's policy (the blocked run's check says so), and its row count is what the trainer gets.
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    instance = dg.DagsterInstance.get()
    approval = instance.get_latest_materialization_event(dg.AssetKey(["demo_curriculum", "approved_dataset"]))
    meta = {k: v.value for k, v in approval.asset_materialization.metadata.items()}
    assert (meta["dagster/row_count"], meta["excluded records"], meta["records in the shards"]) == (500, 5, 505)
    blocked_run = instance.get_runs(filters=dg.RunsFilter(job_name="lifecycle_demo_curriculum"), limit=1)[0]
    assert blocked_run.run_id != approval.run_id
    (check,) = [
        r.event_log_entry.dagster_event.event_specific_data
        for r in instance.get_records_for_run(
            blocked_run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
        ).records
        if r.event_log_entry.dagster_event.event_specific_data.check_name == "within_contract"
    ]
    assert not check.passed and "an approval it shows is an earlier run's" in check.description
    assert "the policy of demo_curriculum forbids exclusions" in check.description
    assert meta["approval policy"]["allow_exclusions"] is True  # the earlier run's policy, not today's
    # approved_dataset's own events: the blocked run's observation names the approval that stays current.
    (seen,) = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(["demo_curriculum", "approved_dataset"])), limit=10
    ).records
    said = {k: v.value for k, v in seen.asset_observation.metadata.items()}
    assert seen.run_id == blocked_run.run_id and said["approval status"].startswith(f"blocked in run {seen.run_id}")
    assert (said["current approval sha256"], said["current approval run"]) == (meta["sha256"], approval.run_id)
