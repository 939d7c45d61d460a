"""The `make demo` lifecycle: wall time through Dagster against the same library work without it.

For 8 and 64 shards (200 records each, the demo's records), on fresh local stores:

- library only: the same calls the assets make (pins, every shard, manifest, profile,
  training scan, evaluation release + contract, one contamination scan per shard reduced
  into the report, gate, signed approval), in one process with no Dagster;
- Dagster CLI, multiprocess executor: what `make demo` runs for a dataset with
  ``TRAINVAULT_DEMO_EXECUTOR=multiprocess``
  (``dagster job execute -j lifecycle_demo_curriculum --tags <every shard>``), a process per step;
- Dagster CLI, in-process executor: the same run with every step in one process (`make demo`'s default);
- rebuild: the in-process CLI run again on unchanged inputs (every shard reused);
- with ``--celery``: the same CLI run through the Celery executor, steps on two
  ``dagster-celery`` workers (one task at a time each; RabbitMQ on 127.0.0.1, a vhost of
  the benchmark's own made and deleted by pipelines/deploy/rabbitmq-vhost.sh, the settings
  of pipelines/deploy/celery-worker.yaml), on the deployment's instance
  (pipelines/deploy/dagster-celery.yaml, a fresh PostgreSQL database on 127.0.0.1, dropped
  after; a SQLite instance when PostgreSQL is not running).

Every CLI run gets pipelines.definitions.DEPLOYMENT_ENV (one "planned" event per asset of a
range run). The last table gives Dagster's overhead per shard for each executor.

Dagster overhead = CLI wall time - library-only wall time. "steps" is the time Dagster
recorded inside the steps (STEP_START to STEP_SUCCESS), i.e. the library work as it ran there.

Bytes read per byte stored (``--reads``): the lifecycle job run in this process
(in-process executor, ephemeral instance) three times on one store: a fresh build, an
unchanged rebuild, and a rebuild in which 1 of the N shards changed (the planted
generator changes ``train/hard/0`` only, which makes a new version whose shards are all
written again; the evaluation items planted there make its approval exclude records, so the
Croissant card reads that shard once more for its clean copy). Each row gives, over
the bytes of the shards the manifest binds, the bytes streamed (whole objects read
without keeping them: how shards are read) and the bytes every `Storage` read returned
(``trainvault.storage.READS``: shards, descriptors, documents, hand-offs, stored
per-shard results, the evaluation release); the read requests, the wall time, and how
many shards the verification pass (contamination_scan) and the profile read (the rest
reused by content). CPU s is this process's CPU time (every thread): on a shared machine
it is the steadier figure.

    .venv/bin/python bench/lifecycle.py [--shards 8,64] [--records 200] [--celery]
    .venv/bin/python bench/lifecycle.py --reads --shards 50 --lifecycle-records 2000 --no-demo

It needs the pipelines extra (Dagster): under the bench venv it re-runs itself with the
project's .venv.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VHOST_SCRIPT = REPO / "pipelines" / "deploy" / "rabbitmq-vhost.sh"


def reexec_if_needed() -> None:
    try:
        import dagster  # noqa: F401
    except ImportError:
        project = REPO / ".venv" / "bin" / "python"
        if not project.exists():
            sys.exit("bench/lifecycle.py needs Dagster: make venv (the pipelines extra), then rerun")
        os.execv(str(project), [str(project), __file__, *sys.argv[1:]])


def split_shards(total: int) -> tuple[int, int]:
    """(shards per train stage, shards of valid and of test) making `total` shards."""
    for eval_shards in (1, 2, 3):
        rest = total - 2 * eval_shards
        if rest > 0 and rest % 3 == 0:
            return rest // 3, eval_shards
    raise SystemExit(f"cannot split {total} shards into 3 stages + valid + test")


def library_only(spec, keys: Path) -> float:
    """The lifecycle's library calls, in the order the assets make them, no Dagster."""
    from concurrent.futures import ThreadPoolExecutor

    from resources.dataset import load_callable
    from trainvault import TrainVault
    from trainvault.approval import (
        ApprovalChain,
        ApprovalPolicy,
        ObjectRef,
        build_training_scan_manifest,
        load_signing_key,
        write_approval,
        write_producer_pins,
        write_training_scan_manifest,
    )
    from trainvault.canonical import canonical_json, sha256_hex
    from trainvault.contamination import (
        MethodSpec,
        VerifierContract,
        load_index,
        publish_release,
        reduce_report,
        write_report,
    )
    from trainvault.contamination.scan import scan_shard
    from trainvault.profile import approval_sidecars, profile_publication, write_metrics_sidecars
    from trainvault.publication import Publication, write_document

    start = time.perf_counter()
    vault = TrainVault()
    pins = spec.producer_pins()
    pub = spec.publication(pins.document_sha256())
    bpins = write_producer_pins(vault, pub.producer_pins_uri, pins)

    def save(shard):
        split, stage, shard_id = shard
        saver = vault.dataset_saver(pub.manifest_uri, data_format=spec.data_format)
        return saver.save(
            split,
            stage,
            spec.records(split, stage, shard_id),
            curriculum_metadata=spec.metadata_of_stage(split, stage),
            shard_id=shard_id,
        )

    with ThreadPoolExecutor(max_workers=spec.shard_threads) as pool:
        list(pool.map(save, spec.shards()))
    saver = vault.dataset_saver(pub.manifest_uri, data_format=spec.data_format)
    entries: dict = {}
    for split, stage, shard_id in spec.shards():
        entries.setdefault((split, stage), []).append(saver.recover(split, stage, shard_id=shard_id))
    for cur in spec.curricula:
        saver.register_curriculum(
            cur.split,
            cur.name,
            [e for s in cur.stages for e in entries[(cur.split, s)]],
            curriculum_metadata={"stages": list(cur.stages)},
        )
    saver.commit_manifest()
    msha = sha256_hex(vault.storage.get(pub.manifest_uri))
    profile = profile_publication(vault.storage, pub.manifest_uri, manifest_sha256=msha, raise_on_invalid=False)
    sidecars = approval_sidecars(write_metrics_sidecars(vault.storage, profile))
    scan = write_training_scan_manifest(
        vault,
        pub.scan_manifest_uri("unsigned"),
        build_training_scan_manifest(vault, pub.manifest_uri, manifest_sha256=msha),
    )
    benchmarks = [load_callable(s)() for s in spec.evaluation_sources]
    digest = sha256_hex(canonical_json([[b.name, sha256_hex(b.jsonl_bytes())] for b in benchmarks]))
    release = publish_release(vault.storage, spec.evaluation_root(digest), spec.evaluation_release_id, benchmarks)
    contract = VerifierContract(method=MethodSpec(n=spec.ngram_n), fields=list(spec.scan_fields))
    bcontract = write_document(vault.storage, spec.contract_uri(contract.document_sha256()), contract)
    index = load_index(vault, release, bcontract)
    manifest = Publication.load(vault.storage, pub.manifest_uri, sha256=msha).manifest
    results = []
    for split, stage, shard_id in spec.shards():  # one contamination_scan partition each, published
        entry = next(e for e in manifest.split(split).shards if (e.curriculum_stage, e.shard_id) == (stage, shard_id))
        result = scan_shard(vault.storage, manifest.data_format, entry, index)
        write_document(
            vault.storage,
            pub.shard_scan_uri(release.sha256, bcontract.sha256, f"{split}/{stage or '_'}/{shard_id}"),
            result,
        )
        results.append(result)
    report = reduce_report(
        index,
        manifest,
        results,
        data_manifest_sha256=msha,
        scan_manifest_sha256=scan.sha256,
        producer_pins_sha256=bpins.sha256,
    )
    breport = write_report(vault, pub.report_uri(release.sha256, bcontract.sha256, "unsigned"), report)
    chain = ApprovalChain(  # written step by step above, as the code location's assets write it
        data_manifest=ObjectRef(uri=pub.manifest_uri, sha256=msha),
        training_scan_manifest=ObjectRef(uri=scan.uri, sha256=scan.sha256),
        evaluation_release=ObjectRef(uri=release.uri, sha256=release.sha256),
        verifier_contract=ObjectRef(uri=bcontract.uri, sha256=bcontract.sha256),
        producer_pins=ObjectRef(uri=bpins.uri, sha256=bpins.sha256),
        contamination_report=ObjectRef(uri=breport.uri, sha256=breport.sha256),
    )
    request = chain.request(sidecars={k: ObjectRef(**v) for k, v in sidecars.items()})
    approved = vault.approve_dataset(
        request,
        policy=ApprovalPolicy(evaluation_release_sha256=release.sha256, verifier_contract_sha256=bcontract.sha256),
    )
    request_sha256 = sha256_hex(canonical_json(request.model_dump(mode="json")))
    record = write_approval(
        vault, pub.approval_uri(request_sha256), approved, signing_keys=load_signing_key(f"{keys}.key")
    )
    vault.open_approved(record.uri, record.sha256, trusted_keys=[approved_key(keys)])  # the approval_opens check
    return time.perf_counter() - start


