"""Approved-open benchmark: what a trainer's `open_approved` reads, and how long it takes, to open a
signed approval record and to reach the first batch, against main's open (`audit=True`, the full
gate: every byte re-hashed, a sampled re-scan).

For each size (10 MB, 1 GB, 10 GB of shard bytes in shards of about `--shard-mb`, and 100,000
shards of `--small-records` records), locally and over a moto S3 server on 127.0.0.1 (started
and stopped here), a cloned publication: one shard of synthetic records (bench/corpus.py) is
saved, every other shard is a copy of it at its own URI, and the manifest and descriptor pack
are built by the library's own `build_pack` and `DataManifest`. Every shard exists at its size
(the open lists them and checks sizes). Locally the copies are hard links to the one file: 10 GB
costs no disk, and every hash of the data reads that one inode from the page cache, so main's
figure is hashing at memory speed (a cold store would be slower). Over S3 each copy is put (in
memory: moto holds every byte, so 10 GB is not run there by default; at 100,000 keys moto takes
about 0.65 s a LIST page on a busy 2-core machine, some 65 s of the open's 101 pages). The
custody chain (scan manifest, pins, release, contract, report) comes from bench/chain.py,
signed by a scanner key; the approver runs the gate under the policy the trainer opens with (a
sampled re-scan, seed 0) and signs the record.

Per row: the trainer's open (a fresh `TrainVault`, `open_approved`): bytes read, requests,
seconds; the first batch: seconds from the start of the open to ``next(iter(loader))`` (batch
32, list collate, no workers); the bound, the goal's limit: bytes of the record, every binding,
the release's item files and the descriptor pack, and their count plus ceil(listed objects /
1,000) listings; main's open (`audit=True`). Reads are counted process-wide at the storage
layer (`trainvault.storage.reads.READS`), which counts a listing as one request however many
pages it takes; "S3 req" is what the S3 server logged during the open, one line per HTTP request
(a LIST page of up to 1,000 keys is one). Where main's open is not run (`--audit-max-s3-shards`:
100,000 shards over moto take minutes per pass), the approver's gate is shown in its place,
marked "†": the same `run_gate` under the same policy that main's open runs, less the record's
one read. "8 procs" rows: 8 processes opening the same approval at once (each imports first,
then all are released together); max bytes, requests and seconds over the 8.

Goals (issue 35): open bytes <= bound + 1 MB at every size; requests <= the bound's count; first
batch within 2 s at 100,000 shards over S3; each of 8 concurrent opens within the same bound.

    .venv/bin/python bench/approved_open.py          # every row: about 20 minutes on 2 busy cores
    .venv/bin/python bench/approved_open.py --sizes 10MB,1000shards --no-s3 --repeats 1
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus
from chain import approval_request
from opening import MotoServer, bucket, config

from trainvault import StorageConfig, TrainVault
from trainvault.approval import ApprovalPolicy, SigningKey, VerifyingKey, write_approval
from trainvault.canonical import sha256_hex
from trainvault.contamination import EvaluationRelease
from trainvault.publication import DataManifest, ShardDescriptor, SplitManifest
from trainvault.publication.pack import build_pack, pack_uri
from trainvault.refs import ObjectRef
from trainvault.storage import Storage
from trainvault.storage.reads import READS, ReadCounts
from trainvault.uris import parent_uri

DATA = Path(__file__).resolve().parent / ".data" / "approved_open"
BYTES_PER_RECORD = 807  # a msgpack.zst shard of bench/corpus.py records, as saved
UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9}
HERE = Path(__file__).resolve()


@dataclass(frozen=True)
class Size:
    """One row's publication: `shards` shards of `records` records each."""

    label: str
    shards: int
    records: int


@dataclass(frozen=True)
class Opened:
    """One measured open: reads, seconds, and seconds to the first batch (None: not loaded)."""

    reads: ReadCounts
    seconds: float
    first_batch_s: float | None = None
    #: HTTP requests the S3 server logged during the open (None: a local open).
    wire: int | None = None


