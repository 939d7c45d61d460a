"""Component range benchmark: the materializer (unpack and group) against the approved loader
on the same packed records, against a floor and against what trainers do without custody,
with 0 and 2 workers in one run.

A msgpack.zst publication in a local folder of `--packed-records` records of 65,536 int32
tokens, each packing 1-8 components (the first sometimes a later piece of a cut document),
each component ending in an EOS token (0), with its whole custody chain and a component
ledger (every component cut by ``split_frame`` into ranges of at most `--max-rows` rows,
default 8,192) bound as the approval's sidecar; the gate checks every range's sha256 once,
at approval. Each measurement is one epoch of the approved loader, batches collated in the
workers into the tensors a trainer takes (so they cross processes through shared memory):

- plain: ``approved.loader_factory(...)`` without a materializer, batch 4 packed
  records stacked as one ``[4, 65536]`` tensor;
- floor: the plain loader whose collate writes the varlen outputs of the ledger's ranges
  once, straight from the packed records and cached aranges, with no per-range records
  and no range hashing (the gate did it): what no materializer can beat;
- peer: the plain loader whose collate does what trainers do today without custody:
  Megatron-LM ``get_ltor_masks_and_position_ids(reset_position_ids=True,
  reset_attention_mask=True, eod_mask_loss=True)`` semantics (int64 ``position_ids``
  restarting after each EOS, float ``loss_mask`` 0 at EOS), the document-boundary mask as
  torchtitan-style ``cu_seqlens``/``max_seqlen`` from EOS positions (a dense [s, s] mask
  is 4 GiB a record at 65,536 tokens; varlen attention takes the boundaries instead).
  Vectorised numpy, batch 4;
- unpack: ``materializer=approved.component_range_materializer("train")``, batch 32
  ranges (`--unpack-batch`; about 42 hold as many tokens as 4 packed records),
  ``collate_fn=trainvault.components.collate_sequences`` (flat ``input_ids``,
  ``position_ids``, ``loss_mask``, ``target_row_indices``, ``ce_valid``, ``cu_seqlens``);
- group: ``mode="group"``, batch 4 packed records, the same collate.

It prints each epoch's CPU time (this process's threads plus the workers') and how busy
the machine's cores were (all processes: the workers and anything else running).

Tokens/s counts the packed records' tokens read per wall-clock second (the same tokens in
every mode, so the ratios compare like with like); the materialised modes also emit one
predecessor row per mid-component range. Goal: unpack and group >= 0.90 of the floor and
>= 1.0 of the peer. Workers are persistent, warmed by one epoch first. Medians of
`--repeats` epochs, round-robin.

    .venv/bin/python bench/components.py --packed-records 256
"""

from __future__ import annotations

import argparse
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
from trainvault.components import (
    ComponentLedger,
    ComponentLedgerPart,
    Frame,
    collate_sequences,
    ledger_uri,
    split_frame,
)
from trainvault.components.collate import _buffer as shared_buffer  # one shared-memory segment a batch in a worker
from trainvault.components.collate import allocate_varlen

DATA = Path(__file__).resolve().parent / ".data" / "components"
TOKENS = 65_536
EOS = 0


