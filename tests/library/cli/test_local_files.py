"""Every local file trainvault reads for a person (keys, a saved state, an exclude mapping) goes through
one bounded, regular-file-only read: a FIFO, a link to /dev/zero or a file past its cap is refused at
once, by the command line in one line with exit 1, by Python with a typed error (issue 34 item 4).

Each call runs in its own process under a deadline and a memory cap, so a regression fails instead
of hanging on a FIFO or reading /dev/zero until the machine runs out of memory."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import TrainVault
from trainvault.approval import write_approval, write_keypair

ROOT = Path(__file__).resolve().parents[3]
DEADLINE_S = 60
MEMORY_CAP = 2 * 1024**3


def fifo(path: Path) -> None:
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def oversized(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: costs no disk, past every cap


BAD: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (fifo, "is a FIFO, not a regular file"),
    "dev-zero": (dev_zero, "is a character device, not a regular file"),
    "oversized": (oversized, "1,073,741,824 bytes, more than the"),
}


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_cap_memory,
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{argv} hung: no answer within {DEADLINE_S} s")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture(scope="module")
def files(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A signed approval, its request, the approver's keys and a loader state of the chain."""
    root = tmp_path_factory.mktemp("local-files")
    chain = build_chain(TrainVault(), str(root / "data"), shards=2, records_per_shard=10)
    approved = chain.vault.approve_dataset(chain.request())
    private, public, key = write_keypair(root / "approver")
    record = write_approval(chain.vault, str(root / "approval.json"), approved, signing_keys=key)
    (root / "request.json").write_bytes(chain.request().to_json_bytes())
    loader = approved.loader_factory(collate_fn=list).load("train")
    next(iter(loader))
    (root / "state.json").write_text(json.dumps(loader.state_dict()))
    return {
        "record": record.uri,
        "sha256": record.sha256,
        "public": str(public),
        "private": str(private),
        "request": str(root / "request.json"),
        "state": str(root / "state.json"),
        "out": str(root / "never-written.json"),
    }


COMMANDS: dict[str, Callable[[dict[str, str], str], list[str]]] = {
    "trace --state": lambda f, bad: ["trace", "--state", bad, "--step", "0"],
    "trace --exclude": lambda f, bad: ["trace", "--state", f["state"], "--exclude", bad, "--step", "0"],
    "verify --trusted-key": lambda f, bad: ["verify", f["record"], "--sha256", f["sha256"], "--trusted-key", bad],
    "verify --scanner-key": lambda f, bad: [
        *["verify", f["record"], "--sha256", f["sha256"], "--trusted-key", f["public"], "--scanner-key", bad]
    ],
    "approve --signing-key": lambda f, bad: ["approve", f["request"], "--out", f["out"], "--signing-key", bad],
}


@pytest.mark.parametrize("kind", list(BAD))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_command_line_refuses_a_special_or_oversized_file_in_one_line(
    files: dict[str, str], tmp_path: Path, command: str, kind: str
) -> None:
    make, says = BAD[kind]
    bad = tmp_path / "given"
    make(bad)
    proc = run(["-m", "trainvault.cli", *COMMANDS[command](files, str(bad))])
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and str(bad) in proc.stderr and says in proc.stderr, proc.stderr
    assert not Path(files["out"]).exists()


PYTHON: dict[str, str] = {
    "open_approved(trusted_keys=[path])": (
        "from trainvault import TrainVault; TrainVault().open_approved({record!r}, {sha256!r}, trusted_keys=[{bad!r}])"
    ),
    "ApprovalPolicy(scanner_keys=[path])": (
        "from trainvault.approval import ApprovalPolicy; ApprovalPolicy(scanner_keys=[{bad!r}])"
    ),
}


@pytest.mark.parametrize("kind", list(BAD))
@pytest.mark.parametrize("call", list(PYTHON))
def test_python_key_loaders_refuse_a_special_or_oversized_file(
    files: dict[str, str], tmp_path: Path, call: str, kind: str
) -> None:
    make, says = BAD[kind]
    bad = tmp_path / "given"
    make(bad)
    code = PYTHON[call].format(bad=str(bad), **files)
    wrapped = (
        "import json\ntry:\n    " + code + "\nexcept Exception as exc:\n"
        "    print(json.dumps([type(exc).__name__, [c.__name__ for c in type(exc).__mro__], str(exc)]))\n"
        "else:\n    print(json.dumps(None))\n"
    )
    proc = run(["-c", wrapped])
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got is not None, f"{call} accepted {kind}"
    name, mro, message = got
    assert "TrainVaultError" in mro and name == "ApprovalError", got
    assert f"cannot read public key {bad}" in message and says in message
