"""Contamination precision and recall (issue 41): the labelled sweep at full size, and scan
throughput before and after the evidence rule, in one run.

- Recall: every HumanEval item planted under each perturbation class, and its prompt only,
  solution only and first half alone (parts shorter than one 13-gram left out: no n-gram
  method sees them), for ngram-exact-v1, -v2 and -v3 (`tests/support/contamination_sweep.py`).
- Precision: items flagged on the clean corpus (standard library, package docs), on every
  installed package's `.py` files (evaluation packages left out; 359 MB here), on
  near-misses, and on each hard-negative class (`tests/support/contamination_negatives.py`).
- Throughput: `scan_records` over the code corpus under v2 and v3, round-robin, median of
  `--repeats`, in MB of text per second of this process's CPU time (the machine is shared),
  with the ratio v3 / v2. v3 matches exactly as v2 does; its rule is applied by the reduce.

    .venv/bin/python bench/contamination_precision.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support import contamination_sweep as sweep

from trainvault.contamination import scan_records


def throughput(repeats: int, code: list[dict[str, str]]) -> dict[str, float]:
    """Median MB/s (CPU time) of `scan_records` over `code` per method, round-robin."""
    idx = sweep.indexes()
    size = sum(len(r["text"].encode("utf-8")) for r in code)
    runs: dict[str, list[float]] = {m: [] for m in ("ngram-exact-v2", "ngram-exact-v3")}
    for _ in range(repeats):
        for method in runs:
            t = time.process_time()
            scan_records(idx[method], code, shard_sha256="0" * 64)
            runs[method].append(size / 1e6 / (time.process_time() - t))
    return {m: statistics.median(v) for m, v in runs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--code-mb", type=float, default=None, help="code corpus budget (default: every file)")
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    budget = None if args.code_mb is None else int(args.code_mb * 1e6)
    t = time.perf_counter()
    res = sweep.sweep(budget)
    print(f"HumanEval items: {res['items']}; sweep {time.perf_counter() - t:.0f} s")
    print("\n".join(sweep.table(res)))
    for m, r in res["methods"].items():
        for key in ("fp_clean", "fp_code", "fp_near"):
            for item, where in r[key][:20]:
                print(f"  {m} {key}: {item} in {where}")
    speed = throughput(args.repeats, sweep.code_corpus(budget))
    v2, v3 = speed["ngram-exact-v2"], speed["ngram-exact-v3"]
    print(f"scan_records, code corpus: v2 {v2:.1f} MB/s, v3 {v3:.1f} MB/s (CPU time), v3/v2 {v3 / v2:.2f}")


if __name__ == "__main__":
    main()
