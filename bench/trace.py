"""Trace benchmark: `loader.trace(step)` of the first and the last step of a large epoch.

Tracing locates a step from the run's history and the pure epoch order, so its cost is
that of the step's records (plus its shuffle window's permutation), the same at step 0 as
at the last step of the epoch or of a later one. The alternative without trace, and the
only one the peers offer (MosaicML Streaming and LitData cannot name a step's records at
all), is replaying the loader up to the step: timed here as one pass over the epoch.

One dataset of `--records` small records (id + ~120 B of text) in 1 MiB blocks, batch
`--batch-size`, shuffled (window 16 blocks) and in manifest order. Each figure is the
median of `--repeats` calls; ``positions`` reads no data, ``read`` also reads and verifies
the blocks holding the step's records (for their ``id``).

    python bench/trace.py --records 1000000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / ".data" / "trace"


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in records]


def write(records: int) -> str:
    """The dataset (re-used when a previous run wrote the same number of records)."""
    from trainvault import TrainVault

    root = DATA / f"r{records}"
    uri = str(root / "data-manifest-v1.json")
    if Path(uri).exists():
        return uri
    shutil.rmtree(root, ignore_errors=True)
    saver = TrainVault().dataset_saver(uri)
    per_shard = 100_000
    for s in range(0, records, per_shard):
        n = min(per_shard, records - s)
        saver.save(
            "train", None, ({"id": i, "text": _text(i)} for i in range(s, s + n)), shard_id=f"s{s // per_shard:04d}"
        )
    saver.commit_manifest()
    return uri


def _text(i: int) -> str:
    """About 120 B that compress like text, not like a repeated phrase."""
    return f"record {i:09d} " + " ".join(str((i * 2654435761 + k * 40503) % 99991) for k in range(18))


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the epoch (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="calls per figure; the median is shown")
    args = parser.parse_args(argv)
    from trainvault import TrainVault

    t0 = time.perf_counter()
    uri = write(args.records)
    print(
        f"dataset: {args.records:,} records, batch {args.batch_size} (written or found in "
        f"{time.perf_counter() - t0:.1f} s, not timed)",
        flush=True,
    )
    rows = []
    for shuffle in (True, False):
        loader = (
            TrainVault()
            .split_data_loader(
                uri, collate_fn=ids, shuffle=shuffle, seed=args.seed, dataloader_args={"batch_size": args.batch_size}
            )
            .load("train")
        )
        steps = len(loader)
        loader.trace(steps // 2)  # warm: descriptors parsed, reader threads started
        cases = {
            "first step (0)": 0,
            f"last step ({steps - 1:,})": steps - 1,
            f"last step of epoch 3 ({4 * steps - 1:,})": 4 * steps - 1,
        }
        base = {}
        for read in (False, True):
            for label, step in cases.items():
                took, traced = timed(partial(loader.trace, step, read=read), args.repeats)
                assert traced and all((t.id is not None) == read for t in traced)
                base.setdefault(read, took)
                rows.append((shuffle, label, "read" if read else "positions", took, took / base[read]))
        t = time.perf_counter()
        for _ in loader:  # replaying to the last step: the whole epoch
            pass
        replay = time.perf_counter() - t
        rows.append(
            (shuffle, f"replay to step {steps - 1:,} (one epoch, num_workers=0)", "read", replay, replay / base[True])
        )
    print("\n| order | trace of | reads | median ms | ratio to step 0 (same reads) |")
    print("|---|---|---|---|---|")
    for shuffle, label, reads, took, ratio in rows:
        print(f"| {'shuffled' if shuffle else 'manifest'} | {label} | {reads} | {took * 1e3:,.2f} | {ratio:,.2f}x |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
