"""Component range benchmark: the materializer (unpack and group) against the approved loader
on the same packed records unmaterialised, with 0 and 2 workers.

A msgpack.zst publication in a local folder of `--packed-records` records of 65,536 int32
tokens, each packing 1-8 components (the first sometimes a later piece of a cut document),
with its whole custody chain and a component ledger (every component cut by
``split_frame`` into ranges of at most `--max-rows` rows, default 8,192) bound as the
approval's sidecar. Each measurement is one epoch of the approved loader, batches collated in the workers
into the tensors a trainer takes (so they cross processes through shared memory):

- plain: ``approved.split_data_loader(...)`` without a materializer, batch 4 packed
  records stacked as one ``[4, 65536]`` tensor;
- floor: the plain loader whose collate checks every range digest and writes the varlen
  outputs once with no per-range records: what no materializer can beat;
- unpack: ``materializer=approved.component_range_materializer("train")``, batch 32
  ranges, ``collate_fn=trainvault.components.collate_sequences`` (flat ``input_ids``,
  ``position_ids``, ``loss_mask``, ``target_row_indices``, ``ce_valid``, ``cu_seqlens``);
- group: ``mode="group"``, batch 4 packed records, the same collate.

It prints how busy the machine's cores were during each epoch (all processes: the workers
and anything else running) and, with 0 workers, each epoch's CPU time (every thread of
this process) and the bound it sets: no epoch finishes before its CPU time spread over
every core, so the floor's CPU time caps the ratio any materializer reaches here.

Tokens/s counts the packed records' tokens read per wall-clock second (the same tokens in
every mode, so the ratios compare like with like); the materialised modes also emit one
predecessor row per mid-component range. Goal: each mode >= 85% of plain. Workers are
persistent, warmed by one epoch first. Medians of `--repeats` epochs, round-robin.

    .venv/bin/python bench/components.py --packed-records 256
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from chain import approval_request, publish_train  # bench/ is the script folder, first on sys.path
from trainvault import TrainVault
from trainvault.approval import ApprovalRequest
from trainvault.components import ComponentLedger, ComponentLedgerPart, Frame, collate_sequences, ledger_uri, split_frame
from trainvault.components.collate import allocate_varlen

DATA = Path(__file__).resolve().parent / ".data" / "components"
TOKENS = 65_536


def packed_records(n: int, seed: int, start: int) -> list[dict[str, Any]]:
    out = []
    for k in range(start, start + n):
        rng = random.Random(seed * 1_000_003 + k)
        comps = rng.randint(1, 8)
        cuts = sorted(rng.sample(range(1, TOKENS), comps - 1)) if comps > 1 else []
        bounds = [0, *cuts, TOKENS]
        frames = [[f"doc{k}-{j}", bounds[j], bounds[j + 1], rng.choice([0, rng.randrange(1, 100_000)]) if j == 0 else 0]
                  for j in range(comps)]
        tokens = np.random.default_rng(k).integers(0, 50_000, TOKENS, dtype=np.int32)
        out.append({"packed_record_id": f"p{k}", "input_ids": tokens, "text": f"packed record {k}", "frames": frames})
    return out


def publish(records: int, shard_records: int, seed: int, max_rows: int) -> tuple[TrainVault, ApprovalRequest]:
    vault, manifest_uri = publish_train(DATA, records, shard_records, lambda n, start: packed_records(n, seed, start))

    def declare(record: dict[str, Any]) -> list[Frame]:
        return [split_frame(Frame(cid, s, e, cs), max_rows) for cid, s, e, cs in record["frames"]]

    ledger = vault.build_component_ledger(manifest_uri, split="train", declare=declare)
    request = approval_request(vault, str(DATA), manifest_uri, sidecars=ledger.sidecars())
    return vault, request


def pack_plain(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Packed records as a trainer takes them: one [batch, 65536] tensor, written once (into
    shared memory in a worker, like the varlen batches)."""
    ids = [r["input_ids"] for r in batch]
    out, views = allocate_varlen(sum(len(a) for a in ids), 0, 0)
    np.stack(ids, out=views["input_ids"].reshape(len(ids), -1))
    return {"input_ids": out["input_ids"].view(len(ids), -1)}


class FloorCollate:
    """The least a materializer within the issue's rules must add to the plain loader: check
    every range's sha256 and write the varlen outputs once, straight from the packed records
    and cached aranges, with no per-range records (the records here have no loss_mask, so
    every row after the first bears loss). No implementation of the spec can beat it."""

    def __init__(self, vault: TrainVault, uri: str):
        self.ranges: dict[str, list[tuple[int, int, str]]] = {}
        ledger = ComponentLedger.from_json_bytes(vault.storage.get(uri))
        base = uri.rsplit("/", 1)[0]
        for ref in ledger.parts:
            part = ComponentLedgerPart.from_json_bytes(vault.storage.get(f"{base}/{ref.uri}"))
            for rec in part.records:
                spans = self.ranges[rec.packed_record_id] = []
                for f in rec.frames:
                    for r in f.ranges:
                        lo = f.start + r.component_offset - f.component_start
                        spans.append((lo - (r.component_offset > 0), lo + r.length, r.sha256))
        self.arange = np.arange(max_rows_of(self.ranges), dtype=np.int64)

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        spans = []
        for rec in batch:
            ids = rec["input_ids"]
            for lo, hi, digest in self.ranges[rec["packed_record_id"]]:
                if hashlib.sha256(ids[lo:hi]).hexdigest() != digest:
                    raise AssertionError(f"range [{lo}, {hi}) of {rec['packed_record_id']} does not match its digest")
                spans.append((ids, lo, hi))
        rows = sum(hi - lo for _, lo, hi in spans)
        out, v = allocate_varlen(rows, rows - len(spans), len(spans))
        at = t = 0
        for k, (ids, lo, hi) in enumerate(spans):
            m = hi - lo
            v["cu_seqlens"][k] = at
            v["input_ids"][at : at + m] = ids[lo:hi]
            v["position_ids"][at : at + m] = self.arange[:m]
            v["loss_mask"][at] = False
            v["loss_mask"][at + 1 : at + m] = True
            np.add(self.arange[: m - 1], at, out=v["target_row_indices"][t : t + m - 1])
            at, t = at + m, t + m - 1
        v["cu_seqlens"][-1] = at
        v["ce_valid"][:] = True
        return out