def approved_key(keys: Path):
    from trainvault.approval import load_verifying_key

    return load_verifying_key(f"{keys}.pub")


def cli_run(spec, env: dict[str, str], executor: str) -> tuple[float, float, bool]:
    """One CLI lifecycle run: (wall s, seconds inside steps, success)."""
    import dagster as dg

    from pipelines.examples.demo import materialize

    run_env = {**env, "TRAINVAULT_EXECUTOR": executor}
    log = Path(env["DAGSTER_HOME"]) / f"run-{executor}-{time.time_ns()}.log"
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            _, wall = materialize(spec, run_env, log)
        finally:
            sys.stdout = stdout
    instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
    run = instance.get_runs(limit=1)[0]
    starts: dict[str, float] = {}
    inside = 0.0
    for record in instance.all_logs(run.run_id):
        ev = record.dagster_event
        if ev is None or ev.step_key is None:
            continue
        if ev.event_type_value == "STEP_START":
            starts[ev.step_key] = record.timestamp
        elif ev.event_type_value == "STEP_SUCCESS" and ev.step_key in starts:
            inside += record.timestamp - starts[ev.step_key]
    return wall, inside, run.status == dg.DagsterRunStatus.SUCCESS


@contextlib.contextmanager
def own_vhost() -> Iterator[str]:
    """A RabbitMQ vhost of the benchmark's own (no other deployment's workers take its steps),
    deleted afterwards; yields its broker URL."""
    name = f"trainvault_bench_{uuid.uuid4().hex[:10]}"
    made = subprocess.run([str(VHOST_SCRIPT), "add", name], capture_output=True, text=True, timeout=60)
    if made.returncode:
        raise SystemExit(made.stderr.strip())
    try:
        yield made.stdout.strip()
    finally:
        subprocess.run([str(VHOST_SCRIPT), "delete", name], check=True, timeout=60)