@dataclass(frozen=True)
class Approval:
    """A signed approval of one publication and what its open may read at most."""

    uri: str
    sha256: str
    bound_bytes: int
    bound_count: int
    data_bytes: int
    gate: Opened


def parse_sizes(text: str, shard_mb: float, small_records: int) -> list[Size]:
    """`10MB,1GB,100000shards` -> the rows: byte sizes in shards of about `shard_mb` MB."""
    out = []
    for spec in (s.strip() for s in text.split(",") if s.strip()):
        if spec.endswith("shards"):
            out.append(Size(spec, int(spec.removesuffix("shards")), small_records))
            continue
        total = float(spec[:-2]) * UNITS[spec[-2:].upper()]
        shards = max(1, round(total / (shard_mb * 1e6)))
        out.append(Size(spec, shards, max(1, round(total / shards / BYTES_PER_RECORD))))
    return out


def clone(storage: Storage, uri: str, size: Size, copy: Callable[[str, list[str]], None]) -> None:
    """A publication of `size.shards` copies of one saved shard at `uri`; `copy(first, others)`
    makes each other shard's object from the first."""
    from trainvault.publication import DatasetSaver

    saver = DatasetSaver(storage, uri)
    entry = saver.save("train", None, corpus.iter_records(size.records), shard_id="0")
    desc = ShardDescriptor.from_json_bytes(storage.get(entry.descriptor_uri))
    entries, packed = [], []
    for i in range(size.shards):
        d = desc.model_copy(update={"shard_id": str(i), "key": f"_/{i}"})
        raw = d.to_json_bytes()
        entries.append(
            entry.model_copy(
                update={
                    "shard_id": str(i),
                    "key": f"_/{i}",
                    "uri": entry.uri.replace("/0.", f"/{i}."),
                    "descriptor_uri": entry.descriptor_uri.replace("/0.", f"/{i}."),
                    "descriptor_sha256": sha256_hex(raw),
                }
            )
        )
        packed.append((entries[-1].descriptor_uri, d, raw))
    copy(entry.uri, [e.uri for e in entries[1:]])
    pack = build_pack(desc.data_format, packed)
    digest = sha256_hex(pack)
    ref = ObjectRef(uri=pack_uri(parent_uri(uri), digest), sha256=digest, size=len(pack))
    storage.put_create(ref.uri, pack)
    manifest = DataManifest(
        data_format=desc.data_format, splits={"train": SplitManifest(shards=entries)}, descriptor_pack=ref
    )
    storage.put_create(uri, manifest.to_json_bytes())


def link_copies(first: str, others: list[str]) -> None:
    """Local copies: hard links to the first shard's file (to a real copy of it each time a file
    reaches the file system's link limit, 65,000 on ext4)."""
    source = first.removeprefix("file://")
    for uri in others:
        path = uri.removeprefix("file://")
        try:
            os.link(source, path)
        except OSError as exc:
            if exc.errno != errno.EMLINK:
                raise
            shutil.copyfile(source, path)
            source = path


def put_copies(storage: Storage) -> Callable[[str, list[str]], None]:
    """S3 copies: each put, 16 at a time."""

    def copy(first: str, others: list[str]) -> None:
        data = storage.get(first)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda u: storage.put_create(u, data), others))

    return copy


@contextmanager
def counted() -> Iterator[list[Any]]:
    """Yields a list that holds (reads, seconds) of the block once it ends."""
    out: list[Any] = []
    before, t = READS.snapshot(), time.perf_counter()
    yield out
    out.extend([READS.snapshot() - before, time.perf_counter() - t])


