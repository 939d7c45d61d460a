"""Loader benchmark: trainvault's `load` against the raw decode limit and peer loaders.

One run, one corpus (bench/corpus.py), every reader handed the same records in batches of
`--batch-size`, collated the way a trainer does (tokens packed into one int32 tensor with
offsets, texts as a list):

- trainvault `ungated_loader_factory(...).load("train")` with num_workers 0 and 2, per format;
- the raw decode limit: read each msgpack.zst shard file, then zstd + msgpack decode every
  block (tokens via np.frombuffer) in one loop: no verification, batching or DataLoader;
- LitData, MosaicML Streaming and WebDataset reading the same records in their native
  formats under a torch DataLoader (WebDataset batches in its pipeline, its usual way);
  a peer whose package is missing is skipped with the reason;
- trainvault resume: time to the first batch after `load_state_dict` at 0% and 90%;
- trainvault `batch_format="columns"` (msgpack.zst and Parquet): the loader's own columnar
  batch (tokens flat with int64 offsets, texts a list), no collate of ours; its rows are
  compared with the record rows and LitData in the same run;
- trainvault msgpack.zst with an identity collate (batches stay lists of records, as the
  raw loop's records do): the fair row for the "% of raw decode limit" goal (>= 85%);
- the raw parquet row path: every row group of the parquet shards read with pyarrow and
  turned into rows (`to_pylist`), unverified: the limit the parquet rows are held to;
- the S3 legs (bench/loader_s3.py) unless `--no-s3`: the same data on a moto server on
  loopback, throughput against the local folder, GETs per block run, and `--s3-readers`
  concurrent reader processes;
- the observability overhead: the loader's own timing calls per step, timed, as a share
  of the step time.

Every measurement runs in a fresh process that checks the record count and token sum.
rec/s counts from building the loader to the last batch; MB/s is raw payload (id + UTF-8
text + 4 B per token) per second; TTFB is the time to the first batch. Peak RSS: the
measuring process's VmHWM, and the largest VmHWM among its worker processes.

    .venv-bench/bin/python bench/loader.py --records 200000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus
import loader_s3
import saver as peer_writers
from loader_limits import overhead_child, raw_limit_child, raw_parquet_child, records_batch, vm_hwm_mb

os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # no network here

DATA = Path(__file__).resolve().parent / ".data" / "loader"
FORMATS = ("msgpack.zst", "jsonl.gz", "parquet")


def collate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens into one int32 tensor (packed, with sequence offsets, as varlen attention
    takes them), texts as a list: what a trainer's collate does."""
    import numpy as np
    import torch

    tokens = [r["tokens"] for r in records]
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in tokens], out=offsets[1:])
    return {
        "tokens": torch.from_numpy(np.concatenate(tokens)),
        "offsets": torch.from_numpy(offsets),
        "text": [r["text"] for r in records],
    }