PG_ENV = {"DAGSTER_PG_USER": "postgres", "DAGSTER_PG_PASSWORD": "", "DAGSTER_PG_HOST": "127.0.0.1"}


@contextlib.contextmanager
def own_database() -> Iterator[str | None]:
    """A fresh PostgreSQL database on 127.0.0.1 for the Celery run's instance, as deployed, dropped
    afterwards; None (the run uses a SQLite instance) when PostgreSQL is not running."""
    import psycopg2

    try:
        admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres", connect_timeout=5)
    except psycopg2.OperationalError:
        yield None
        return
    admin.autocommit = True
    name = f"trainvault_bench_{uuid.uuid4().hex[:10]}"
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@contextlib.contextmanager
def celery_workers(env: dict[str, str], home: Path, count: int = 2) -> Iterator[None]:
    """`count` dagster-celery workers on the broker in `env` (each in its own process group, stopped after)."""
    exe = Path(sys.executable).with_name("dagster-celery")
    procs, logs = [], []
    try:
        for n in range(count):
            logs.append(home / f"worker{n}.log")
            with open(logs[-1], "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [
                            str(exe),
                            "worker",
                            "start",
                            "-A",
                            "pipelines.celery_app",
                            "-n",
                            f"bench{n}",
                            "-y",
                            str(REPO / "pipelines" / "deploy" / "celery-worker.yaml"),
                            "--",
                            "--concurrency=1",
                            "--without-gossip",
                            "--without-mingle",
                        ],
                        cwd=REPO,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + 120
        while not all(b" ready." in log.read_bytes() for log in logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"the Celery workers did not start; see {', '.join(map(str, logs))}")
            time.sleep(0.2)
        yield
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def measure(
    total: int, records: int, celery: bool = False, executors: tuple[str, ...] = ("multiprocess", "in_process")
) -> dict[str, float]:
    import dagster as dg

    from pipelines.definitions import DEPLOYMENT_ENV
    from pipelines.examples.spec import example_spec, key_fields
    from trainvault.approval import write_keypair

    per_stage, eval_shards = split_shards(total)
    out: dict[str, float] = {"shards": total}
    with tempfile.TemporaryDirectory(prefix="tv-lifecycle-") as tmp:
        keys = Path(tmp) / "approver"
        write_keypair(keys)

        def spec_for(root: str):
            return example_spec(
                root,
                shards_per_stage=per_stage,
                eval_shards=eval_shards,
                records=records,
                plant=False,
                **key_fields(keys),
            )

        out["library"] = library_only(spec_for(f"{tmp}/library"), keys)
        for executor in (*executors, *(("celery",) if celery else ())):
            root, home = f"{tmp}/{executor}", Path(tmp) / f"home-{executor}"
            home.mkdir()
            (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
            env = {
                **os.environ,
                **DEPLOYMENT_ENV,
                "DAGSTER_HOME": str(home),
                "PYTHONWARNINGS": "ignore",
                "TRAINVAULT_DEMO_ROOT": root,
                "TRAINVAULT_DEMO_SHARDS": str(per_stage),
                "TRAINVAULT_DEMO_EVAL_SHARDS": str(eval_shards),
                "TRAINVAULT_DEMO_RECORDS": str(records),
                "TRAINVAULT_SIGNING_KEY_PATH": f"{keys}.key",
                "TRAINVAULT_TRUSTED_KEY": f"{keys}.pub",
                "TRAINVAULT_SCANNER_KEY_PATH": f"{keys}.key",
                "TRAINVAULT_TRUSTED_SCANNER_KEY": f"{keys}.pub",
            }
            for name in ("TRAINVAULT_DEMO_PLANT", "TRAINVAULT_DEMO_GENERATOR", "TRAINVAULT_DATASETS"):
                env.pop(name, None)
            if executor == "celery":
                # dagster-celery starts `celery` by name: the venv's bin first on PATH.
                env.update(
                    TRAINVAULT_EXECUTOR="celery", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
                )
                with own_vhost() as broker, own_database() as db:
                    env["TRAINVAULT_CELERY_BROKER"] = broker
                    if db:  # the deployment's instance: Postgres (pipelines/deploy/dagster-celery.yaml)
                        env.update(PG_ENV, DAGSTER_PG_DB=db)
                        os.environ.update(PG_ENV, DAGSTER_PG_DB=db)  # this process reads the run back
                        (home / "dagster.yaml").write_text((REPO / "pipelines/deploy/dagster-celery.yaml").read_text())
                        dg.DagsterInstance.from_config(str(home)).dispose()  # its tables, made once
                    with celery_workers(env, home):
                        wall, inside, ok = cli_run(spec_for(root), env, executor)
            else:
                wall, inside, ok = cli_run(spec_for(root), env, executor)
            if not ok:
                raise SystemExit(f"the {executor} lifecycle run failed; see the logs under {home}")
            out[executor], out[f"{executor}_steps"] = wall, inside
            if executor == "in_process":
                out["rebuild"], _, ok = cli_run(spec_for(root), env, executor)
    return out


def library_wall(total: int, records: int, scale_catalog: bool = False) -> float:
    """Wall time of the lifecycle's library work alone for `total` shards, on a fresh local store: the
    demo's dataset, or (`scale_catalog`) tests/deploy/scale_datasets.yaml's, as the deployment test serves it."""
    from pipelines.catalog import load_datasets
    from pipelines.examples.spec import example_spec, key_fields
    from trainvault.approval import write_keypair

    per_stage, eval_shards = split_shards(total)
    with tempfile.TemporaryDirectory(prefix="tv-library-") as tmp:
        keys = Path(tmp) / "approver"
        write_keypair(keys)
        if scale_catalog:
            if eval_shards != 2:
                raise SystemExit("the scale catalog has 2 valid and 2 test shards: give 3 x N + 4 shards")
            os.environ.update(
                TRAINVAULT_SCALE_ROOT=f"{tmp}/library",
                TRAINVAULT_SCALE_KEYS=str(keys),
                TRAINVAULT_SCALE_SHARDS=str(per_stage),
                TRAINVAULT_SCALE_RECORDS=str(records),
            )
            (spec,) = load_datasets(REPO / "tests" / "deploy" / "scale_datasets.yaml")
        else:
            spec = example_spec(
                f"{tmp}/library",
                shards_per_stage=per_stage,
                eval_shards=eval_shards,
                records=records,
                **key_fields(keys),
            )
        return library_only(spec, keys)


def reads_of_runs(total: int, records: int) -> list[dict[str, float | str]]:
    """Bytes read per shard byte stored, requests and wall time of a build, an unchanged rebuild and
    a 1-of-N-changed rebuild, each run in this process."""
    import dagster as dg

    from pipelines.definitions import build_definitions, whole_build_tags
    from pipelines.examples.spec import example_spec, key_fields
    from resources.storage import ObjectStore
    from trainvault.approval import write_keypair
    from trainvault.storage.reads import READS

    per_stage, eval_shards = split_shards(total)
    rows: list[dict[str, float | str]] = []
    with tempfile.TemporaryDirectory(prefix="tv-reads-") as tmp:
        keys = Path(tmp) / "approver"
        write_keypair(keys)
        instance = dg.DagsterInstance.ephemeral()
        for name, plant in (("build", False), ("unchanged rebuild", False), ("1-changed rebuild", True)):
            spec = example_spec(
                f"{tmp}/store",
                shards_per_stage=per_stage,
                eval_shards=eval_shards,
                records=records,
                plant=plant,
                **key_fields(keys),
            )
            job = build_definitions([spec], ObjectStore(), executor="in_process").resolve_job_def(
                f"lifecycle_{spec.name}"
            )
            before, start, cpu = READS.snapshot(), time.perf_counter(), time.process_time()
            result = job.execute_in_process(instance=instance, tags=whole_build_tags(spec), raise_on_error=False)
            wall, cpu, read = time.perf_counter() - start, time.process_time() - cpu, READS.snapshot() - before
            if not result.success:
                raise SystemExit(f"the {name} run failed")
            stored = sum(int(meta["bytes"]) for meta in partition_metadata(result, "dataset_shards").values())
            rows.append(
                {
                    "run": name,
                    "shards": total,
                    "ratio": read.bytes / stored,
                    "streamed": read.streamed / stored,
                    "requests": read.requests,
                    "cpu": cpu,
                    "wall": wall,
                    "stored": stored,
                    "scanned": scanned(result, "contamination_scan"),
                    "profiled": scanned(result, "dataset_profile"),
                }
            )
    return rows


def partition_metadata(result, asset: str) -> dict[str, dict]:
    """Metadata of the run's materializations of `asset`, by partition (None: unpartitioned)."""
    out = {}
    for event in result.get_asset_materialization_events():
        if event.asset_key.path[-1] == asset:
            out[event.partition] = {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}
    return out


def scanned(result, asset: str) -> str:
    """How many shards `asset` read in the run: its ``shards read`` metadata, summed ('all' where it records none)."""
    counts = [int(m["shards read"]) for m in partition_metadata(result, asset).values() if "shards read" in m]
    return str(sum(counts)) if counts else "all"


def print_reads(rows: list[dict[str, float | str]], records: int) -> None:
    print(f"\nbytes read per shard byte stored (trainvault.storage.READS, in-process, {records} records a shard)\n")
    print(
        f"{'shards':>6} {'run':<18} {'streamed/stored':>15} {'read/stored':>11} {'requests':>9} {'wall s':>7} "
        f"{'CPU s':>6} {'of build (wall / CPU)':>21} {'scanned':>7} {'profiled':>8}"
    )
    for r in rows:
        build = next(b for b in rows if b["shards"] == r["shards"] and b["run"] == "build")
        share = f"{r['wall'] / build['wall']:.0%} / {r['cpu'] / build['cpu']:.0%}"
        print(
            f"{r['shards']:>6} {r['run']:<18} {r['streamed']:>15.2f} {r['ratio']:>11.2f} {r['requests']:>9} "
            f"{r['wall']:>7.1f} {r['cpu']:>6.1f} {share:>21} {r['scanned']:>7} {r['profiled']:>8}"
        )
    print(
        "\nstreamed: bytes read by streaming whole objects (shards are read so: hashing, scanning); read: every "
        "byte any read returned (shards, descriptors, documents, stored per-shard results, the evaluation release)"
    )


def print_in_process(rows: list[dict[str, float]], records: int) -> None:
    print(f"\nlifecycle wall time in-process, {records} records a shard, {os.cpu_count()} CPUs (seconds)\n")
    print(
        f"{'shards':>6} {'library only':>12} {'CLI in-proc':>11} {'overhead':>9} {'per shard':>10} {'in steps':>8} "
        f"{'rebuild':>7}"
    )
    for r in rows:
        over = r["in_process"] - r["library"]
        print(
            f"{r['shards']:>6.0f} {r['library']:>12.1f} {r['in_process']:>11.1f} {over:>9.1f} "
            f"{1000 * over / r['shards']:>7.1f} ms {r['in_process_steps']:>8.1f} {r['rebuild']:>7.1f}"
        )


def print_per_shard(rows: list[dict[str, float]]) -> None:
    """Dagster's overhead per shard: (wall time - library-only wall time) / shards, per executor."""
    executors = [e for e in ("in_process", "multiprocess", "celery") if all(e in r for r in rows)]
    print("\nDagster overhead per shard, (wall - library only) / shards (ms)\n")
    print(f"{'shards':>6} " + " ".join(f"{e:>12}" for e in executors))
    for r in rows:
        print(
            f"{r['shards']:>6.0f} "
            + " ".join(f"{1000 * (r[e] - r['library']) / r['shards']:>12.1f}" for e in executors)
        )


def demo_time() -> float:
    """Wall time of `make demo`'s program (every catalog dataset, default sizes) on a fresh store and instance."""
    import subprocess

    from trainvault.approval import write_keypair

    with tempfile.TemporaryDirectory(prefix="tv-demo-") as tmp:
        write_keypair(Path(tmp) / "approver")
        env = {
            **os.environ,
            "DAGSTER_HOME": f"{tmp}/home",
            "TRAINVAULT_DEMO_ROOT": f"{tmp}/store",
            "TRAINVAULT_SIGNING_KEY_PATH": f"{tmp}/approver.key",
            "TRAINVAULT_TRUSTED_KEY": f"{tmp}/approver.pub",
            "TRAINVAULT_SCANNER_KEY_PATH": f"{tmp}/approver.key",
            "TRAINVAULT_TRUSTED_SCANNER_KEY": f"{tmp}/approver.pub",
        }
        for name in (
            "TRAINVAULT_DEMO_PLANT",
            "TRAINVAULT_DEMO_GENERATOR",
            "TRAINVAULT_DATASETS",
            "TRAINVAULT_EXECUTOR",
            "TRAINVAULT_DEMO_SHARDS",
            "TRAINVAULT_DEMO_RECORDS",
            "TRAINVAULT_DEMO_EVAL_SHARDS",
        ):
            env.pop(name, None)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pipelines.examples.demo"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode != 0:
            raise SystemExit("the demo failed:\n" + done.stdout[-3000:] + done.stderr[-3000:])
        return time.perf_counter() - start


def main() -> None:
    reexec_if_needed()
    sys.path.insert(0, str(REPO))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", default="8,64", help="comma-separated shard counts (default 8,64)")
    parser.add_argument(
        "--lifecycle-records",
        "--records",
        dest="records",
        type=int,
        default=200,
        help="records per shard (default 200, the demo's; make bench's --records is capped to this)",
    )
    parser.add_argument("--no-demo", action="store_true", help="skip timing the demo")
    parser.add_argument("--celery", action="store_true", help="also through the Celery executor, 2 workers (RabbitMQ)")
    parser.add_argument(
        "--in-process-only",
        action="store_true",
        help="only library-only, the in-process CLI run and its rebuild, with overhead per shard",
    )
    parser.add_argument(
        "--reads",
        action="store_true",
        help="only bytes read per byte stored: build, unchanged and 1-changed rebuild, in-process",
    )
    parser.add_argument(
        "--library-only",
        action="store_true",
        help="only the library's work, no Dagster: what a deployment's figure is set against (tests/deploy/test_deploy_scale.py)",
    )
    parser.add_argument(
        "--scale-catalog", action="store_true", help="with --library-only: tests/deploy/scale_datasets.yaml's dataset"
    )
    args, _ = parser.parse_known_args()
    records = min(args.records, 200) if "--lifecycle-records" not in sys.argv else args.records
    if args.reads:
        print_reads([r for n in args.shards.split(",") for r in reads_of_runs(int(n), records)], records)
        return
    if args.library_only:
        for n in args.shards.split(","):
            wall = library_wall(int(n), records, args.scale_catalog)
            print(f"library only, {n} shards of {records} records: {wall:.1f} s")
        return
    if args.in_process_only:
        print_in_process([measure(int(n), records, executors=("in_process",)) for n in args.shards.split(",")], records)
        return
    rows = [measure(int(n), records, args.celery) for n in args.shards.split(",")]
    print(f"\nlifecycle wall time, {records} records a shard, {os.cpu_count()} CPUs (seconds)\n")
    head = (
        f"{'shards':>6} {'library only':>12} {'CLI multiproc':>13} {'overhead':>16} {'in steps':>8} "
        f"{'CLI in-proc':>11} {'overhead':>16} {'in steps':>8} {'rebuild':>7}"
    )
    print(head)
    for r in rows:
        mo, io = r["multiprocess"] - r["library"], r["in_process"] - r["library"]
        print(
            f"{r['shards']:>6.0f} {r['library']:>12.1f} {r['multiprocess']:>13.1f} "
            f"{mo:>7.1f} ({mo / r['multiprocess']:>4.0%} ) {r['multiprocess_steps']:>8.1f} "
            f"{r['in_process']:>11.1f} {io:>7.1f} ({io / r['in_process']:>4.0%} ) {r['in_process_steps']:>8.1f} "
            f"{r['rebuild']:>7.1f}"
        )
    if args.celery:
        print(
            f"\n{'shards':>6} {'library only':>12} {'Celery, 2 workers':>17} {'Dagster overhead':>20} {'in steps':>8}"
        )
        for r in rows:
            co = r["celery"] - r["library"]
            print(
                f"{r['shards']:>6.0f} {r['library']:>12.1f} {r['celery']:>17.1f} {co:>11.1f} ({co / r['celery']:>4.0%} ) "
                f"{r['celery_steps']:>8.1f}"
            )
    print_per_shard(rows)
    if not args.no_demo:
        print(f"\nmake demo (every catalog dataset, default sizes, fresh store and instance): {demo_time():.1f} s")


if __name__ == "__main__":
    main()