def bound(storage: Storage, approval: ObjectRef, request: Any, manifest: DataManifest) -> tuple[int, int]:
    """The goal's limit: bytes and objects of the record, every binding, the release's item files
    and the pack, and that count plus one listing per 1,000 objects in the shards' folder."""
    sizes: list[int | None] = [approval.size] + [storage.head(r.uri).size for r in request.bindings().values()]
    release_uri = request.evaluation_release.uri
    release = EvaluationRelease.from_json_bytes(storage.get(release_uri), source=release_uri)
    sizes += [b.items.size_bytes for b in release.benchmarks]
    if manifest.descriptor_pack is not None:
        sizes.append(manifest.descriptor_pack.size)
    shards = manifest.splits["train"].shards
    listed = len(list(storage.list(parent_uri(shards[0].uri))))
    return sum(n or 0 for n in sizes), len(sizes) + math.ceil(listed / 1000)


@dataclass(frozen=True)
class Keys:
    """The approver's and the scanner's keys, and the policy approver and trainer share."""

    approver: SigningKey
    scanner: SigningKey

    def policy(self) -> ApprovalPolicy:
        return policy_for(self.scanner.public_key)


def policy_for(scanner: VerifyingKey) -> ApprovalPolicy:
    """The approver's policy, which the trainer opens with: a signed chain, a sampled re-scan."""
    return ApprovalPolicy(scanner_keys=[scanner], rescan_seed=0)


def approve(vault: TrainVault, root: str, uri: str, keys: Keys) -> Approval:
    """The custody chain of the publication at `uri`, the approver's gate, the signed record."""
    request = approval_request(vault, root, uri, scanner_key=keys.scanner)
    with counted() as gate:
        approved = vault.approve_dataset(request, policy=keys.policy())
    written = write_approval(vault, f"{root}/approval-v1.dsse.json", approved, signing_keys=keys.approver)
    manifest = DataManifest.from_json_bytes(vault.storage.get(uri), source=uri)
    limit_bytes, limit_count = bound(vault.storage, written.ref, request, manifest)
    return Approval(written.uri, written.sha256, limit_bytes, limit_count, approved.summary.shard_bytes, Opened(*gate))


def open_once(
    cfg: StorageConfig,
    a: Approval,
    approver: VerifyingKey,
    scanner: VerifyingKey,
    *,
    audit: bool = False,
    log: Path | None = None,
) -> Opened:
    """One trainer's open in a fresh client; with `audit=False`, then the first batch. `log`: the
    S3 server's request log, whose lines during the open are its requests on the wire."""
    vault = TrainVault(storage=cfg)
    mark = log.stat().st_size if log else 0
    start = time.perf_counter()
    with counted() as c:
        approved = vault.open_approved(
            a.uri, a.sha256, trusted_keys=[approver], policy=policy_for(scanner), audit=audit
        )
    wire = http_requests(log, mark) if log else None
    if audit:
        return Opened(c[0], c[1], None, wire)
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 32}).load("train")
    batches = iter(loader)
    batch = next(batches)
    first = time.perf_counter() - start
    if len(batch) != 32:
        raise SystemExit(f"first batch holds {len(batch)} records, expected 32")
    getattr(batches, "close", lambda: None)()
    settle()
    return Opened(c[0], c[1], first, wire)


def http_requests(log: Path, start: int) -> int:
    """Requests moto logged after byte `start` of its log (one line each: a LIST page is one)."""
    with open(log, "rb") as f:
        f.seek(start)
        return f.read().count(b' HTTP/1.1" ')


def settle() -> None:
    """Wait for the loader's read-ahead to end: reads still in flight when its iteration closed
    would otherwise be counted (READS is process-wide) in the next open's window."""
    for t in threading.enumerate():
        if t.name.startswith("trainvault-read"):
            t.join(timeout=120)


def median_open(cfg: StorageConfig, a: Approval, keys: Keys, repeats: int, log: Path | None) -> Opened:
    """Median seconds of `repeats` opens (bytes and requests: the most any of them read)."""
    runs = [open_once(cfg, a, keys.approver.public_key, keys.scanner.public_key, log=log) for _ in range(repeats)]
    reads = max((r.reads for r in runs), key=lambda r: (r.bytes, r.requests))
    return Opened(
        reads,
        statistics.median(r.seconds for r in runs),
        statistics.median(r.first_batch_s or 0.0 for r in runs),
        max((r.wire for r in runs if r.wire is not None), default=None),
    )


