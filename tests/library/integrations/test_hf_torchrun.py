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

from support.dealt import dealt_ids

from trainvault import TrainVault

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "support" / "hf_torchrun.py"
#: Two ranks starting transformers and gloo on a loaded machine: generous, but a hang fails.
DEADLINE_S = 300


def test_two_ranks_resume_exactly(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "data"), shards=3, records_per_shard=30)
    expected = [dealt_ids(chain.manifest_uri, r, seed=4) for r in range(2)]  # 9 batches an epoch per rank: 5 steps of 2
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
