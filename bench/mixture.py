"""Mixture benchmark: what drawing by a mixture schedule costs against plain loading.

One dataset of `--records` small records (id + ~120 B of text) in three stages of 1/2,
1/3 and 1/6 of the records, 1 MiB blocks, shuffled (window 16 blocks), batch
`--batch-size`, num_workers 0 (so every cost lands in the measuring process). Each of
`--repeats` rounds runs every leg once, in turn (so load on a shared machine hits all legs
alike), over one pass of the dataset's records:

- raw: every block of every shard read and decoded in one loop (no verification,
  batching or order): the limit;
- plain: `load("train", curriculum_stages=[all three])`, one epoch;
- mixture: `load_mixture` over the three stages, weights 3:2:1 (their sizes), each
  `run_out="drop"`: one pass of every component, the same records as the plain leg;
- sampling: the schedule and component lookups alone (`MixtureIterableDataset.plan`, which
  the worker's read-ahead planner runs once per `plan_batches()` batches) for every batch of
  the mixture leg. Each chunk is planned twice and the second call timed: the first
  computes the shuffle windows' record permutations, which `load()` computes for its
  windows too (they are part of shuffling, not of mixing).

It prints each leg's throughput (median over rounds) against raw, and two ratios, each the
median of the per-round ratios: mixture / plain throughput (records per second), and
sampling time as a share of the mixture leg's time (issue 29's target: at most 5 %); both
in wall-clock time and in this process's CPU time (steadier on a shared machine).

    python bench/mixture.py --records 60000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / ".data" / "mixture"
SHARES = (3, 2, 1)


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
    start = 0
    for i, share in enumerate(SHARES):
        n = records * share // sum(SHARES)
        saver.save(
            "train",
            f"st{i}",
            ({"id": k, "text": f"record {k} " + "lorem ipsum dolor sit amet " * 4} for k in range(start, start + n)),
            shard_id="s0",
        )
        start += n
    saver.commit_manifest()
    return uri


def loader(uri: str, batch: int) -> Any:
    from trainvault import TrainVault

    return TrainVault().ungated_loader_factory(
        uri, collate_fn=ids, shuffle=True, seed=7, dataloader_args={"batch_size": batch}
    )


def mixture() -> Any:
    from trainvault.mixtures import Mixture, MixtureComponent

    # run_out="drop": one pass of every component, then the stream ends: the records of one
    # epoch of the plain leg. (With "repeat" the planner would plan, and compute the shuffle
    # permutations of, the next pass's first windows just before the leg stops.)
    return Mixture("train", [MixtureComponent(f"c{i}", w, f"st{i}", run_out="drop") for i, w in enumerate(SHARES)])


def raw(uri: str) -> int:
    from trainvault import TrainVault, iter_shard

    manifest = TrainVault().load_manifest(uri)
    return sum(1 for s in manifest.splits["train"].shards for _ in iter_shard(manifest.data_format, s))


def plain(uri: str, batch: int) -> int:
    return sum(len(b) for b in loader(uri, batch).load("train", curriculum_stages=["st0", "st1", "st2"]))


def mixed(uri: str, batch: int) -> int:
    from trainvault.mixtures import load_mixture

    return sum(len(b) for b in load_mixture(loader(uri, batch), mixture()))


def sampling(uri: str, batch: int) -> tuple[float, float]:
    """Wall and CPU seconds spent planning every batch of the mixture leg (permutations
    already computed)."""
    from trainvault.mixtures import load_mixture

    ld = load_mixture(loader(uri, batch), mixture())
    ds = ld._mixture_dataset
    schedule = ds.schedule(ds.point)
    batches, step = len(schedule), ds.plan_batches()
    wall = cpu = 0.0
    for lo in range(0, batches, step):
        ts = list(range(lo, min(batches, lo + step)))
        ds.plan(ts, schedule)
        t0, c0 = time.perf_counter(), time.process_time()
        ds.plan(ts, schedule)
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
    return wall, cpu


def timed(fn: Any, *args: Any) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of this process (every thread) and fn's record count."""
    t0, c0 = time.perf_counter(), time.process_time()
    n = fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0, n


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of every leg; medians are shown")
    args = parser.parse_args(argv)
    uri = write(args.records)
    total = raw(uri)
    legs = {"raw": (raw, uri), "plain": (plain, uri, args.batch_size), "mixture": (mixed, uri, args.batch_size)}
    rates: dict[str, list[float]] = {name: [] for name in legs}
    cpu_rates: dict[str, list[float]] = {name: [] for name in legs}
    shares: list[float] = []
    cpu_shares: list[float] = []
    for _ in range(args.repeats):
        secs, cpus = {}, {}
        for name, (fn, *fargs) in legs.items():
            secs[name], cpus[name], n = timed(fn, *fargs)
            rates[name].append(n / secs[name])
            cpu_rates[name].append(n / cpus[name])
        wall, cpu = sampling(uri, args.batch_size)
        shares.append(wall / secs["mixture"])
        cpu_shares.append(cpu / cpus["mixture"])
        print(
            "  round: " + ", ".join(f"{k} {v:.3f} s" for k, v in secs.items()) + f", sampling {100 * shares[-1]:.2f} %",
            flush=True,
        )
    print(f"{total:,} records, batch {args.batch_size}, shuffled, num_workers 0, median of {args.repeats} rounds")
    raw_rate = statistics.median(rates["raw"])
    for name, got in rates.items():
        print(f"{name:9s} {statistics.median(got):12,.0f} rec/s   {statistics.median(got) / raw_rate:6.2f} x raw")
    ratio = statistics.median(m / p for m, p in zip(rates["mixture"], rates["plain"], strict=False))
    cpu_ratio = statistics.median(m / p for m, p in zip(cpu_rates["mixture"], cpu_rates["plain"], strict=False))
    print(f"mixture / plain throughput: {ratio:.3f} wall, {cpu_ratio:.3f} CPU")
    print(
        f"sampling (schedule + lookups) share of the mixture leg's time: {100 * statistics.median(shares):.2f} % wall, "
        f"{100 * statistics.median(cpu_shares):.2f} % CPU (target <= 5 %)"
    )


if __name__ == "__main__":
    main()
