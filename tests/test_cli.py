"""The trainvault command: inspect, keygen, approve, verify; one clear line and exit 1 on failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from approval_chain import build_chain

from trainvault import TrainVault
from trainvault.cli import main


@pytest.fixture
def chain(tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path / "data"), shards=2, records_per_shard=10)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect(chain: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", chain.manifest_uri)
    assert code == 0
    assert "split train: 2 shards, 20 records" in out and "stage easy: 1 shards" in out and "(no stage)" in out
    code, out, _ = run(capsys, "inspect", "--json", chain.manifest_uri)
    assert json.loads(out)["splits"]["valid"]["records"] == 5


def test_keygen_approve_verify(chain: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = str(tmp_path / "approver")
    code, out, _ = run(capsys, "keygen", "--out", prefix)
    assert code == 0 and "keyid" in out
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approval = str(tmp_path / "approval.json")
    code, out, err = run(capsys, "approve", str(request), "--key", prefix + ".key", "--out", approval,
                         "--provenance", "dagster_run_id=r1")
    assert code == 0, err
    sha = out.split("sha256")[1].split()[0]
    code, out, err = run(capsys, "verify", approval, "--sha256", sha, "--key", prefix + ".pub")
    assert code == 0, err
    assert out.startswith("verified ") and "2 shards" not in out and "3 shards, 25 records" in out

    # Failure: one line on stderr, exit 1.
    run(capsys, "keygen", "--out", str(tmp_path / "other"))
    code, out, err = run(capsys, "verify", approval, "--sha256", sha, "--key", str(tmp_path / "other.pub"))
    assert code == 1 and out == ""
    assert err.startswith("trainvault: error: ") and err.count("\n") == 1 and "trusted keys signed it" in err
    code, _, err = run(capsys, "verify", approval, "--sha256", "0" * 64, "--key", prefix + ".pub")
    assert code == 1 and "not the pinned" in err
    code, _, err = run(capsys, "inspect", str(tmp_path / "missing.json"))
    assert code == 1 and "does not exist" in err


def test_console_script_runs(chain: Any) -> None:
    proc = subprocess.run([sys.executable, "-m", "trainvault.cli", "inspect", chain.manifest_uri],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "split train" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "trainvault.cli", "verify", "nowhere.json", "--sha256", "x",
                           "--key", "nokey.pub"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1


def test_progress_bar_on_a_terminal(chain: Any) -> None:
    import io

    from trainvault.approval import terminal_hash_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    bar = terminal_hash_progress("hashing", out)
    assert bar is not None and terminal_hash_progress("hashing", io.StringIO()) is None
    chain.vault.approve_dataset(chain.request(), progress=bar)
    assert "hashing [" in out.getvalue() and "100.0%" in out.getvalue() and out.getvalue().endswith("\n")
