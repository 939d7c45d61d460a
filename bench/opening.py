"""Opening benchmark: what a publication of many small shards costs to commit and to open over S3.

Starts its own moto S3 server on 127.0.0.1 (stopped at exit), and for each shard count saves
that many shards of `--records` records into a fresh bucket, then measures:

- list: one listing of the shards folder, the raw limit of a commit (it must find every shard);
- commit (same saver): `commit_manifest()` by the saver that saved every shard;
- commit (fresh saver): `commit_manifest()` by a new saver over the same root, as a commit
  in another process (a pipeline's fan-in) does: it must find every shard on storage;
- loader build: `SplitLoaderFactory(...)` and `.load("train")` in a fresh storage client (wall
  time and this process's CPU time, the steadier figure on a shared machine);
- first batch: `next(iter(loader))` with num_workers 0.

Above `--clone-from` shards (default 20,000) saving every shard through the moto server takes
longer than the figure is worth, so the publication is cloned instead: one shard is saved,
its descriptor is copied to every other shard id (the same data bytes, stored under the
first 64 ids for the first batch), and the manifest and its descriptor pack are built by
the library's own `build_pack` and `DataManifest` and put on the server. The loader build and
first batch read exactly what they read from a saved publication; save, list and commit are
not measured for such a row ("-").

Requests are counted at the storage layer (every `Storage` call that reaches the store:
get, get_range, stream, head, list, put, put_create), and shown beside each time; "beyond
manifest" is the loader's requests less the one manifest GET. The raw limit of a loader
build is that one GET of the manifest (shown as `manifest GET`): ratio = build / manifest GET.

    .venv/bin/python bench/opening.py --shards 1000,10000,100000

Before (main at 6ff2a69, descriptor-pack-v1, idle machine): loader build 0.10 s at 1,000
shards, 1.1 s at 10,000, 15.2 s at 100,000. After (descriptor-pack-v2, an idle machine of
the same kind): 0.02 s, 0.12 s and 0.95 s (median of 3 at 100,000), one request beyond the
manifest at every size.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trainvault import StorageConfig
from trainvault.canonical import sha256_hex
from trainvault.loading import LoaderPlan, SplitLoaderFactory
from trainvault.publication import DataManifest, DatasetSaver, ShardDescriptor, SplitManifest
from trainvault.publication.pack import build_pack, pack_uri
from trainvault.refs import ObjectRef
from trainvault.storage import Storage


class CountingStorage(Storage):
    """A real Storage that counts the requests it makes, by operation."""

    def __init__(self, config: StorageConfig):
        super().__init__(config)
        self.ops: Counter[str] = Counter()

    def get(self, uri: str, **kwargs: Any) -> bytes:
        self.ops["get"] += 1
        return super().get(uri, **kwargs)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        self.ops["get_range"] += 1
        return super().get_range(uri, start, end)

    def stream(self, uri: str, **kwargs: Any) -> Any:
        self.ops["stream"] += 1
        return super().stream(uri, **kwargs)

    def head(self, uri: str) -> Any:
        self.ops["head"] += 1
        return super().head(uri)

    def list(self, prefix_uri: str) -> Any:
        self.ops["list"] += 1
        return super().list(prefix_uri)

    def put_create(self, uri: str, data: Any) -> bool:
        self.ops["put_create"] += 1
        return super().put_create(uri, data)

    def take(self) -> int:
        """Requests since the last call."""
        n = sum(self.ops.values())
        self.ops.clear()
        return n


class MotoServer:
    """moto_server on an ephemeral 127.0.0.1 port, as tests/conftest.py starts it."""

    def __enter__(self) -> str:
        self.log = Path(tempfile.mkdtemp()) / "moto.log"
        exe = Path(sys.executable).with_name("moto_server")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", "0"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (m := re.search(rb"Running on http://127\.0\.0\.1:(\d+)", self.log.read_bytes())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto_server failed to start:\n" + self.log.read_text())
            time.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{int(m.group(1))}"
        return self.endpoint

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def config(endpoint: str) -> StorageConfig:
    # A short recovery window, as the tests use: read-ahead still running when the server stops
    # gives up in seconds instead of holding the process for 15 minutes.
    return StorageConfig(
        s3_base_url=endpoint,
        region="us-east-1",
        access_key_id="bench",
        secret_access_key="bench",
        connect_timeout_s=2.0,
        read_timeout_s=30.0,
        client_retries=3,
        recovery_window_s=20.0,
    )


def bucket(endpoint: str) -> str:
    name = f"open-{uuid.uuid4().hex[:12]}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT"), timeout=10).read()
    return name


def timed(fn: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def clone(storage: Storage, uri: str, shards: int, records: int) -> None:
    """A publication of `shards` copies of one saved shard: what `DatasetSaver.commit_manifest`
    would write for them, built by the same library calls, without saving each one."""
    saver = DatasetSaver(storage, uri)
    entry = saver.save("train", None, ({"id": j, "text": f"record {j}"} for j in range(records)), shard_id="0")
    data = storage.get(entry.uri)
    desc = ShardDescriptor.from_json_bytes(storage.get(entry.descriptor_uri))
    entries, packed = [], []
    for i in range(shards):
        d = desc.model_copy(update={"shard_id": str(i), "key": f"_/{i}"})
        raw = d.to_json_bytes()
        e = entry.model_copy(
            update={
                "shard_id": str(i),
                "key": f"_/{i}",
                "uri": entry.uri.replace("/0.", f"/{i}."),
                "descriptor_uri": entry.descriptor_uri.replace("/0.", f"/{i}."),
                "descriptor_sha256": sha256_hex(raw),
            }
        )
        if 0 < i < 64:
            storage.put_create(e.uri, data)
        entries.append(e)
        packed.append((e.descriptor_uri, d, raw))
    pack = build_pack(desc.data_format, packed)
    digest = sha256_hex(pack)
    ref = ObjectRef(uri=pack_uri(uri.rsplit("/", 1)[0], digest), sha256=digest, size=len(pack))
    storage.put_create(ref.uri, pack)
    manifest = DataManifest(
        data_format=desc.data_format, splits={"train": SplitManifest(shards=entries)}, descriptor_pack=ref
    )
    storage.put_create(uri, manifest.to_json_bytes())


def measure(endpoint: str, shards: int, records: int, threads: int, fresh_max: int, clone_from: int) -> dict[str, Any]:
    uri = f"s3://{bucket(endpoint)}/ds/data-manifest-v1.json"
    storage = CountingStorage(config(endpoint))
    if shards >= clone_from:
        _, save_s = timed(lambda: clone(storage, uri, shards, records))
        storage.take()
        out: dict[str, Any] = {"shards": shards, "cloned_s": save_s}
        return out | open_loader(endpoint, uri, shards, records)
    saver = DatasetSaver(storage, uri)

    def save(i: int) -> None:
        saver.save(
            "train",
            None,
            ({"id": f"{i}-{j}", "text": f"record {j} of shard {i}"} for j in range(records)),
            shard_id=str(i),
        )

    with ThreadPoolExecutor(threads) as pool:
        _, save_s = timed(lambda: list(pool.map(save, range(shards))))
    out = {"shards": shards, "save_s": save_s, "save_req": storage.take()}
    # The raw limit of a commit: the one listing that finds every shard.
    _, out["list_s"] = timed(lambda: storage.list(uri.rsplit("/", 1)[0] + "/shards"))
    storage.take()
    _, out["commit_s"] = timed(saver.commit_manifest)
    out["commit_req"] = storage.take()
    out["commit_fresh_s"] = out["commit_fresh_req"] = None
    if shards <= fresh_max:
        _, out["commit_fresh_s"] = timed(DatasetSaver(storage, uri).commit_manifest)
        out["commit_fresh_req"] = storage.take()
    return out | open_loader(endpoint, uri, shards, records)


def open_loader(endpoint: str, uri: str, shards: int, records: int) -> dict[str, Any]:
    """Manifest GET, loader build and first batch, each in a fresh client."""
    out: dict[str, Any] = {}
    # The raw limit: one GET of the manifest in a fresh client.
    _, out["manifest_get_s"] = timed(lambda: CountingStorage(config(endpoint)).get_document(uri))
    reader = CountingStorage(config(endpoint))
    cpu = time.process_time()
    loader, out["build_s"] = timed(
        lambda: SplitLoaderFactory(
            reader, uri, LoaderPlan.create(collate_fn=list, dataloader_args={"batch_size": 32})
        ).load("train")
    )
    out["build_cpu_s"] = time.process_time() - cpu
    out["build_req"] = reader.take()
    batches = iter(loader)
    batch, out["first_batch_s"] = timed(lambda: next(batches))
    out["first_batch_req"] = reader.take()
    batches.close()
    if len(batch) != min(32, shards * records):
        raise SystemExit(f"first batch holds {len(batch)} records, expected {min(32, shards * records)}")
    return out


def report(row: dict[str, Any]) -> None:
    if "cloned_s" in row:
        made = f"cloned {row['cloned_s']:6.1f} s | list - | commit -"
    else:
        fresh = (
            "-" if row["commit_fresh_s"] is None else f"{row['commit_fresh_s']:6.2f} s ({row['commit_fresh_req']} req)"
        )
        made = (
            f"save {row['save_s']:7.1f} s ({row['save_req']} req) | list {row['list_s']:.2f} s | "
            f"commit {row['commit_s']:6.2f} s ({row['commit_req']} req), fresh saver {fresh}"
        )
    print(
        f"{row['shards']:>7} shards | {made} | "
        f"manifest GET {row['manifest_get_s']:.2f} s | "
        f"loader build {row['build_s']:6.2f} s, CPU {row['build_cpu_s']:.2f} s ({row['build_req'] - 1} req beyond manifest, "
        f"x{row['build_s'] / row['manifest_get_s']:.1f} manifest GET) | "
        f"first batch {row['first_batch_s']:.2f} s ({row['first_batch_req']} req)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", default="1000,10000", help="comma-separated shard counts")
    parser.add_argument("--records", type=int, default=10, help="records per shard")
    parser.add_argument("--threads", type=int, default=16, help="threads saving shards")
    parser.add_argument(
        "--fresh-commit-max",
        type=int,
        default=10_000,
        help="measure the fresh saver's commit only up to this many shards",
    )
    parser.add_argument(
        "--clone-from", type=int, default=20_000, help="clone publications of this many shards or more (see above)"
    )
    args, _ = parser.parse_known_args()  # bench/run.py passes every benchmark the same arguments
    # What a trainer has imported before it opens a dataset: torch and the loader's modules.
    import torch  # noqa: F401

    import trainvault.loading.iterable
    import trainvault.loading.loader
    import trainvault.loading.order  # noqa: F401

    print(
        "before (main at 6ff2a69, descriptor-pack-v1, idle machine): loader build 0.10 s at 1,000 shards, "
        "1.1 s at 10,000, 15.2 s at 100,000",
        flush=True,
    )
    with MotoServer() as endpoint:
        for n in (int(s) for s in args.shards.split(",")):
            report(measure(endpoint, n, args.records, args.threads, args.fresh_commit_max, args.clone_from))


if __name__ == "__main__":
    main()
