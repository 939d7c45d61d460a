"""Approval benchmark: the gate's hashing against plain hashlib, and the approved loader
against the unapproved one, on the same files in the same run.

One corpus (bench/corpus.py) saved as a msgpack.zst publication in a local folder, with
its whole custody chain (training scan manifest, producer pins, a one-benchmark
evaluation release, the default verifier contract, the contamination report):

- approval hashing: `approve_dataset` end to end (reads and hashes every bound document
  and every file the scan manifest declares, checks everything) against a plain loop of
  ``hashlib.sha256`` over the same files, 8 MiB reads, one thread. MB/s are bytes of the
  files hashed per wall-clock second; the page cache is warmed first so both sides read
  from memory. Goal: the gate at >= 90% of plain hashlib. The chain is signed by a scanner
  key and this measurement disables the re-scan; the gate with its default sample
  (max(2 shards, 2 %)) and with a full re-scan (no scanner keys) are timed against it,
  and the re-scan's text-field survey (the unscanned-field check) against the scan alone
  (CPU time of scanning every shard).
- approved loader: records/s of ``approved.loader_factory(...).load("train")`` (custody
  storage, size check per shard, SHA-256 of every block before decoding) against
  ``TrainVault.ungated_loader_factory(...).load("train")`` on the same manifest, batch 256,
  ``num_workers=0``, list collate. Goal: >= 85%. Records/s are given per wall-clock second
and per second of this process's CPU time (the machine is shared, so wall time counts
other jobs' load).

Medians of `--repeats` runs, round-robin.

    .venv/bin/python bench/approval.py --records 100000
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus
from chain import approval_request, publish_train

from trainvault import TrainVault
from trainvault.approval import ApprovalPolicy, ApprovalRequest, SigningKey

DATA = Path(__file__).resolve().parent / ".data" / "approval"


SCANNER = SigningKey.generate()
#: Signed chain, no re-scan: the gate's hashing and checks alone.
HASHING = ApprovalPolicy(scanner_keys=[SCANNER.public_key], rescan_min_shards=0, rescan_fraction=(0, 1))
SAMPLED = ApprovalPolicy(scanner_keys=[SCANNER.public_key], rescan_seed=0)
FULL = ApprovalPolicy()


def publish(records: int, seed: int, shard_records: int) -> tuple[TrainVault, ApprovalRequest, list[Path]]:
    """The publication and its custody chain; returns the request and every file the gate hashes."""
    vault, manifest_uri = publish_train(
        DATA, records, shard_records, lambda n, start: corpus.iter_records(n, seed=seed, start=start)
    )
    request = approval_request(vault, str(DATA), manifest_uri, scanner_key=SCANNER)
    files = sorted(p for p in DATA.rglob("*") if p.is_file() and "release" not in p.parts)
    return vault, request, files


def plain_hash(files: list[Path]) -> int:
    total = 0
    for path in files:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                h.update(chunk)
                total += len(chunk)
        h.hexdigest()
    return total


def count_records(loader: Any) -> int:
    return sum(len(batch) for batch in loader.load("train"))


def rescans(vault: TrainVault, request: ApprovalRequest, hashing_s: float, repeats: int) -> None:
    """The gate with its default re-scan sample and with a full re-scan, against hashing alone."""
    for name, policy in (("default sample", SAMPLED), ("full re-scan  ", FULL)):
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            approved = vault.approve_dataset(request, policy=policy)
            times.append(time.perf_counter() - t)
        shards = approved.summary.attestation.rescan.shards if approved.summary.attestation else "all"
        print(
            f"gate, {name}: median {statistics.median(times):.3f} s, {statistics.median(times) / hashing_s:.2f}x "
            f"the gate without re-scan (re-scanned: {len(shards) if isinstance(shards, list) else shards} of "
            f"{approved.summary.shards} shards)"
        )


def survey_cost(vault: TrainVault, request: ApprovalRequest, repeats: int) -> None:
    """CPU time of scanning every shard as the gate's re-scan does (with its text-field survey)
    against the scan alone: what the unscanned-field check costs."""
    from trainvault.contamination import load_index
    from trainvault.contamination.scan import scan_shard
    from trainvault.contamination.text_fields import TextFieldSurvey

    manifest = vault.load_manifest(request.data_manifest.uri)
    index = load_index(vault, request.evaluation_release, request.verifier_contract)
    entries = [e for split in manifest.splits.values() for e in split.shards]
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for surveyed in (False, True):
            survey = TextFieldSurvey(index.contract, index.normalizer) if surveyed else None
            t = time.process_time()
            for entry in entries:
                scan_shard(vault.storage, manifest.data_format, entry, index, survey=survey)
            times[surveyed].append(time.process_time() - t)
    alone, surveyed = statistics.median(times[False]), statistics.median(times[True])
    print(
        f"re-scan with field survey: median {surveyed:.3f} CPU s, scan alone {alone:.3f} CPU s, "
        f"ratio {surveyed / alone:.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpus.add_corpus_args(parser)
    parser.add_argument("--shard-records", type=int, default=5000, help="records per shard (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per measurement (default %(default)s)")
    args, _ = parser.parse_known_args(argv)

    t0 = time.perf_counter()
    vault, request, files = publish(args.records, args.seed, args.shard_records)
    print(
        f"publication: {args.records:,} records, {len(files)} files, "
        f"{sum(p.stat().st_size for p in files) / 1e6:,.1f} MB ({time.perf_counter() - t0:.1f} s to build the chain)"
    )

    plain_hash(files)  # warm the page cache
    approved = vault.approve_dataset(request, policy=HASHING)
    hashed = approved.summary.bytes_hashed
    gate_s: list[float] = []
    plain_s: list[float] = []
    plain_bytes = 0
    for _ in range(3 * args.repeats):  # cheap: a fraction of a second each
        t = time.perf_counter()
        approved = vault.approve_dataset(request, policy=HASHING)
        gate_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        plain_bytes = plain_hash(files)
        plain_s.append(time.perf_counter() - t)
    gate_mbs = hashed / statistics.median(gate_s) / 1e6
    plain_mbs = plain_bytes / statistics.median(plain_s) / 1e6
    print(
        f"approval gate  : {gate_mbs:8.1f} MB/s ({hashed / 1e6:,.1f} MB, {approved.summary.files_hashed} files, "
        f"median {statistics.median(gate_s):.3f} s)"
    )
    print(
        f"plain hashlib  : {plain_mbs:8.1f} MB/s ({plain_bytes / 1e6:,.1f} MB, median {statistics.median(plain_s):.3f} s)"
    )
    print(f"ratio gate/hashlib: {gate_mbs / plain_mbs:.2f} (goal >= 0.90)")
    rescans(vault, request, statistics.median(gate_s), args.repeats)
    survey_cost(vault, request, args.repeats)

    args_dl = {"batch_size": 256, "num_workers": 0}
    plain_loader = vault.ungated_loader_factory(request.data_manifest.uri, collate_fn=list, dataloader_args=args_dl)
    approved_loader = approved.loader_factory(collate_fn=list, dataloader_args=args_dl)
    count_records(plain_loader)  # warm-up: imports, descriptors, page cache
    count_records(approved_loader)
    # (wall s, CPU s) per run; the order alternates so load from other jobs hits both alike.
    plain_t: list[tuple[float, float]] = []
    approved_t: list[tuple[float, float]] = []
    n = 0
    for i in range(args.repeats):
        for which in ((approved_loader, approved_t), (plain_loader, plain_t))[:: 1 if i % 2 == 0 else -1]:
            t, c = time.perf_counter(), time.process_time()
            n = count_records(which[0])
            which[1].append((time.perf_counter() - t, time.process_time() - c))
    a_rps = n / statistics.median(w for w, _ in approved_t)
    p_rps = n / statistics.median(w for w, _ in plain_t)
    a_cpu = n / statistics.median(c for _, c in approved_t)
    p_cpu = n / statistics.median(c for _, c in plain_t)
    print(f"approved loader: {a_rps:10,.0f} records/s wall, {a_cpu:10,.0f} records per CPU second")
    print(f"plain loader   : {p_rps:10,.0f} records/s wall, {p_cpu:10,.0f} records per CPU second")
    print(f"ratio approved/plain (CPU): {a_cpu / p_cpu:.2f}")
    print(f"ratio approved/plain (wall): {a_rps / p_rps:.2f} (goal >= 0.85)")


if __name__ == "__main__":
    main()
