"""The Hugging Face Trainer with `TrainVaultTrainerMixin` under torchrun on 2 gloo ranks: each
rank trains on what trainvault deals it, and a run resumed from a mid-epoch checkpoint (saved
by the first rank) gets each rank's remaining batches, with another num_workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainvault import TrainVault
from trainvault.loading import LoaderPlan, SplitLoaderFactory

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "support" / "hf_torchrun.py"
#: Two ranks starting transformers and gloo on a loaded machine: generous, but a hang fails.
DEADLINE_S = 300


def dealt(manifest: str, rank: int) -> list[list[str]]:
    """An epoch and a half of what trainvault deals `rank` of 2, read without the Trainer."""
    plan = LoaderPlan.create(
        collate_fn=lambda rs: [r["id"] for r in rs],
        dataloader_args={"batch_size": 5},
        shuffle=True,
        seed=4,
        rank=rank,
        world_size=2,
    )
    loader = SplitLoaderFactory(TrainVault().storage, manifest, plan).load("train")
    return list(loader) + list(loader)


def test_two_ranks_resume_exactly(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "data"), shards=3, records_per_shard=30)
    expected = [dealt(chain.manifest_uri, r) for r in range(2)]  # 9 batches an epoch per rank: 5 steps of 2
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(SCRIPT)]
    flags = [f"--manifest={chain.manifest_uri}", f"--out={out}", "--stop-at=7", "--steps=10", "--resume-from=4"]
    done = subprocess.run([*cmd, *flags], env=env, capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        runs = json.loads((out / f"rank{rank}.json").read_text())
        # Step 7 is 2 batches into the second epoch (5 steps an epoch, the last of 1 batch).
        assert runs["first"] == expected[rank][:13]
        # Checkpoint 4 is 8 batches into the first epoch: the rest of it, then the second epoch.
        assert runs["resumed"] == expected[rank][8:18]