def publish(
    where: str, size: Size, cfg: StorageConfig, endpoint: str | None, keys: Keys, data_dir: Path
) -> tuple[Approval, float]:
    """A cloned publication of `size` and its signed approval; returns it and the seconds taken."""
    vault = TrainVault(storage=cfg)
    t = time.perf_counter()
    copy: Callable[[str, list[str]], None]
    if endpoint is None:
        folder = data_dir.resolve() / where / size.label
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        root, copy = str(folder), link_copies
    else:
        root, copy = f"s3://{bucket(endpoint)}/{size.label}", put_copies(vault.storage)
    uri = f"{root}/ds/data-manifest-v1.json"
    clone(vault.storage, uri, size, copy)
    return approve(vault, root, uri, keys), time.perf_counter() - t


HEADER = (
    f"{'where':5} {'size':>8} {'shards':>7} | {'open MB':>9} {'req':>5} {'S3 req':>6} {'s':>6} {'1st batch s':>11} | "
    f"{'bound MB':>9} {'n':>5} {'open/bound':>10} {'excess KB':>9} | "
    f"{'main MB':>10} {'req':>7} {'s':>7} {'main/data':>9} | {'built s':>7}"
)


def wire(o: Opened) -> str:
    return "-" if o.wire is None else str(o.wire)


def mb(n: int) -> str:
    return f"{n / 1e6:,.3f}"


def row(where: str, size: Size, a: Approval, trainer: Opened, main: Opened | None, built_s: float) -> str:
    """One printed row; main's open None: the approver's gate in its place (marked †)."""
    m, mark = (main, " ") if main is not None else (a.gate, "†")
    r = trainer.reads
    return (
        f"{where:5} {size.label:>8} {size.shards:>7} | {mb(r.bytes):>9} {r.requests:>5} {wire(trainer):>6} {trainer.seconds:>6.2f} "
        f"{trainer.first_batch_s or 0.0:>11.2f} | {mb(a.bound_bytes):>9} {a.bound_count:>5} "
        f"{r.bytes / a.bound_bytes:>10.3f} {(r.bytes - a.bound_bytes) / 1e3:>9.1f} | "
        f"{mb(m.reads.bytes):>9}{mark} {m.reads.requests:>7} {m.seconds:>7.2f} "
        f"{m.reads.bytes / a.data_bytes:>9.3f} | {built_s:>7.1f}"
    )


def concurrent(a: Approval, endpoint: str | None, keys: Keys, procs: int) -> list[dict[str, Any]]:
    """`procs` processes each opening `a` at once: each imports and builds its client, says it is
    ready, and opens when every one of them is told to go."""
    spec = {
        "uri": a.uri,
        "sha256": a.sha256,
        "endpoint": endpoint,
        "approver": keys.approver.public_key.to_pem().decode(),
        "scanner": keys.scanner.public_key.to_pem().decode(),
        "bound_bytes": a.bound_bytes,
    }
    cmd = [sys.executable, str(HERE), "--child", json.dumps(spec)]
    children = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    try:
        for p in children:
            if p.stdout is None or p.stdout.readline().strip() != "ready":
                raise SystemExit("a concurrent opener failed to start")
        for p in children:
            if p.stdin is not None:
                p.stdin.write("go\n")
                p.stdin.flush()
        # moto serves the 8 processes' LIST pages one after another: at 100,000 shards over
        # S3 that is 800 pages at ~0.65 s, over 600 s, so the deadline is for all of them.
        deadline = time.monotonic() + 1800
        return [json.loads(p.communicate(timeout=max(1, deadline - time.monotonic()))[0]) for p in children]
    finally:
        for p in children:
            if p.poll() is None:
                p.kill()


