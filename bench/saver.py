"""Saver benchmark: trainvault's saver against the raw encode limit and peer writers.

One run, one in-memory corpus (bench/corpus.py), every writer fed the same records:

- trainvault `DatasetSaver` per format (msgpack.zst, jsonl.gz, parquet) into a local
  folder, shards of `--shard-mb` MiB of raw payload, manifest committed;
- the raw encode limit: msgpack pack + zstd level 3 + SHA-256 of the same records in one
  loop with no storage, producing the very bytes the msgpack.zst saver stores;
- LitData `optimize` and MosaicML Streaming `MDSWriter`, zstd level 3, shards of the same
  uncompressed size;
- peak RSS of the saver (VmHWM, a fresh subprocess per measurement) streaming a
  dataset of N fixed-size shards for two values of N.

MB/s is raw payload (id + UTF-8 text + 4 B per token) per second, as in
shared/guides/peers.md. Each throughput is the median of `--repeats` runs; the runs go
round-robin over the writers so that load from other jobs hits them alike.

    .venv-bench/bin/python bench/saver.py --records 100000
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.machinery
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # no network here

FORMATS = ("msgpack.zst", "jsonl.gz", "parquet")
DATA = Path(__file__).resolve().parent / ".data" / "saver"

# Set before any writer runs; LitData's forked worker reads records from here.
RECORDS: list[dict[str, Any]] = []


def _vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def shard_slices(records: list[dict[str, Any]], shard_bytes: int) -> list[tuple[int, int]]:
    """Cut `records` into shards of `shard_bytes` raw payload, as the peers' size limits do."""
    out, start, acc = [], 0, 0
    for i, r in enumerate(records):
        acc += corpus.raw_bytes(r)
        if acc >= shard_bytes:
            out.append((start, i + 1))
            start, acc = i + 1, 0
    if start < len(records):
        out.append((start, len(records)))
    return out


# -- writers: each takes (records, shards, out dir) and returns a note -------------


def trainvault_writer(data_format: str) -> Callable[..., str]:
    def write(records: list[dict[str, Any]], shards: list[tuple[int, int]], out: Path) -> str:
        from trainvault import TrainVault

        saver = TrainVault().dataset_saver(str(out / "data-manifest-v1.json"), data_format=data_format)
        for n, (a, b) in enumerate(shards):
            saver.save("train", None, records[a:b], shard_id=f"{n:05d}")
        manifest = saver.commit_manifest().document
        return manifest.splits["train"].shards[0].sha256

    return write


def raw_limit(records: list[dict[str, Any]], shards: list[tuple[int, int]], out: Path) -> str:
    """msgpack pack + zstd 3 + SHA-256 per block and per shard, in one loop, no storage.

    Same packer settings, ndarray extension and block cut as the msgpack.zst format, so
    its first shard digest must equal the saver's.
    """
    import msgpack
    import zstandard

    from trainvault.formats.blocks import DEFAULT_BLOCK_BYTES

    def default(a: Any) -> Any:
        return msgpack.ExtType(1, msgpack.packb([a.dtype.str, list(a.shape)]) + a.tobytes())

    packer = msgpack.Packer(default=default, use_bin_type=True)
    cctx = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=False)
    first = ""
    for a, b in shards:
        whole = hashlib.sha256()
        buf = bytearray()
        for r in records[a:b]:
            buf += packer.pack(r)
            if len(buf) >= DEFAULT_BLOCK_BYTES:
                block = cctx.compress(buf)
                hashlib.sha256(block).digest()
                whole.update(block)
                buf.clear()
        if buf:
            block = cctx.compress(buf)
            hashlib.sha256(block).digest()
            whole.update(block)
        first = first or whole.hexdigest()
    return first


def _litdata_item(index: int) -> dict[str, Any]:
    return RECORDS[index]


def litdata_writer(records: list[dict[str, Any]], shards: list[tuple[int, int]], out: Path, shard_bytes: int) -> str:
    from litdata import optimize

    # fork: the worker inherits RECORDS instead of regenerating or unpickling them;
    # num_workers=1 matches the single-process writers (it still starts one process).
    optimize(
        fn=_litdata_item,
        inputs=list(range(len(records))),
        output_dir=str(out),
        chunk_bytes=shard_bytes,
        compression="zstd:3",
        num_workers=1,
        start_method="fork",
        verbose=False,
    )
    return ""


