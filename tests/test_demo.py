"""`make demo`'s program runs and prints the manifest summary; a rerun reuses every shard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_demo(target: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.examples.demo", str(target)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_demo_prints_summary_and_is_idempotent(tmp_path) -> None:
    first = run_demo(tmp_path / "demo")
    assert "train   easy          4      800" in first
    assert "curricula: easy (4 shards), hard (4 shards), medium (4 shards)" in first
    files = sorted(p.stat().st_mtime_ns for p in (tmp_path / "demo").rglob("*") if p.is_file())
    assert run_demo(tmp_path / "demo") == first
    assert sorted(p.stat().st_mtime_ns for p in (tmp_path / "demo").rglob("*") if p.is_file()) == files