def _descendants() -> list[int]:
    """Child and grandchild pids (DataLoader workers, possibly under a forkserver)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    me = os.getpid()
    kids = [p for p, pp in parents.items() if pp == me]
    return kids + [p for p, pp in parents.items() if pp in kids]


# -- writers ------------------------------------------------------------------------


def write_trainvault(records: list[dict[str, Any]], shards: list[tuple[int, int]], out: Path, fmt: str) -> None:
    from trainvault import TrainVault

    saver = TrainVault().dataset_saver(str(out / "data-manifest-v1.json"), data_format=fmt)
    for n, (a, b) in enumerate(shards):
        saver.save("train", None, records[a:b], shard_id=f"{n:05d}")
    saver.commit_manifest()


def write_webdataset(records: list[dict[str, Any]], shards: list[tuple[int, int]], out: Path, shard_bytes: int) -> None:
    import webdataset as wds

    # mtime=0: the default float mtime adds a PAX header to every member (peers.md).
    with wds.ShardWriter(str(out / "shard-%05d.tar"), maxsize=shard_bytes, maxcount=10**9, mtime=0, verbose=0) as w:
        for r in records:
            w.write({"__key__": r["id"], "txt": r["text"].encode("utf-8"), "tok": r["tokens"].tobytes()})


def _wds_decode(sample: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    return {
        "id": sample["__key__"],
        "text": sample["txt"].decode("utf-8"),
        "tokens": np.frombuffer(sample["tok"], np.int32),
    }


# -- readers: each runs in a fresh child process ---------------------------------------


def _loader(kind: str, path: Any, workers: int, batch: int) -> Any:
    import torch.utils.data

    if kind.startswith("trainvault"):
        from trainvault import TrainVault

        manifest = path if path.startswith("s3:") else str(Path(path) / "data-manifest-v1.json")
        columns = kind.endswith("columns")
        sdl = TrainVault.from_env().ungated_loader_factory(
            manifest,
            collate_fn=None if columns else records_batch if kind.endswith("identity") else collate,
            dataloader_args={"batch_size": batch, "num_workers": workers},
            batch_format="columns" if columns else "records",
        )
        return sdl.load("train")
    path = Path(path)  # a peer's local folder
    if kind == "litdata":
        import litdata

        ds = litdata.StreamingDataset(str(path), cache_dir=str(path.parent / (path.name + "-cache")))
        return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=collate)
    if kind == "streaming":
        peer_writers._import_peer("streaming")  # stubs a broken torchvision
        from streaming import StreamingDataset

        for p in path.glob("*.mds"):  # local-only MDS decompresses beside the .zstd; make every run pay it
            p.unlink()
        ds = StreamingDataset(local=str(path), remote=None, batch_size=batch, predownload=2048)
        return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=collate)
    if kind == "webdataset":
        import webdataset as wds

        urls = sorted(str(p) for p in path.glob("*.tar"))
        ds = (
            wds.WebDataset(urls, shardshuffle=False, empty_check=False)
            .map(_wds_decode)
            .batched(batch, collation_fn=collate, partial=True)
        )
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    raise ValueError(kind)


def read_child(kind: str, path: str, workers: int, batch: int) -> None:
    """Read everything once; print records, token sum (identity collate: token count, as the
    raw loop counts), seconds, TTFB and peak RSS as JSON."""
    import torch

    import trainvault.loading.iterable
    import trainvault.loading.loader  # noqa: F401

    if kind != "trainvault" and not kind.startswith("trainvault"):
        peer_writers._import_peer(kind)

    gc.collect()
    t0 = time.perf_counter()
    loader = _loader(kind, path, workers, batch)
    n = tokens = 0
    ttfb = None
    worker_peak = 0.0
    identity = kind.endswith("identity")
    for i, b in enumerate(loader):
        if ttfb is None:
            ttfb = time.perf_counter() - t0
        if identity:  # counted as the raw loop counts: records and token lengths
            n += len(b)
            tokens += sum([len(r["tokens"]) for r in b])
        else:
            n += len(b["text"])
            tokens += int(b["tokens"].sum(dtype=torch.int64))
        if workers and i % 50 == 0:
            worker_peak = max([worker_peak] + [vm_hwm_mb(p) for p in _descendants()])
    took = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "records": n,
                "tokens": tokens,
                "seconds": took,
                "ttfb": ttfb,
                "rss": vm_hwm_mb(),
                "worker_rss": worker_peak,
            }
        )
    )


def resume_child(path: str, fraction: float, batch: int) -> None:
    """Time from load_state_dict to the first batch, resuming at `fraction` of the epoch."""
    from trainvault import TrainVault

    loader = (
        TrainVault()
        .ungated_loader_factory(
            str(Path(path) / "data-manifest-v1.json"), collate_fn=collate, dataloader_args={"batch_size": batch}
        )
        .load("train")
    )
    state = loader.state_dict()
    state["position"] = int(state["epoch_records"] * fraction) // batch * batch
    t0 = time.perf_counter()
    loader.load_state_dict(state)
    first = next(iter(loader))
    took = time.perf_counter() - t0
    print(json.dumps({"ttfb": took, "records": len(first["text"]), "position": state["position"]}))


def _child(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-600:])
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        what, *rest = sys.argv[2:]
        children = {
            "read": lambda: read_child(rest[0], rest[1], int(rest[2]), int(rest[3])),
            "resume": lambda: resume_child(rest[0], float(rest[1]), int(rest[2])),
            "raw": lambda: raw_limit_child(rest[0]),
            "raw-parquet": lambda: raw_parquet_child(rest[0]),
            "overhead": lambda: overhead_child(rest[0], int(rest[1])),
        }
        children[what]()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpus.add_corpus_args(parser)
    parser.add_argument("--repeats", type=int, default=2, help="runs per measurement; the median is shown")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shard-mb", type=float, default=64, help="raw payload per shard, MiB (peers: 64)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="trainvault formats to read")
    parser.add_argument("--workers", default="0,2", help="num_workers values")
    parser.add_argument("--peers", default="litdata,streaming,webdataset", help="peer loaders to read ('' for none)")
    parser.add_argument("--no-peers", action="store_true", help="skip LitData, MosaicML Streaming and WebDataset")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 legs")
    parser.add_argument("--s3-readers", type=int, default=32, help="concurrent reader processes in the S3 leg")
    parser.add_argument("--s3-reader-records", type=int, default=20000, help="records of the concurrency leg's dataset")
    parser.add_argument("--s3-timeout", type=float, default=900, help="seconds the concurrency leg may take")
    args = parser.parse_args(argv)
    peers = [] if args.no_peers else [p for p in args.peers.split(",") if p]

    t0 = time.perf_counter()
    records = corpus.make_records(args.records, seed=args.seed)
    raw_total = sum(corpus.raw_bytes(r) for r in records)
    expected = {
        "tokens": int(sum(int(r["tokens"].sum(dtype="int64")) for r in records)),
        "token_count": sum(len(r["tokens"]) for r in records),
    }
    shard_bytes = int(args.shard_mb * 2**20)
    shards = peer_writers.shard_slices(records, shard_bytes)
    print(
        f"corpus: {len(records):,} records, {raw_total / 1e6:.1f} MB raw payload, {len(shards)} shards, batch "
        f"{args.batch_size}, seed {args.seed}, made in {time.perf_counter() - t0:.1f} s (not timed)",
        flush=True,
    )
    shutil.rmtree(DATA, ignore_errors=True)
    readers, skipped = write_all(records, shards, args, peers, shard_bytes)
    server = (
        None
        if args.no_s3 or "trainvault msgpack.zst" not in readers
        else loader_s3.MotoServer(DATA.parent / "moto.log")
    )
    try:
        s3_uri = None
        if server is not None:
            s3_uri = loader_s3.upload(records, shards, server, "full")
            readers["trainvault msgpack.zst (S3)"] = ("trainvault", s3_uri)
        concurrent_data = records[: args.s3_reader_records]
        del records
        gc.collect()
        results, limits = measure(readers, skipped, args, expected, server)
        table(results, limits, skipped, args, raw_total)
        if "trainvault msgpack.zst" in readers:
            resume_and_overhead(readers["trainvault msgpack.zst"][1], args)
        if server is not None and s3_uri is not None:
            s3_legs(server, s3_uri, results, concurrent_data, args)
    finally:
        if server is not None:
            server.stop()
    shutil.rmtree(DATA, ignore_errors=True)


def write_all(
    records: list[dict[str, Any]], shards: list[tuple[int, int]], args: Any, peers: list[str], shard_bytes: int
) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Every dataset, written once (untimed here: bench/saver.py times writers)."""
    readers: dict[str, tuple[str, str]] = {}
    skipped: dict[str, str] = {}
    for fmt in [f for f in args.formats.split(",") if f]:
        out = DATA / f"trainvault-{fmt}"
        try:
            write_trainvault(records, shards, out, fmt)
            readers[f"trainvault {fmt}"] = (f"trainvault-{fmt}", str(out))
        except ImportError as exc:
            skipped[f"trainvault {fmt}"] = str(exc)
    for fmt in ("msgpack.zst", "parquet"):
        if f"trainvault {fmt}" in readers:
            readers[f"trainvault {fmt}, columns"] = ("trainvault-columns", readers[f"trainvault {fmt}"][1])
    if "trainvault msgpack.zst" in readers:
        readers["trainvault msgpack.zst, identity collate"] = (
            "trainvault-identity",
            readers["trainvault msgpack.zst"][1],
        )
    peer_writers.RECORDS = records
    for label in peers:
        why = peer_writers._import_peer(label)
        if why:
            skipped[label] = f"not installed or broken here ({why}); install bench/requirements.txt into .venv-bench"
            continue
        out = DATA / label
        out.mkdir(parents=True)
        try:
            if label == "litdata":
                peer_writers.litdata_writer(records, shards, out, shard_bytes)
            elif label == "streaming":
                peer_writers.mds_writer(records, shards, out, shard_bytes)
            else:
                write_webdataset(records, shards, out, shard_bytes)
            readers[label] = (label, str(out))
        except Exception as exc:
            skipped[label] = f"write failed: {type(exc).__name__}: {exc}".splitlines()[0][:200]
    return readers, skipped