def mds_writer(records: list[dict[str, Any]], shards: list[tuple[int, int]], out: Path, shard_bytes: int) -> str:
    from streaming import MDSWriter

    columns = {"id": "str", "text": "str", "tokens": "ndarray:int32"}
    with MDSWriter(out=str(out), columns=columns, compression="zstd:3", size_limit=shard_bytes) as writer:
        for r in records:
            writer.write(r)
    return ""


def _placeholder(module: str) -> Callable[[str], type]:
    def attr(name: str) -> type:
        if name.startswith("__"):  # dunders stay missing, as on a real module
            raise AttributeError(name)
        return type(name, (), {"__module__": module})

    return attr


def _stub_torchvision() -> None:
    """Replace torchvision by empty modules whose every attribute is a placeholder class."""
    for mod in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[mod]
    for mod in ("torchvision", "torchvision.datasets", "torchvision.transforms", "torchvision.transforms.functional"):
        stub = types.ModuleType(mod)
        stub.__spec__ = importlib.machinery.ModuleSpec(mod, None, is_package=True)  # find_spec callers need one
        stub.__path__ = []
        stub.__getattr__ = _placeholder(mod)
        sys.modules[mod] = stub


def _import_peer(name: str) -> str | None:
    """None when the peer imports, else why it cannot run."""
    try:
        if name == "streaming":
            try:
                import torchvision  # noqa: F401
            except Exception:
                # PyPI's torchvision is a CUDA build that fails beside CPU torch; streaming
                # imports it only for its vision datasets, which MDSWriter never touches.
                _stub_torchvision()
            import streaming  # noqa: F401
        else:
            __import__(name)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    return None


# -- peak RSS: one subprocess per measurement ------------------------------------


def rss_child(data_format: str, shards: int, shard_records: int, seed: int, out: str) -> None:
    """Stream `shards` shards of generated records through the saver; print VmHWM as JSON."""
    from trainvault import TrainVault

    saver = TrainVault().dataset_saver(out + "/data-manifest-v1.json", data_format=data_format)
    # Warm the imports (pyarrow for parquet), the vocabulary and one chunk of records
    # before the baseline, so the peak above it is the saver's own.
    from trainvault.formats import get_format
    from trainvault.formats.blocks import encode_shard

    encode_shard(get_format(data_format), corpus.iter_records(2, seed=seed))
    baseline = _vm_hwm_mb()
    size = 0
    for n in range(shards):
        entry = saver.save(
            "train", None, corpus.iter_records(shard_records, seed=seed, start=n * shard_records), shard_id=f"{n:05d}"
        )
        size = max(size, entry.size_bytes)
    saver.commit_manifest()
    print(json.dumps({"baseline_mb": baseline, "peak_mb": _vm_hwm_mb(), "shard_mb": size / 2**20}))


