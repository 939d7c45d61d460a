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
- unpack: ``materializer=approved.component_range_materializer("train")``, batch 32
  ranges packed varlen (flat ``input_ids``, ``position_ids``, ``loss_mask``, flat
  ``target_row_indices``, ``cu_seqlens``);
- group: ``mode="group"``, batch 4 packed records, packed the same way.

Tokens/s counts the packed records' tokens read per wall-clock second (the same tokens in
every mode, so the ratios compare like with like); the materialised modes also emit one
predecessor row per mid-component range. Goal: each mode >= 85% of plain. Workers are
persistent, warmed by one epoch first. Medians of `--repeats` epochs, round-robin.

    .venv/bin/python bench/components.py --packed-records 256
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from chain import approval_request  # bench/ is the script folder, first on sys.path
from trainvault import TrainVault
from trainvault.approval import ApprovalRequest
from trainvault.components import Frame, split_frame

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
    shutil.rmtree(DATA, ignore_errors=True)
    vault = TrainVault()
    root = str(DATA)
    manifest_uri = f"{root}/ds/data-manifest-v1.json"
    saver = vault.dataset_saver(manifest_uri)
    for i, start in enumerate(range(0, records, shard_records)):
        saver.save("train", None, packed_records(min(shard_records, records - start), seed, start), shard_id=f"{i:05d}")
    saver.commit_manifest()

    def declare(record: dict[str, Any]) -> list[Frame]:
        return [split_frame(Frame(cid, s, e, cs), max_rows) for cid, s, e, cs in record["frames"]]

    ledger = vault.build_component_ledger(manifest_uri, split="train", declare=declare)
    request = approval_request(vault, root, manifest_uri, sidecars=ledger.sidecars())
    return vault, request


def _output(count: int, dtype: Any) -> tuple[Any, Any]:
    """A fresh 1-D tensor of `count` elements and its numpy view. In a DataLoader worker it is
    allocated in shared memory, as torch's default_collate does, so handing it to the main
    process does not copy it again (both collates do this in a worker: like for like)."""
    import torch
    import torch.utils.data

    if torch.utils.data.get_worker_info() is None:
        view = np.empty(count, dtype=dtype)
        return torch.from_numpy(view), view
    elem = torch.from_numpy(np.empty(0, dtype=dtype))
    out = elem.new(elem._typed_storage()._new_shared(count, device=elem.device)).resize_(count)
    return out, out.numpy()


def pack_plain(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Packed records as a trainer takes them: one [batch, 65536] tensor."""
    import torch
    import torch.utils.data

    ids = [r["input_ids"] for r in batch]
    if torch.utils.data.get_worker_info() is None:
        return {"input_ids": torch.from_numpy(np.stack(ids))}
    out, view = _output(sum(len(a) for a in ids), np.int32)
    np.stack(ids, out=view.reshape(len(ids), -1))
    return {"input_ids": out.view(len(ids), -1)}


def pack_sequences(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Isolated sequences as a varlen trainer takes them: flat tensors plus cu_seqlens, targets
    as flat row indices (a group batch is flattened first). Each tensor is written once, in place."""
    seqs = [s for r in batch for s in r.get("component_sequences", (r,))]
    lengths = np.fromiter((len(s["input_ids"]) for s in seqs), dtype=np.int64, count=len(seqs))
    starts = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    rows = int(starts[-1])
    ids, ids_v = _output(rows, np.int32)
    pos, pos_v = _output(rows, np.int32)
    loss, loss_v = _output(rows, np.bool_)
    np.concatenate([s["input_ids"] for s in seqs], out=ids_v)
    np.concatenate([s["position_ids"] for s in seqs], out=pos_v)
    np.concatenate([s["loss_mask"] for s in seqs], out=loss_v)
    tgts = [s["target_row_indices"] for s in seqs]
    targets, tgt_v = _output(sum(len(t) for t in tgts), np.int64)
    at = 0
    for t, o in zip(tgts, starts[:-1].tolist()):
        np.add(t, o, out=tgt_v[at : at + len(t)])  # flat row index: the sequence's start plus its row
        at += len(t)
    cu, cu_v = _output(len(starts), np.int32)
    cu_v[:] = starts
    return {"input_ids": ids, "position_ids": pos, "loss_mask": loss, "target_row_indices": targets, "cu_seqlens": cu}


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

    modes = {"plain": (None, 4, pack_plain), "unpack": (unpack, 32, pack_sequences), "group": (group, 4, pack_sequences)}
    results: dict[tuple[str, int], float] = {}
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
        names = list(modes)
        for i in range(args.repeats):
            for name in names[i % len(names):] + names[: i % len(names)]:
                t = time.perf_counter()
                epoch(loaders[name])
                times[name].append(time.perf_counter() - t)
        for name in modes:
            results[(name, workers)] = tokens / statistics.median(times[name])
        del loaders
    for workers in (0, 2):
        plain = results[("plain", workers)]
        print(f"num_workers={workers}:")
        for name in modes:
            tps = results[(name, workers)]
            print(f"  {name:6s}: {tps / 1e6:8.1f} M tokens/s" + ("" if name == "plain" else f"   ratio {name}/plain {tps / plain:.2f} (goal >= 0.85)"))


if __name__ == "__main__":
    sys.exit(main())