def max_rows_of(ranges: dict[str, list[tuple[int, int, str]]]) -> int:
    return max((hi - lo for spans in ranges.values() for lo, hi, _ in spans), default=1)


def machine_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    return sum(fields) - fields[3] - fields[4], sum(fields)  # idle and iowait are not busy


def epoch(loader: Any) -> int:
    """Batches of one epoch (consumed, not kept)."""
    return sum(1 for _ in loader)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packed-records", type=int, default=256, help="65,536-token records (default %(default)s)")
    parser.add_argument("--shard-records", type=int, default=64, help="records per shard (default %(default)s)")
    parser.add_argument("--max-rows", type=int, default=8192, help="rows per range at most (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="epochs per measurement (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args, _ = parser.parse_known_args(argv)  # bench/run.py passes every benchmark the same options

    t0 = time.perf_counter()
    vault, request = publish(args.packed_records, args.shard_records, args.seed, args.max_rows)
    approved = vault.approve_dataset(request)
    unpack = approved.component_range_materializer("train", max_rows=args.max_rows)
    group = approved.component_range_materializer("train", mode="group", max_rows=args.max_rows)
    tokens = args.packed_records * TOKENS
    print(f"publication: {args.packed_records} packed records, {tokens / 1e6:,.1f} M tokens "
          f"({time.perf_counter() - t0:.1f} s to build the chain and ledger)")
    print(unpack.describe())

    floor = FloorCollate(vault, ledger_uri(f"{DATA}/ds/data-manifest-v1.json", "train"))
    modes = {"plain": (None, 4, pack_plain), "floor": (None, 4, floor), "unpack": (unpack, 32, collate_sequences),
             "group": (group, 4, collate_sequences)}
    results: dict[tuple[str, int], float] = {}
    cpu_s: dict[str, float] = {}  # CPU seconds an epoch with 0 workers
    busy_s: dict[tuple[str, int], float] = {}  # share of the machine's cores busy during an epoch
    for workers in (0, 2):
        loaders = {}
        for name, (m, batch, collate) in modes.items():
            dl_args: dict[str, Any] = {"batch_size": batch, "num_workers": workers}
            if workers:
                dl_args["persistent_workers"] = True
            loaders[name] = approved.split_data_loader(collate_fn=collate, dataloader_args=dl_args,
                                                       materializer=m).load("train")
            epoch(loaders[name])  # warm-up: imports, workers, page cache
        times: dict[str, list[float]] = {name: [] for name in modes}
        cpu: dict[str, list[float]] = {name: [] for name in modes}  # every thread of this process
        busy: dict[str, list[float]] = {name: [] for name in modes}  # the whole machine's cores
        names = list(modes)
        for i in range(args.repeats):
            for name in names[i % len(names):] + names[: i % len(names)]:
                t, c, j = time.perf_counter(), time.process_time(), machine_jiffies()
                epoch(loaders[name])
                times[name].append(time.perf_counter() - t)
                cpu[name].append(time.process_time() - c)
                if j is not None and (k := machine_jiffies()) is not None and k[1] > j[1]:
                    busy[name].append((k[0] - j[0]) / (k[1] - j[1]))
        for name in modes:
            results[(name, workers)] = tokens / statistics.median(times[name])
            if not workers:
                cpu_s[name] = statistics.median(cpu[name])
            if busy[name]:
                busy_s[(name, workers)] = statistics.median(busy[name])
        del loaders
    for workers in (0, 2):
        plain = results[("plain", workers)]
        print(f"num_workers={workers}:")
        for name in modes:
            tps = results[(name, workers)]
            goal = " (goal >= 0.85)" if name in ("unpack", "group") else ""
            line = f"  {name:6s}: {tps / 1e6:8.1f} M tokens/s"
            if not workers:
                line += f", {cpu_s[name] * 1e3:5.0f} ms CPU an epoch"
            if (name, workers) in busy_s:
                line += f", cores {busy_s[(name, workers)]:4.0%} busy"
            print(line + ("" if name == "plain" else f"   ratio {name}/plain {tps / plain:.2f}{goal}"))
        if not workers:
            # An epoch cannot take less wall time than its CPU time spread over every core.
            cores = os.cpu_count() or 1
            bound = (tokens / plain) / (cpu_s["floor"] / cores)
            print(f"  bound: the floor's CPU time on all {cores} cores at once allows at most ratio {bound:.2f}")


if __name__ == "__main__":
    sys.exit(main())
