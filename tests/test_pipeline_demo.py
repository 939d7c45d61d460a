"""`make demo`'s program: the Dagster CLI materialises the lifecycle in one multiprocess run on a
project-style DAGSTER_HOME (telemetry off), and a trainer opens the approval and reads batches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dagster")

from trainvault.approval import write_keypair  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_the_lifecycle_with_the_cli_and_a_trainer_reads_the_approved_data(tmp_path) -> None:
    _, public, _ = write_keypair(tmp_path / "approver")
    home = tmp_path / "dagster_home"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "TRAINVAULT_DEMO_ROOT": str(tmp_path / "store"),
        "TRAINVAULT_DEMO_SHARDS": "1",
        "TRAINVAULT_DEMO_RECORDS": "40",
        "TRAINVAULT_SIGNING_KEY": str(tmp_path / "approver.key"),
        "TRAINVAULT_TRUSTED_KEY": str(public),
    }
    env.pop("TRAINVAULT_DEMO_PLANT", None)
    out = subprocess.run([sys.executable, "-m", "pipelines.examples.demo"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "dataset_shards         success  5 partitions: 5 written, 0 reused unchanged" in text
    assert "check within_contract PASSED" in text and "check approval_opens PASSED" in text
    assert ": SUCCESS in " in text
    assert "train   easy          1       40" in text
    assert "curricula: easy (1 shards), easy-to-hard (3 shards), hard (1 shards), medium (1 shards)" in text
    assert "humaneval              164            0" in text
    assert "TrainVault().open_approved(" in text and "trusted_keys=[load_verifying_key(" in text
    assert "batch 3: 8 records, train-easy-0-00016" in text
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"
    assert "telemetry" not in out.stderr.lower()
