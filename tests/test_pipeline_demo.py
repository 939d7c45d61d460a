"""`make demo`'s program: the Dagster CLI runs each catalog dataset's lifecycle in one run (in-process
by default, multiprocess on request) on a project-style DAGSTER_HOME (telemetry off), and a trainer opens both approvals and reads batches;
with planted evaluation items, demo_curriculum is approved with them excluded (the trainer never
sees them) or, with exclusions switched off, blocked."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dagster")

from trainvault.approval import write_keypair  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


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
    for name in ("TRAINVAULT_DEMO_PLANT", "TRAINVAULT_DEMO_GENERATOR", "TRAINVAULT_DATASETS", "TRAINVAULT_DEMO_EVAL_SHARDS",
                 "TRAINVAULT_DEMO_EXCLUSIONS", "TRAINVAULT_DEMO_EXECUTOR", "TRAINVAULT_EXECUTOR"):
        env.pop(name, None)
    return {**env, **settings}


def run_demo(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-m", "pipelines.examples.demo"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=400)
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
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"
    for part in (curriculum, notes):
        assert "/croissant-" in part and "trainvault trace " in part and "--allow-exclusions" not in part


def test_planted_items_are_excluded_and_the_trace_command_it_prints_names_the_first_batch(tmp_path) -> None:
    # 5 planted records of 505: within demo_curriculum's max_excluded_fraction of 1/100.
    text = run_demo(demo_env(tmp_path, TRAINVAULT_DEMO_PLANT="1", TRAINVAULT_DEMO_RECORDS="100"))
    curriculum, notes = text.split("== demo_text ")
    assert "contamination_exclusions success  5 records to exclude" in curriculum
    assert "check within_contract PASSED" in curriculum and "check approval_opens PASSED" in curriculum
    assert "excluded from the approval: 5 records" in curriculum
    for item in ("HumanEval/0", "HumanEval/7", "HumanEval/42", "wordprob/3", "wordprob/11"):
        assert f" {item}" in curriculum.split("excluded from the approval:")[1]
    assert "the trainer's batches: 300 records of train, 0 planted (as expected: no excluded record reaches the trainer)" \
        in curriculum
    assert "max_excluded_fraction=(1, 100)" in curriculum
    assert "check approval_opens PASSED" in notes and "contamination_exclusions" not in notes

    # The printed trace command, run as printed: step 0 of the approved loader over the curriculum.
    (command,) = [line.strip() for line in curriculum.splitlines() if line.strip().startswith("trainvault trace ")]
    assert "--allow-exclusions --max-excluded 1/100" in command and "--scanner-key" in command
    out = subprocess.run([sys.executable, "-m", "trainvault.cli", *shlex.split(command)[1:]], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "step 0 rank 0 epoch 0: 8 records"
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[:4] for r in rows] == [["train", "easy/0", str(i), f'"train-easy-0-{i:05d}"'] for i in range(8)]
    assert json.loads(rows[0][4])["id"] == "train-easy-0-00000"


def test_with_exclusions_off_planted_items_block_the_approval(tmp_path) -> None:
    text = run_demo(demo_env(tmp_path, TRAINVAULT_DEMO_PLANT="1", TRAINVAULT_DEMO_EXCLUSIONS="0",
                             TRAINVAULT_DEMO_RECORDS="40"))
    curriculum, notes = text.split("== demo_text ")
    assert "check within_contract FAILED" in curriculum and "approved_dataset was not executed" in curriculum
    assert "approval records for demo_curriculum: 0" in curriculum
    assert "as expected: contaminated data is never approved" in curriculum
    assert "check approval_opens PASSED" in notes
