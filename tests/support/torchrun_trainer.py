"""One rank of a training run through custody, started by torchrun (tests/library/approval/test_approval_torchrun.py).

It opens the approval, reads one epoch of the approved, shuffled split with two DataLoader
workers, and writes ``rank<R>.json`` under --out: each batch's record ids, what ``trace`` names
for each of its steps, and (with --stop-after N) the state after N batches, after which every
rank kills itself mid-epoch, DataLoader workers and all.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

import torch.distributed as dist

from trainvault import TrainVault
from trainvault.approval import ApprovalPolicy

POLICY = ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 10))


def ids(records: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in records]


def write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.rename(path)  # the test never reads half a file


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("--approval", "--sha256", "--key", "--out"):
        p.add_argument(name, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--stop-after", type=int)
    p.add_argument("--resume")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    approved = TrainVault().open_approved(args.approval, args.sha256, trusted_keys=[args.key], policy=POLICY)
    factory = approved.loader_factory(
        collate_fn=ids, dataloader_args={"batch_size": args.batch_size, "num_workers": 2}, shuffle=True, seed=5
    )
    loader = factory.load("train")
    first_step = 0
    if args.resume:
        state = json.loads(Path(args.resume).read_text())
        loader.load_state_dict(state)
        first_step = state["step"]
    out = Path(args.out) / f"rank{rank}.json"
    batches: list[list[str]] = []
    for batch in loader:
        batches.append(batch)
        if args.stop_after is not None and len(batches) == args.stop_after:
            write(out, {"batches": batches, "state": loader.state_dict(), "first_step": first_step})
            dist.barrier()  # every rank has written: now the run dies mid-epoch
            os.kill(os.getpid(), signal.SIGKILL)
    traced = [[t.id for t in loader.trace(first_step + i)] for i in range(len(batches))]
    write(out, {"batches": batches, "traced": traced, "first_step": first_step, "world_size": dist.get_world_size()})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