def measure(
    readers: dict[str, tuple[str, str]], skipped: dict[str, str], args: Any, expected: dict[str, int], server: Any
) -> tuple[dict[tuple[str, int], list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """`--repeats` rounds over every reader and the raw limits, round-robin so load hits them alike."""
    workers = [int(w) for w in args.workers.split(",") if w]
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    limits: dict[str, list[dict[str, Any]]] = {"msgpack.zst": [], "parquet": []}
    for rep in range(args.repeats):
        if "trainvault msgpack.zst" in readers:
            limits["msgpack.zst"].append(_child("raw", str(readers["trainvault msgpack.zst"][1])))
        if "trainvault parquet" in readers:
            limits["parquet"].append(_child("raw-parquet", str(readers["trainvault parquet"][1])))
        for name, (kind, path) in readers.items():
            env = server.env() if server is not None and name.endswith("(S3)") else None
            for w in workers:
                try:
                    r = _child("read", kind, path, str(w), str(args.batch_size), env=env)
                except RuntimeError as exc:
                    skipped[f"{name} w={w}"] = f"failed: {str(exc).splitlines()[-1][:200]}"
                    continue
                want = expected["token_count" if kind.endswith("identity") else "tokens"]
                r["ok"] = r["records"] == args.records and r["tokens"] == want
                results.setdefault((name, w), []).append(r)
        print(f"  round {rep + 1}/{args.repeats} done", flush=True)
    return results, limits


def _med(rs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rs)


def table(
    results: dict[tuple[str, int], list[dict[str, Any]]],
    limits: dict[str, list[dict[str, Any]]],
    skipped: dict[str, str],
    args: Any,
    raw_total: int,
) -> None:
    rate = {k: args.records / _med(rs, "seconds") for k, rs in results.items()}
    limit = {fmt: args.records / _med(rs, "seconds") for fmt, rs in limits.items() if rs}
    print()
    print(
        "| reader | workers | rec/s | MB/s | TTFB s | % of raw limit (parquet: of the raw row path) | peak RSS MB (main / worker) | ok |"
    )
    print("|---|---|---|---|---|---|---|---|")
    names = {
        "msgpack.zst": "raw decode limit (zstd + msgpack, one loop)",
        "parquet": "raw parquet row path (pyarrow to_pylist, one loop)",
    }
    for fmt, value in limit.items():
        ok = "yes" if limits[fmt][0]["records"] == args.records else "NO"
        print(
            f"| {names[fmt]} | - | {value:,.0f} | {value * raw_total / args.records / 1e6:.1f} | - | 100% | {_med(limits[fmt], 'rss'):.0f} | {ok} |"
        )
    for (name, w), rs in results.items():
        base = limit.get("parquet" if "parquet" in name else "msgpack.zst")
        pct = f"{100 * rate[name, w] / base:.0f}%" if base and "gz" not in name else "-"
        worker = f"{max(r['worker_rss'] for r in rs):.0f}" if w else "-"
        ok = "yes" if all(r["ok"] for r in rs) else "NO"
        print(
            f"| {name} | {w} | {rate[name, w]:,.0f} | {rate[name, w] * raw_total / args.records / 1e6:.1f} | {_med(rs, 'ttfb'):.2f} | {pct} | {max(r['rss'] for r in rs):.0f} / {worker} | {ok} |"
        )
    for name, why in skipped.items():
        print(f"| {name} | skipped: {why} | | | | | | |")
    print()
    for name in ("trainvault msgpack.zst", "trainvault msgpack.zst, columns", "trainvault parquet, columns"):
        _ratios(rate, name, "litdata", "LitData")
    for fmt in ("msgpack.zst", "parquet"):
        _ratios(rate, f"trainvault {fmt}, columns", f"trainvault {fmt}", f"trainvault {fmt} records")


def _ratios(rate: dict[tuple[str, int], float], name: str, base: str, label: str) -> None:
    """One line of `name`'s rec/s over `base`'s, per worker count both ran with."""
    ratios = [f"{w} workers {rate[name, w] / rate[base, w]:.2f}x" for (b, w) in rate if b == base and (name, w) in rate]
    if ratios:
        print(f"{name} / {label}, the trainer's batch (tokens + offsets, texts): {', '.join(ratios)}")


def resume_and_overhead(path: str, args: Any) -> None:
    print()
    print("| trainvault resume (msgpack.zst, num_workers=0) | time to first batch s (median) | runs |")
    print("|---|---|---|")
    for fraction in (0.0, 0.9):
        runs = [
            _child("resume", path, str(fraction), str(args.batch_size))["ttfb"] for _ in range(max(args.repeats, 3))
        ]
        print(
            f"| at {fraction:.0%} of the epoch | {statistics.median(runs):.3f} | {', '.join(f'{t:.3f}' for t in runs)} |"
        )
    runs = [_child("overhead", path, str(args.batch_size)) for _ in range(args.repeats)]
    share = statistics.median(r["share"] for r in runs)
    r = runs[0]
    print(
        f"\nobservability overhead (figures always on; 0 workers, identity collate): {r['steps']:,} steps and "
        f"{r['blocks']:,} blocks cost {1e3 * statistics.median(x['cost'] for x in runs):.1f} ms of timing calls = "
        f"{100 * share:.2f}% of the epoch's {statistics.median(x['seconds'] for x in runs):.2f} s (median of {len(runs)})"
    )


def s3_legs(
    server: Any,
    uri: str,
    results: dict[tuple[str, int], list[dict[str, Any]]],
    concurrent_data: list[dict[str, Any]],
    args: Any,
) -> None:
    rows = []
    for (name, w), rs in results.items():
        if name == "trainvault msgpack.zst (S3)" and ("trainvault msgpack.zst", w) in results:
            local = results["trainvault msgpack.zst", w]
            rows.append(
                (
                    f"S3 / local folder throughput, {w} workers",
                    f"{_med(local, 'seconds') / _med(rs, 'seconds'):.2f} (goal >= 0.8)",
                )
            )
    since = len(server.requests())
    _child("read", "trainvault", uri, "0", str(args.batch_size), env=server.env())
    blocks, runs = loader_s3.block_runs(uri, server.env())
    gets = loader_s3.data_gets(server, since, "full")
    rows.append(
        (
            "data GETs / block runs / blocks (one epoch, 0 workers)",
            f"{gets} / {runs} / {blocks}: {gets / runs:.2f} GETs per block run (goal <= 1)",
        )
    )
    legs: dict[str, Any] = {}
    if args.s3_readers:
        small = loader_s3.upload(
            concurrent_data, peer_writers.shard_slices(concurrent_data, 4 << 20), server, "readers"
        )
        legs["readers"] = loader_s3.concurrent_readers(
            small, server, args.s3_readers, args.batch_size, [r["id"] for r in concurrent_data], args.s3_timeout
        )
    loader_s3.report(rows, legs)


if __name__ == "__main__":
    main()