def measure_rss(data_format: str, shards: int, shard_records: int, seed: int) -> dict[str, float]:
    out = DATA / f"rss-{data_format}-{shards}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, __file__, "--rss-child", data_format, str(shards), str(shard_records), str(seed), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"rss child failed: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- main ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--rss-child":
        fmt, shards, shard_records, seed, out = sys.argv[2:7]
        rss_child(fmt, int(shards), int(shard_records), int(seed), out)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    corpus.add_corpus_args(parser)
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is shown")
    parser.add_argument("--shard-mb", type=float, default=64, help="raw payload per shard, MiB (peers: 64)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="trainvault formats to time")
    parser.add_argument("--no-peers", action="store_true", help="skip LitData and MosaicML Streaming")
    parser.add_argument("--rss-shard-records", type=int, default=8000, help="records per shard in the RSS runs")
    parser.add_argument("--rss-shards", default="2,8", help="dataset sizes (in shards) for the RSS runs; empty: skip")
    args = parser.parse_args(argv)

    global RECORDS
    t0 = time.perf_counter()
    RECORDS = corpus.make_records(args.records, seed=args.seed)
    raw_total = sum(corpus.raw_bytes(r) for r in RECORDS)
    # Writers then allocate without the collector walking the corpus on every full pass.
    gc.collect()
    gc.freeze()
    shard_bytes = int(args.shard_mb * 2**20)
    shards = shard_slices(RECORDS, shard_bytes)
    print(
        f"corpus: {len(RECORDS):,} records, {raw_total / 1e6:.1f} MB raw payload, {len(shards)} shards of "
        f"{args.shard_mb:g} MiB raw, seed {args.seed}, made in {time.perf_counter() - t0:.1f} s (not timed)"
    )

    writers: dict[str, Callable[[Path], str]] = {}
    skipped: dict[str, str] = {}
    for fmt in [f for f in args.formats.split(",") if f]:
        writers[f"trainvault {fmt}"] = (lambda w: lambda out: w(RECORDS, shards, out))(trainvault_writer(fmt))
    writers["raw encode limit"] = lambda out: raw_limit(RECORDS, shards, out)
    if not args.no_peers:
        for label, module, fn in (
            ("litdata optimize", "litdata", litdata_writer),
            ("streaming MDSWriter", "streaming", mds_writer),
        ):
            why = _import_peer(module)
            if why:
                skipped[label] = why
            else:
                writers[label] = (lambda f: lambda out: f(RECORDS, shards, out, shard_bytes))(fn)

    # Untimed warm-up: imports and first-call set-up belong to no writer's throughput.
    for fmt in [f for f in args.formats.split(",") if f]:
        out = DATA / "warm-up"
        shutil.rmtree(out, ignore_errors=True)
        trainvault_writer(fmt)(RECORDS, [(0, min(200, len(RECORDS)))], out)
        shutil.rmtree(out, ignore_errors=True)

    times: dict[str, list[float]] = {name: [] for name in writers}
    disk: dict[str, int] = {}
    digests: dict[str, str] = {}
    for rep in range(args.repeats):
        for name, write in writers.items():
            out = DATA / name.replace(" ", "-")
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            gc.collect()
            t = time.perf_counter()
            try:
                digests[name] = write(out)
            except Exception as exc:  # a peer that breaks mid-run is reported, not fatal
                skipped[name] = f"failed: {type(exc).__name__}: {exc}".splitlines()[0][:160]
                times[name] = []
                continue
            times[name].append(time.perf_counter() - t)
            disk[name] = _du(out)
            shutil.rmtree(out, ignore_errors=True)
        writers = {n: w for n, w in writers.items() if n not in skipped}
        print(
            f"  round {rep + 1}/{args.repeats}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in writers), flush=True
        )

    mbps = {n: raw_total / statistics.median(ts) / 1e6 for n, ts in times.items() if ts}
    print()
    print(f"| writer | s (median of {args.repeats}) | raw MB/s | on disk MB (×raw) | runs, s |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        if not ts:
            continue
        on_disk = (
            "– (no storage)" if name == "raw encode limit" else f"{disk[name] / 1e6:.1f} ({disk[name] / raw_total:.2f})"
        )
        print(
            f"| {name} | {statistics.median(ts):.2f} | {mbps[name]:.1f} | {on_disk} | {', '.join(f'{t:.2f}' for t in ts)} |"
        )
    for name, why in skipped.items():
        print(f"| {name} | skipped: {why} | | | |")

    ours = mbps.get("trainvault msgpack.zst")
    if ours:
        print()
        print("| trainvault msgpack.zst against | ratio |")
        print("|---|---|")
        for name in ("raw encode limit", "litdata optimize", "streaming MDSWriter"):
            if name in mbps:
                print(f"| {name} ({mbps[name]:.1f} MB/s) | {ours / mbps[name]:.2f}× |")
        if "raw encode limit" in digests and "trainvault msgpack.zst" in digests:
            same = digests["raw encode limit"] == digests["trainvault msgpack.zst"]
            print(f"\nraw limit and saver produce the same shard bytes: {'yes' if same else 'NO'}")

    sizes = [int(s) for s in args.rss_shards.split(",") if s]
    if sizes:
        print()
        print(
            f"peak RSS of the saver, a fresh process per row, shards of {args.rss_shard_records:,} records "
            "streamed from the generator:"
        )
        print("| format | shards | records | shard on disk MB | baseline MB | peak MB | peak − baseline MB |")
        print("|---|---|---|---|---|---|---|")
        for fmt in [f for f in args.formats.split(",") if f]:
            for n in sizes:
                r = measure_rss(fmt, n, args.rss_shard_records, args.seed)
                print(
                    f"| {fmt} | {n} | {n * args.rss_shard_records:,} | {r['shard_mb']:.1f} | {r['baseline_mb']:.0f} | "
                    f"{r['peak_mb']:.0f} | {r['peak_mb'] - r['baseline_mb']:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
