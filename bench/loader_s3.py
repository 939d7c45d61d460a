"""The S3 legs of bench/loader.py: the same msgpack.zst dataset on a moto S3 server on loopback.

- throughput of trainvault `load` from S3 at 0 and 2 workers, against the local folder;
- requests: data-object GETs per block run (0 workers, from the server's request log);
- concurrency: `--s3-readers` processes (ranks of one world) read one dataset at once; every
  record must come back exactly once, with no error; requests per record are reported.

Requests are counted from moto's own request log (one line per request), so nothing sits
between the loader and the server.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

KEY, SECRET, BUCKET = "bench", "bench-secret", "bench-loader"
_RUNNING = re.compile(rb"Running on http://127\.0\.0\.1:(\d+)")
# werkzeug's request line, coloured by status on some terminals: "GET /b/k HTTP/1.1" 206
_REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)*(GET|HEAD|PUT|POST) (/\S+) HTTP/1\.1(?:\x1b\[[0-9;]*m)*" (\d+)')


class MotoServer:
    """moto_server on an ephemeral loopback port, its request log in a file."""

    def __init__(self, log: Path):
        exe = Path(sys.executable).with_name("moto_server")
        if not exe.exists():  # the bench venv may lack moto; the project's dev venv has it
            exe = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "moto_server"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", "0"], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not (m := _RUNNING.search(log.read_bytes())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not start: {log.read_text()[-400:]}")
            time.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{int(m.group(1))}"
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{BUCKET}", method="PUT"), timeout=10).read()

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TRAINVAULT_S3_URL": self.endpoint,
            "TRAINVAULT_S3_REGION": "us-east-1",
            "TRAINVAULT_S3_KEY_ID": KEY,
            "TRAINVAULT_S3_SECRET": SECRET,
        }

    def requests(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of every request served so far."""
        return [(m, p, int(s)) for m, p, s in _REQUEST.findall(self.log.read_text(errors="replace"))]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def upload(records: list[dict[str, Any]], shards: list[tuple[int, int]], server: MotoServer, name: str) -> str:
    """Save the records as msgpack.zst straight to the server; the manifest URI."""
    from trainvault import StorageConfig, TrainVault

    vault = TrainVault(
        storage=StorageConfig(
            s3_base_url=server.endpoint, region="us-east-1", access_key_id=KEY, secret_access_key=SECRET
        )
    )
    uri = f"s3://{BUCKET}/{name}/data-manifest-v1.json"
    saver = vault.dataset_saver(uri, data_format="msgpack.zst")
    for n, (a, b) in enumerate(shards):
        saver.save("train", None, records[a:b], shard_id=f"{n:05d}")
    saver.commit_manifest()
    return uri


def block_runs(uri: str, env: dict[str, str]) -> tuple[int, int]:
    """(blocks, block runs) the 0-worker loader reads in one epoch: its own cut of the block list."""
    os.environ.update(env)
    from trainvault import TrainVault
    from trainvault.loading.fetch import block_runs as runs_of
    from trainvault.loading.iterable import SEQUENTIAL_LOOKAHEAD_BLOCKS
    from trainvault.publication.reader import read_descriptor

    vault = TrainVault.from_env()
    shards = vault.load_manifest(uri).splits["train"].shards
    wanted = [(s, b) for s, e in enumerate(shards) for b in range(len(read_descriptor(vault.storage, e).blocks))]
    fetcher = vault.ungated_loader_factory(uri).load("train").split_dataset.fetcher
    return len(wanted), sum(1 for _ in runs_of(wanted, fetcher.run_blocks(SEQUENTIAL_LOOKAHEAD_BLOCKS)))


def data_gets(server: MotoServer, since: int, name: str) -> int:
    return sum(
        1
        for m, p, _ in server.requests()[since:]
        if m == "GET" and f"/{name}/shards/" in p and p.endswith(".msgpack.zst")
    )


def _rank_reader(uri: str, rank: int, world: int, batch: int, out: Any) -> None:
    """One of the concurrent readers: every id of its rank's batches, or its error."""
    try:
        from trainvault import TrainVault

        loader = (
            TrainVault.from_env()
            .ungated_loader_factory(
                uri,
                collate_fn=lambda rs: [r["id"] for r in rs],
                rank=rank,
                world_size=world,
                dataloader_args={"batch_size": batch},
            )
            .load("train")
        )
        out.put((rank, [i for b in loader for i in b], None))
    except Exception as exc:  # reported, and the leg fails
        out.put((rank, [], f"{type(exc).__name__}: {exc}"))


def concurrent_readers(
    uri: str, server: MotoServer, readers: int, batch: int, expected: list[str], timeout_s: float
) -> dict[str, Any]:
    """`readers` processes read the dataset as ranks of one world, all at once."""
    os.environ.update(server.env())
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "trainvault.loading.loader"])
    out = ctx.Queue()
    since = len(server.requests())
    t0 = time.perf_counter()
    procs = [ctx.Process(target=_rank_reader, args=(uri, r, readers, batch, out)) for r in range(readers)]
    for p in procs:
        p.start()
    results, errors = [], []
    deadline = time.monotonic() + timeout_s
    while len(results) + len(errors) < readers and time.monotonic() < deadline:
        try:
            rank, ids, error = out.get(timeout=max(0.1, deadline - time.monotonic()))
        except Exception:
            break
        (errors.append(f"rank {rank}: {error}") if error else results.append(ids))
    took = time.perf_counter() - t0
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    got = Counter(i for ids in results for i in ids)
    done = len(results) + len(errors)
    if done < readers:
        errors.append(f"{readers - done} reader(s) gave no answer within {timeout_s:.0f} s")
    requests = server.requests()[since:]
    return {
        "readers": readers,
        "seconds": took,
        "errors": errors,
        "lost": len(set(expected) - set(got)),
        "repeated": sum(n - 1 for n in got.values() if n > 1),
        # The pad policy repeats at most world_size - 1 tail records an epoch.
        "pad_limit": readers - 1,
        "requests": len(requests),
        "gets": sum(1 for m, _, _ in requests if m == "GET"),
        "records": len(expected),
        "status": dict(Counter(s for _, _, s in requests)),
    }


def report(rows: list[tuple[str, Any]], legs: dict[str, Any]) -> None:
    """Print the S3 tables."""
    print()
    print("| S3 leg (moto on loopback, msgpack.zst) | value |")
    print("|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    if "readers" in legs:
        r = legs["readers"]
        ok = not r["errors"] and r["lost"] == 0 and r["repeated"] <= r["pad_limit"]
        print(
            f"| {r['readers']} concurrent reader processes (ranks) | {r['seconds']:.1f} s, {r['records']:,} records, "
            f"lost {r['lost']}, repeated {r['repeated']} (pad limit {r['pad_limit']}), errors {len(r['errors'])}, "
            f"{r['requests']:,} requests ({r['gets']:,} GETs, statuses {json.dumps(r['status'])}), "
            f"{r['requests'] / max(1, r['records']):.3f} requests per record: {'ok' if ok else 'FAILED'} |"
        )
        for e in r["errors"][:5]:
            print(f"|   error | {e[:200]} |")