def child(spec_json: str) -> None:
    """One of `concurrent`'s openers: ready, wait for go, open, print its figures as JSON."""
    import torch  # noqa: F401  (imported before the clock starts, as a trainer has)

    spec = json.loads(spec_json)
    cfg = config(spec["endpoint"]) if spec["endpoint"] else StorageConfig()
    a = Approval(spec["uri"], spec["sha256"], spec["bound_bytes"], 0, 1, Opened(ReadCounts(), 0.0))
    approver, scanner = VerifyingKey.from_pem(spec["approver"]), VerifyingKey.from_pem(spec["scanner"])
    print("ready", flush=True)
    sys.stdin.readline()
    o = open_once(cfg, a, approver, scanner)
    print(json.dumps({"bytes": o.reads.bytes, "requests": o.reads.requests, "s": o.seconds, "first": o.first_batch_s}))


def procs_row(where: str, size: Size, a: Approval, results: list[dict[str, Any]]) -> str:
    """The concurrent openers' row: the most any one of them read and took ("S3 req": not
    counted, the server's log interleaves them)."""
    worst = max(r["bytes"] for r in results)
    return (
        f"{where:5} {size.label:>8} {size.shards:>7} | {mb(worst):>9} {max(r['requests'] for r in results):>5} {'-':>6} "
        f"{max(r['s'] for r in results):>6.2f} {max(r['first'] for r in results):>11.2f} | {mb(a.bound_bytes):>9} "
        f"{a.bound_count:>5} {worst / a.bound_bytes:>10.3f} {(worst - a.bound_bytes) / 1e3:>9.1f} | "
        f"{len(results)} processes at once: max per process"
    )


def run_where(where: str, sizes: list[Size], server: MotoServer | None, keys: Keys, args: argparse.Namespace) -> None:
    """Every row of one store (`server`: the S3 server, None: local), then the concurrent
    openers of its last row."""
    endpoint, log = (server.endpoint, server.log) if server else (None, None)
    cfg = config(endpoint) if endpoint else StorageConfig()
    last: tuple[Size, Approval] | None = None
    for size in sizes:
        a, built_s = publish(where, size, cfg, endpoint, keys, args.data_dir)
        trainer = median_open(cfg, a, keys, args.repeats, log)
        main = None
        if endpoint is None or size.shards <= args.audit_max_s3_shards:
            main = open_once(cfg, a, keys.approver.public_key, keys.scanner.public_key, audit=True)
        print(row(where, size, a, trainer, main, built_s), flush=True)
        last = (size, a)
    if last is not None and args.procs:
        print(procs_row(where, last[0], last[1], concurrent(last[1], endpoint, keys, args.procs)), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10MB,1GB,10GB,100000shards", help="local rows (default %(default)s)")
    parser.add_argument("--s3-sizes", default="10MB,1GB,100000shards", help="S3 rows (default %(default)s)")
    parser.add_argument("--s3", action=argparse.BooleanOptionalAction, default=True, help="run the S3 rows")
    parser.add_argument("--repeats", type=int, default=3, help="trainer's opens per row, median (default 3)")
    parser.add_argument("--shard-mb", type=float, default=16.0, help="shard size of the byte-size rows, MB")
    parser.add_argument("--small-records", type=int, default=10, help="records per shard of the N-shards rows")
    parser.add_argument("--procs", type=int, default=8, help="concurrent openers of each store's last row")
    parser.add_argument(
        "--audit-max-s3-shards", type=int, default=20_000, help="run main's open over S3 up to this many shards"
    )
    parser.add_argument("--data-dir", type=Path, default=DATA, help="local rows' folder (default %(default)s)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)  # bench/run.py passes every benchmark the same arguments
    if args.child:
        return child(args.child)
    import torch  # noqa: F401  (what a trainer has imported before it opens)

    keys = Keys(SigningKey.generate(), SigningKey.generate())
    print("main's open = open_approved(audit=True); † = the approver's gate in its place (see --help)")
    print(HEADER, flush=True)
    run_where("local", parse_sizes(args.sizes, args.shard_mb, args.small_records), None, keys, args)
    if args.s3:
        server = MotoServer()
        with server:
            run_where("s3", parse_sizes(args.s3_sizes, args.shard_mb, args.small_records), server, keys, args)


if __name__ == "__main__":
    main()