def packed_records(n: int, seed: int, start: int) -> list[dict[str, Any]]:
    out = []
    for k in range(start, start + n):
        rng = random.Random(seed * 1_000_003 + k)
        comps = rng.randint(1, 8)
        cuts = sorted(rng.sample(range(1, TOKENS), comps - 1)) if comps > 1 else []
        bounds = [0, *cuts, TOKENS]
        frames = [
            [f"doc{k}-{j}", bounds[j], bounds[j + 1], rng.choice([0, rng.randrange(1, 100_000)]) if j == 0 else 0]
            for j in range(comps)
        ]
        tokens = np.random.default_rng(k).integers(1, 50_000, TOKENS, dtype=np.int32)
        tokens[np.asarray(bounds[1:]) - 1] = EOS  # every component ends in EOS, as packers write them
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
    """The least a materializer must add to the plain loader: write the varlen outputs of the
    ledger's ranges once, straight from the packed records and cached aranges, with no
    per-range records and no range hashing (the records here have no loss_mask, so every
    row after the first bears loss). No implementation of the spec can beat it."""

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
                        spans.append((lo - (r.component_offset > 0), lo + r.length))
        rows = max(hi - lo for s in self.ranges.values() for lo, hi in s)
        self.positions, self.arange = np.arange(rows, dtype=np.int32), np.arange(rows, dtype=np.int64)

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        spans = [(rec["input_ids"], lo, hi) for rec in batch for lo, hi in self.ranges[rec["packed_record_id"]]]
        lengths = np.fromiter((hi - lo for _, lo, hi in spans), dtype=np.int64, count=len(spans))
        starts = np.zeros(len(spans) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        out, v = allocate_varlen(int(starts[-1]), int(starts[-1]) - len(spans), len(spans))
        np.concatenate([ids[lo:hi] for ids, lo, hi in spans], out=v["input_ids"])
        np.concatenate([self.positions[: hi - lo] for _, lo, hi in spans], out=v["position_ids"])
        v["loss_mask"][:] = True
        v["loss_mask"][starts[:-1]] = False
        t = v["target_row_indices"]
        for k, (row, m) in enumerate(zip(starts[:-1].tolist(), lengths.tolist(), strict=False)):
            np.add(
                self.arange[: m - 1], row, out=t[row - k : row - k + m - 1]
            )  # k sequences before: k rows without a target
        v["ce_valid"][:] = True
        v["cu_seqlens"][:] = starts
        out["max_seqlen"] = int(lengths.max())
        return out


class PeerCollate:
    """What trainers do today without custody, on the same packed records (module doc):
    Megatron-LM's reset position ids and EOD loss mask, torchtitan-style cu_seqlens from EOS
    positions, written once into one buffer like the other collates."""

    def __init__(self) -> None:
        self.arange = np.arange(4 * TOKENS + 1, dtype=np.int64)

    def __call__(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        n, s = len(batch) * TOKENS, TOKENS
        eod = np.concatenate([r["input_ids"] == EOS for r in batch])
        is_start = np.zeros(n + 1, dtype=np.bool_)
        is_start[::s] = True  # a row starts a document
        is_start[np.flatnonzero(eod) + 1] = True  # so does the token after each EOS
        starts = np.flatnonzero(is_start[:n])
        lengths = np.diff(starts, append=n)
        sizes = (n * 4, n * 8, n * 4, (len(starts) + 1) * 4)  # input_ids, position_ids, loss_mask, cu_seqlens
        buf = shared_buffer(sum(sizes))
        raw, at, views = buf.numpy(), 0, []
        for size, dtype in zip(sizes, ("int32", "int64", "float32", "int32"), strict=False):
            views.append((buf[at : at + size].view(getattr(torch, dtype)), raw[at : at + size].view(dtype)))
            at += size
        (t_ids, v_ids), (t_pos, v_pos), (t_loss, v_loss), (t_cu, v_cu) = views
        np.stack([r["input_ids"] for r in batch], out=v_ids.reshape(len(batch), s))
        np.subtract(self.arange[:n], np.repeat(starts, lengths), out=v_pos)  # reset_position_ids
        np.logical_not(eod, out=v_loss, casting="unsafe")  # eod_mask_loss: 0 at EOS, else 1
        v_cu[:-1] = starts
        v_cu[-1] = n
        return {
            "input_ids": t_ids.view(len(batch), s),
            "position_ids": t_pos.view(len(batch), s),
            "loss_mask": t_loss.view(len(batch), s),
            "cu_seqlens": t_cu,
            "max_seqlen": int(lengths.max()),
        }


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


def cpu_seconds(loader: Any) -> float:
    """CPU time so far of this process (every thread) and the loader's persistent workers."""
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for w in getattr(getattr(loader, "_iterator", None), "_workers", None) or ():
        try:
            with open(f"/proc/{w.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packed-records", type=int, default=256, help="65,536-token records (default %(default)s)")
    parser.add_argument("--shard-records", type=int, default=64, help="records per shard (default %(default)s)")
    parser.add_argument("--max-rows", type=int, default=8192, help="rows per range at most (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="epochs per measurement (default %(default)s)")
    parser.add_argument("--unpack-batch", type=int, default=32, help="ranges per unpack batch (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    args, _ = parser.parse_known_args(argv)  # bench/run.py passes every benchmark the same options

    t0 = time.perf_counter()
    vault, request = publish(args.packed_records, args.shard_records, args.seed, args.max_rows)
    gate = {}
    for name, req in (("without the ledger", request.model_copy(update={"sidecars": {}})), ("with it", request)):
        t, c = time.perf_counter(), time.process_time()
        approved = vault.approve_dataset(req)
        gate[name] = (time.perf_counter() - t, time.process_time() - c)
    unpack = approved.component_range_materializer("train", max_rows=args.max_rows)
    group = approved.component_range_materializer("train", mode="group", max_rows=args.max_rows)
    tokens = args.packed_records * TOKENS
    print(
        f"publication: {args.packed_records} packed records, {tokens / 1e6:,.1f} M tokens "
        f"({time.perf_counter() - t0:.1f} s to build the chain and ledger and approve)"
    )
    print(unpack.describe())
    print(
        "approval (the gate checks every range's sha256 once, in the pass that hashes the shards): "
        + ", ".join(f"{name} {w:.2f} s wall, {c:.2f} s CPU" for name, (w, c) in gate.items())
    )

    floor = FloorCollate(vault, ledger_uri(f"{DATA}/ds/data-manifest-v1.json", "train"))
    modes = {
        "plain": (None, 4, pack_plain),
        "floor": (None, 4, floor),
        "peer": (None, 4, PeerCollate()),
        "unpack": (unpack, args.unpack_batch, collate_sequences),
        "group": (group, 4, collate_sequences),
    }
    results: dict[tuple[str, int], float] = {}
    cpu_s: dict[tuple[str, int], float] = {}  # CPU seconds an epoch, workers included
    busy_s: dict[tuple[str, int], float] = {}  # share of the machine's cores busy during an epoch
    for workers in (0, 2):
        loaders = {}
        for name, (m, batch, collate) in modes.items():
            dl_args: dict[str, Any] = {"batch_size": batch, "num_workers": workers}
            if workers:
                dl_args["persistent_workers"] = True
            loaders[name] = approved.loader_factory(collate_fn=collate, dataloader_args=dl_args, materializer=m).load(
                "train"
            )
            epoch(loaders[name])  # warm-up: imports, workers, page cache
        times: dict[str, list[float]] = {name: [] for name in modes}
        cpu: dict[str, list[float]] = {name: [] for name in modes}  # this process and its workers
        busy: dict[str, list[float]] = {name: [] for name in modes}  # the whole machine's cores
        names = list(modes)
        for i in range(args.repeats):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                t, c, j = time.perf_counter(), cpu_seconds(loaders[name]), machine_jiffies()
                epoch(loaders[name])
                times[name].append(time.perf_counter() - t)
                cpu[name].append(cpu_seconds(loaders[name]) - c)
                if j is not None and (k := machine_jiffies()) is not None and k[1] > j[1]:
                    busy[name].append((k[0] - j[0]) / (k[1] - j[1]))
        for name in modes:
            results[(name, workers)] = tokens / statistics.median(times[name])
            cpu_s[(name, workers)] = statistics.median(cpu[name])
            if busy[name]:
                busy_s[(name, workers)] = statistics.median(busy[name])
        del loaders
    report(results, cpu_s, busy_s, list(modes))


def report(
    results: dict[tuple[str, int], float],
    cpu_s: dict[tuple[str, int], float],
    busy_s: dict[tuple[str, int], float],
    modes: list[str],
) -> None:
    """Tokens/s, CPU an epoch and the ratios to plain, floor and peer; the goals are checked on the last two."""
    for workers in (0, 2):
        print(f"num_workers={workers}:")
        base = {name: results[(name, workers)] for name in ("plain", "floor", "peer")}
        for name in modes:
            tps = results[(name, workers)]
            line = f"  {name:6s}: {tps / 1e6:7.1f} M tokens/s, {cpu_s[(name, workers)] * 1e3:5.0f} ms CPU an epoch"
            if (name, workers) in busy_s:
                line += f", cores {busy_s[(name, workers)]:4.0%} busy"
            print(line)
            if name not in ("unpack", "group"):
                continue
            # Wall-clock ratios, and the same per CPU second (other jobs on a shared machine stretch wall time).
            for what, mine, ref in (
                ("wall", tps, base),
                ("CPU", 1 / cpu_s[(name, workers)], {b: 1 / cpu_s[(b, workers)] for b in base}),
            ):
                ratios = {b: mine / ref[b] for b in ref}
                met = ratios["floor"] >= 0.90 and ratios["peer"] >= 1.0
                print(
                    f"      by {what:4s}: "
                    + "  ".join(f"/{b} {r:.2f}" for b, r in ratios.items())
                    + "   goal (>= 0.90 floor, >= 1.0 peer) "
                    + ("met" if met else "NOT met")
                )


if __name__ == "__main__":
    sys.exit(main())
