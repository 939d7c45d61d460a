"""`make demo`'s program: the Dagster CLI runs each catalog dataset's lifecycle in one multiprocess run
on a project-style DAGSTER_HOME (telemetry off), and a trainer opens both approvals and reads batches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dagster")

from trainvault.approval import write_keypair  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_both_datasets_with_the_cli_and_a_trainer_reads_both_approvals(tmp_path) -> None:
    _, public, _ = write_keypair(tmp_path / "approver")
    home = tmp_path / "dagster_home"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "TRAINVAULT_DEMO_ROOT": str(tmp_path / "store"),
        "TRAINVAULT_DEMO_SHARDS": "1",
        "TRAINVAULT_DEMO_RECORDS": "40",
        "TRAINVAULT_SIGNING_KEY_PATH": str(tmp_path / "approver.key"),
        "TRAINVAULT_TRUSTED_KEY": str(public),
    }
    for name in ("TRAINVAULT_DEMO_PLANT", "TRAINVAULT_DEMO_GENERATOR", "TRAINVAULT_DATASETS", "TRAINVAULT_DEMO_EVAL_SHARDS"):
        env.pop(name, None)
    out = subprocess.run([sys.executable, "-m", "pipelines.examples.demo"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
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
    assert "telemetry" not in out.stderr.lower()
