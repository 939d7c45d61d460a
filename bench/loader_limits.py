"""The limits bench/loader.py holds trainvault to, and the cost of the loader's own figures.

Each function runs in a fresh child process of bench/loader.py and prints one JSON line.
"""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path
from typing import Any


def records_batch(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The identity collate: the batch is the list of records."""
    return records


def vm_hwm_mb(pid: int | str = "self") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def raw_limit_child(path: str) -> None:
    """zstd + msgpack decode of every block of the msgpack.zst shards, in one loop."""
    import msgpack
    import numpy as np
    import zstandard

    from trainvault.publication import DataManifest, ShardDescriptor

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
    for s, d in zip(shards, descs, strict=False):
        data = local(s.uri).read_bytes()
        for b in d.blocks:
            unpacker = msgpack.Unpacker(raw=False, ext_hook=ext, max_buffer_size=1 << 26)
            unpacker.feed(dctx.decompress(data[b.offset : b.offset + b.length]))
            for r in unpacker:
                n += 1
                tokens += len(r["tokens"])
    took = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "records": n,
                "tokens": -1,
                "token_count": tokens,
                "seconds": took,
                "ttfb": None,
                "rss": vm_hwm_mb(),
                "worker_rss": 0.0,
            }
        )
    )


def raw_parquet_child(path: str) -> None:
    """Every row group of the parquet shards read and turned into rows, in one loop, unverified."""
    import pyarrow.parquet as pq

    root = Path(path)
    files = sorted(root.glob("shards/train/_/*.parquet"))
    gc.collect()
    t0 = time.perf_counter()
    n = tokens = 0
    for f in files:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            for r in pf.read_row_group(g).to_pylist():
                n += 1
                tokens += len(r["tokens"])
    took = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "records": n,
                "tokens": -1,
                "token_count": tokens,
                "seconds": took,
                "ttfb": None,
                "rss": vm_hwm_mb(),
                "worker_rss": 0.0,
            }
        )
    )


def overhead_child(path: str, batch: int) -> None:
    """The loader's own timing calls of one epoch (0 workers), timed in a loop, against the epoch's time."""
    from trainvault import TrainVault
    from trainvault.loading import Observability
    from trainvault.loading.metrics import StageTimes, StepFigures, WindowFigures

    loader = (
        TrainVault()
        .ungated_loader_factory(
            str(Path(path) / "data-manifest-v1.json"),
            collate_fn=records_batch,
            dataloader_args={"batch_size": batch},
            observe=Observability(window_steps=10**9),
        )
        .load("train")
    )
    t0 = time.perf_counter()
    steps = sum(1 for _ in loader)
    took = time.perf_counter() - t0
    window = loader.figures()["window"]
    blocks = window["blocks"]
    # Per block: 3 clock + 1 count on a read thread, 1 clock + 1 count in _finish, 6 perf_counter calls;
    # per step: 1 clock, 1 take, 1 StepFigures + WindowFigures.add, 4 perf_counter calls.
    times, figures = StageTimes(), WindowFigures(100)
    reps = 20000
    c0 = time.perf_counter()
    for _ in range(reps):
        for stage in ("fetch", "verify", "decompress", "decode"):
            times.clock(stage, time.perf_counter())
        times.count(1, 1, 1)
        times.count(1, 1, 1)
        time.perf_counter(), time.perf_counter()
    per_block = (time.perf_counter() - c0) / reps
    c0 = time.perf_counter()
    for i in range(reps):
        times.clock("collate", time.perf_counter() - time.perf_counter())
        figures.add(StepFigures(i, "main", time.perf_counter(), times.take(), time.perf_counter()))
    per_step = (time.perf_counter() - c0) / reps
    cost = blocks * per_block + steps * per_step
    print(json.dumps({"seconds": took, "steps": steps, "blocks": blocks, "cost": cost, "share": cost / took}))
