"""Lightning's strategy="ddp" on 2 CPU ranks (gloo): each rank trains on the batches trainvault
deals that rank, in its order (Lightning puts no DistributedSampler on it and re-samples
nothing), and a run resumed from a mid-epoch checkpoint gets each rank's remaining batches."""

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
SCRIPT = ROOT / "tests" / "support" / "lightning_ddp.py"
#: Two processes starting Lightning and gloo on a loaded machine: generous, but a hang fails.
DEADLINE_S = 300


def run(manifest: str, out: Path, *flags: str) -> list[dict[str, Any]]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    out.mkdir()
    cmd = [sys.executable, str(SCRIPT), f"--manifest={manifest}", f"--out={out}", *flags]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=DEADLINE_S, cwd=out)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_ddp_ranks_train_on_what_trainvault_deals_them_and_resume(
    build_chain: Callable[..., Any], tmp_path: Path
) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "data"), shards=3, records_per_shard=30)
    expected = [dealt_ids(chain.manifest_uri, r, seed=9) for r in range(2)]  # 90 records: 9 steps an epoch per rank
    assert len(expected[0]) == len(expected[1]) == 18
    # Stopped at step 14, into the second epoch; checkpoints at steps 6 and 12; resumed from 12 to 16.
    runs = run(chain.manifest_uri, tmp_path / "out", "--stop-at=14", "--steps=16", "--resume=epoch=1-step=12.ckpt")
    assert [r["first"] for r in runs] == [e[:14] for e in expected]
    assert [r["resumed"] for r in runs] == [e[12:16] for e in expected]
