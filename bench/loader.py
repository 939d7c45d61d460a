"""Loader benchmark: trainvault's `load` against the raw decode limit and peer loaders.

One run, one corpus (bench/corpus.py), every reader handed the same records in batches of
`--batch-size`, collated the way a trainer does (tokens packed into one int32 tensor with
offsets, texts as a list):

- trainvault `split_data_loader(...).load("train")` with num_workers 0 and 2, per format;
- the raw decode limit: read each msgpack.zst shard file, then zstd + msgpack decode every
  block (tokens via np.frombuffer) in one loop: no verification, batching or DataLoader;
- LitData, MosaicML Streaming and WebDataset reading the same records in their native
  formats under a torch DataLoader (WebDataset batches in its pipeline, its usual way);
  a peer whose package is missing is skipped with the reason;
- trainvault resume: time to the first batch after `load_state_dict` at 0% and 90%.

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
import corpus  # noqa: E402
import saver as peer_writers  # noqa: E402  (LitData and MDS writers, peer imports, shard cuts)

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


def _vm_hwm_mb(pid: int | str = "self") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


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

    return {"id": sample["__key__"], "text": sample["txt"].decode("utf-8"), "tokens": np.frombuffer(sample["tok"], np.int32)}


# -- readers: each runs in a fresh child process ---------------------------------------


def _loader(kind: str, path: Path, workers: int, batch: int) -> Any:
    import torch.utils.data

    if kind.startswith("trainvault"):
        from trainvault import TrainVault

        sdl = TrainVault().split_data_loader(
            str(path / "data-manifest-v1.json"), collate_fn=collate, dataloader_args={"batch_size": batch, "num_workers": workers}
        )
        return sdl.load("train")
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
        ds = wds.WebDataset(urls, shardshuffle=False, empty_check=False).map(_wds_decode).batched(
            batch, collation_fn=collate, partial=True
        )
        return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    raise ValueError(kind)


def read_child(kind: str, path: str, workers: int, batch: int) -> None:
    """Read everything once; print records, token sum, seconds, TTFB and peak RSS as JSON."""
    import torch  # noqa: F401  (imports happen before the clock: they are no reader's work)

    import trainvault.loading.iterable  # noqa: F401
    import trainvault.loading.loader  # noqa: F401

    if kind != "trainvault" and not kind.startswith("trainvault"):
        peer_writers._import_peer(kind)

    gc.collect()
    t0 = time.perf_counter()
    loader = _loader(kind, Path(path), workers, batch)
    n = tokens = 0
    ttfb = None
    worker_peak = 0.0
    for i, b in enumerate(loader):
        if ttfb is None:
            ttfb = time.perf_counter() - t0
        n += len(b["text"])
        tokens += int(b["tokens"].sum(dtype=torch.int64))
        if workers and i % 50 == 0:
            worker_peak = max([worker_peak] + [_vm_hwm_mb(p) for p in _descendants()])
    took = time.perf_counter() - t0
    print(json.dumps({"records": n, "tokens": tokens, "seconds": took, "ttfb": ttfb, "rss": _vm_hwm_mb(), "worker_rss": worker_peak}))


def resume_child(path: str, fraction: float, batch: int) -> None:
    """Time from load_state_dict to the first batch, resuming at `fraction` of the epoch."""
    from trainvault import TrainVault

    loader = TrainVault().split_data_loader(
        str(Path(path) / "data-manifest-v1.json"), collate_fn=collate, dataloader_args={"batch_size": batch}
    ).load("train")
    state = loader.state_dict()
    state["position"] = int(state["epoch_records"] * fraction) // batch * batch
    t0 = time.perf_counter()
    loader.load_state_dict(state)
    first = next(iter(loader))
    took = time.perf_counter() - t0
    print(json.dumps({"ttfb": took, "records": len(first["text"]), "position": state["position"]}))


def raw_limit_child(path: str) -> None:
    """zstd + msgpack decode of every block of the msgpack.zst shards, in one loop."""
    import msgpack
    import numpy as np
    import zstandard

    from trainvault.manifest import DataManifest, ShardDescriptor

    root = Path(path)
    manifest = DataManifest.from_json_bytes((root / "data-manifest-v1.json").read_bytes())
    shards = manifest.splits["train"].shards

    def local(uri: str) -> Path:
        return Path("/" + uri.split(":", 1)[1].lstrip("/")) if ":" in uri else root / uri

    descs = [ShardDescriptor.from_json_bytes(local(s.descriptor_uri).read_bytes()) for s in shards]
    int32 = np.dtype(np.int32)

    def ext(code: int, data: bytes) -> Any:
        # The corpus's int32 token arrays have an 8- or 9-byte header ([dtype, [uint8 or
        # uint16 length]]), told apart by the length modulo 4: the cheapest correct decode.
        return np.frombuffer(data, int32, offset=8 + len(data) % 4)

    dctx = zstandard.ZstdDecompressor()
    gc.collect()
    t0 = time.perf_counter()
    n = tokens = 0
    for s, d in zip(shards, descs):
        data = local(s.uri).read_bytes()
        for b in d.blocks:
            unpacker = msgpack.Unpacker(raw=False, ext_hook=ext, max_buffer_size=1 << 26)
            unpacker.feed(dctx.decompress(data[b.offset : b.offset + b.length]))
            for r in unpacker:
                n += 1
                tokens += len(r["tokens"])
    took = time.perf_counter() - t0
    print(json.dumps({"records": n, "tokens": -1, "token_count": tokens, "seconds": took, "ttfb": None, "rss": _vm_hwm_mb(), "worker_rss": 0.0}))


def _child(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-600:])
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- main ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        what, *rest = sys.argv[2:]
        if what == "read":
            read_child(rest[0], rest[1], int(rest[2]), int(rest[3]))
        elif what == "resume":
            resume_child(rest[0], float(rest[1]), int(rest[2]))
        else:
            raw_limit_child(rest[0])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpus.add_corpus_args(parser)
    parser.add_argument("--repeats", type=int, default=2, help="runs per measurement; the median is shown")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shard-mb", type=float, default=64, help="raw payload per shard, MiB (peers: 64)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="trainvault formats to read")
    parser.add_argument("--workers", default="0,2", help="num_workers values")
    parser.add_argument("--no-peers", action="store_true", help="skip LitData, MosaicML Streaming and WebDataset")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    records = corpus.make_records(args.records, seed=args.seed)
    raw_total = sum(corpus.raw_bytes(r) for r in records)
    token_sum = int(sum(int(r["tokens"].sum(dtype="int64")) for r in records))
    shard_bytes = int(args.shard_mb * 2**20)
    shards = peer_writers.shard_slices(records, shard_bytes)
    print(
        f"corpus: {len(records):,} records, {raw_total / 1e6:.1f} MB raw payload, {len(shards)} shards, batch "
        f"{args.batch_size}, seed {args.seed}, made in {time.perf_counter() - t0:.1f} s (not timed)",
        flush=True,
    )

    # Write every dataset once (untimed here: bench/saver.py times writers).
    shutil.rmtree(DATA, ignore_errors=True)
    readers: dict[str, tuple[str, Path]] = {}
    skipped: dict[str, str] = {}
    for fmt in [f for f in args.formats.split(",") if f]:
        out = DATA / f"trainvault-{fmt}"
        try:
            write_trainvault(records, shards, out, fmt)
            readers[f"trainvault {fmt}"] = (f"trainvault-{fmt}", out)
        except ImportError as exc:
            skipped[f"trainvault {fmt}"] = str(exc)
    peer_writers.RECORDS = records
    if not args.no_peers:
        for label, module in (("litdata", "litdata"), ("streaming", "streaming"), ("webdataset", "webdataset")):
            why = peer_writers._import_peer(module)
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
                readers[label] = (label, out)
            except Exception as exc:
                skipped[label] = f"write failed: {type(exc).__name__}: {exc}".splitlines()[0][:200]
    del records
    gc.collect()

    workers = [int(w) for w in args.workers.split(",") if w]
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    raw: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        if "trainvault msgpack.zst" in readers:
            raw.append(_child("raw", str(readers["trainvault msgpack.zst"][1])))
        for name, (kind, path) in readers.items():
            for w in workers:
                if (name, w) in skipped:
                    continue
                try:
                    r = _child("read", kind, str(path), str(w), str(args.batch_size))
                except RuntimeError as exc:
                    skipped[f"{name} w={w}"] = f"failed: {str(exc).splitlines()[-1][:200]}"
                    continue
                r["ok"] = r["records"] == args.records and r["tokens"] == token_sum
                results.setdefault((name, w), []).append(r)
        print(f"  round {rep + 1}/{args.repeats} done", flush=True)

    def med(rs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rs)

    limit = args.records / med(raw, "seconds") if raw else None
    print()
    print("| reader | workers | rec/s | MB/s | TTFB s | % of raw decode limit | peak RSS MB (main / worker) | ok |")
    print("|---|---|---|---|---|---|---|---|")
    if limit:
        print(f"| raw decode limit (zstd + msgpack, one loop) | – | {limit:,.0f} | {limit * raw_total / args.records / 1e6:.1f} | – | 100% | {med(raw, 'rss'):.0f} | {'yes' if raw[0]['records'] == args.records else 'NO'} |")
    for (name, w), rs in results.items():
        rate = args.records / med(rs, "seconds")
        pct = f"{100 * rate / limit:.0f}%" if limit else "–"
        worker = f"{max(r['worker_rss'] for r in rs):.0f}" if w else "–"
        ok = "yes" if all(r["ok"] for r in rs) else "NO"
        print(f"| {name} | {w} | {rate:,.0f} | {rate * raw_total / args.records / 1e6:.1f} | {med(rs, 'ttfb'):.2f} | {pct} | {max(r['rss'] for r in rs):.0f} / {worker} | {ok} |")
    for name, why in skipped.items():
        print(f"| {name} | skipped: {why} | | | | | | |")

    if "trainvault msgpack.zst" in readers:
        path = str(readers["trainvault msgpack.zst"][1])
        print()
        print("| trainvault resume (msgpack.zst, num_workers=0) | time to first batch s (median) | runs |")
        print("|---|---|---|")
        for fraction in (0.0, 0.9):
            runs = [_child("resume", path, str(fraction), str(args.batch_size))["ttfb"] for _ in range(max(args.repeats, 3))]
            print(f"| at {fraction:.0%} of the epoch | {statistics.median(runs):.3f} | {', '.join(f'{t:.3f}' for t in runs)} |")
    shutil.rmtree(DATA, ignore_errors=True)


if __name__ == "__main__":
    main()
