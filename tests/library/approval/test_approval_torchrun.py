"""A distributed run through custody, end to end: torchrun, 2 gloo ranks x 2 DataLoader workers, over an
approved, shuffled split with exclusions; killed mid-epoch and resumed on another world size and batch size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from trainvault import TrainVault
from trainvault.approval import write_approval, write_keypair
from trainvault.approval.gate import approve_dataset
from trainvault.contamination import exclusions_from_report

ROOT = Path(__file__).resolve().parents[3]
TRAINER = ROOT / "tests" / "support" / "torchrun_trainer.py"
#: A run of a few processes on a loaded machine: generous, but a hang fails instead of blocking CI.
DEADLINE_S = 300


def torchrun(nproc: int, out: Path, run: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(TRAINER)]
    flags = [f"--{k}={v}" for k, v in run.items()]
    # The repository first, so the ranks import this checkout's trainvault (as the tests do).
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run(
        [*cmd, *flags, f"--out={out}", *args], env=env, capture_output=True, text=True, timeout=DEADLINE_S
    )


def ranks(out: Path, n: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.fixture(scope="module")
def approval(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Four train shards of 40 records in blocks of about 512 bytes; the last holds an evaluation item."""
    root = tmp_path_factory.mktemp("torchrun")
    chain = build_chain(
        TrainVault(), str(root / "data"), shards=4, records_per_shard=40, block_bytes=512, contaminate=True
    )
    ex = exclusions_from_report(chain.extra["report"], report_sha256=chain.refs["contamination_report"].sha256)
    from support.torchrun_trainer import POLICY

    approved = approve_dataset(chain.vault, chain.with_exclusions(ex), policy=POLICY)
    _, public, key = write_keypair(root / "approver")
    record = write_approval(chain.vault, str(root / "approval.json"), approved, signing_keys=key)
    excluded = {f"s3-{r.record_index}" for r in ex.records}
    everything = {r["id"] for k in ("s0", "s1", "s2", "s3") for r in chain.records[k]}
    return {"approval": record.uri, "sha256": record.sha256, "key": str(public)}, everything - excluded, excluded


def test_a_distributed_run_reads_every_approved_record_once_and_resumes_elastically(
    approval: Any, tmp_path: Path
) -> None:
    run, approved_ids, excluded = approval
    assert excluded == {"s3-20"} and len(approved_ids) == 159

    whole = torchrun(2, tmp_path / "whole", run, "--batch-size=4")
    assert whole.returncode == 0, whole.stderr[-3000:]
    full = ranks(tmp_path / "whole", 2)
    dealt = [i for r in full for b in r["batches"] for i in b]
    # 159 records on 2 ranks in batches of 4: 20 steps each (the last rank's last batch short), each record once.
    assert len(full[0]["batches"]) == len(full[1]["batches"]) == 20
    assert sorted(dealt) == sorted(approved_ids) and not excluded & set(dealt)
    assert all(r["traced"] == r["batches"] for r in full)  # trace(step, rank) names what each rank read

    killed = torchrun(2, tmp_path / "killed", run, "--batch-size=4", "--stop-after=7")
    assert killed.returncode != 0  # every rank died mid-epoch
    before = ranks(tmp_path / "killed", 2)
    assert before[0]["state"] == before[1]["state"]  # one global position, whichever rank saved it
    assert [r["batches"] for r in before] == [r["batches"][:7] for r in full]
    state = tmp_path / "state.json"
    state.write_text(json.dumps(before[0]["state"]))

    resumed = torchrun(3, tmp_path / "resumed", run, "--batch-size=5", f"--resume={state}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = ranks(tmp_path / "resumed", 3)
    assert len({len(r["batches"]) for r in after}) == 1  # equal batches per rank
    read_before = [i for r in before for b in r["batches"] for i in b]
    read_after = [i for r in after for b in r["batches"] for i in b]
    # Exactly the records of the uninterrupted epoch: none repeated, none skipped.
    assert len(read_before) == 7 * 4 * 2 and sorted(read_before + read_after) == sorted(dealt)
    assert all(r["first_step"] == 7 and r["traced"] == r["batches"] for r in after)
