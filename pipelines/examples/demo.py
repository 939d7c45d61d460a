"""`make demo`: every dataset of the catalog through its lifecycle job, then opened by a trainer.

1. A Dagster instance under a project-local ``DAGSTER_HOME`` (telemetry and the UI's first-visit modal off) and the
   demo's approver and scanner key pairs (``.demo/keys/approver.key`` / ``.pub``,
   ``scanner.key`` / ``.pub``, made once).
2. For each dataset of pipelines/datasets.yaml (``demo_curriculum``, ``demo_text``), at once: a run
   of ``lifecycle_<dataset>`` tagged with every shard, created through the code location
   workspace.yaml loads (pipelines/examples/launch.py: the UI lists it as it lists its own
   launches) and executed by Dagster's run worker:
   producer pins, every shard partition, the manifest, profile and (signed) training
   scan, the evaluation release, one contamination scan per shard, the signed report and
   its blocking check, the exclusions (demo_curriculum), the approval with its Croissant
   card and its check, in one run (in-process executor: one process per dataset). While they
   run, a progress line per dataset (steps done, steps running) whenever a step starts or
   ends, at least every 10 s.
3. The trainer's side, with the library only: open each signed approval by URI and
   SHA-256 with the trusted public keys and the dataset's policy, iterate a few batches
   through the approved loader (every block verified before its records are yielded),
   and print the Croissant card's path and the ``.venv/bin/trainvault trace`` command for step 0;
   at the end, what to do next (``make ui``, and those trace commands).

``TRAINVAULT_DEMO_PLANT=1`` plants evaluation items into demo_curriculum's train/hard/0.
Its policy allows exclusions: it is approved with the planted records excluded, and the
demo reads the whole train split through the approved loader and checks that none of
them is yielded. With ``TRAINVAULT_DEMO_EXCLUSIONS=0`` too, contamination blocks: its
check fails (saying the policy forbids exclusions), its approval never runs and this run writes
no approval record (one an earlier planted run left in the same version folder stays). demo_text is
approved either way. The YAML reads the other settings (``TRAINVAULT_DEMO_ROOT``,
``..._SHARDS``, ``..._RECORDS``, keys). ``TRAINVAULT_DEMO_EXECUTOR=multiprocess`` runs each
step in its own process (what bench/lifecycle.py compares against).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import RunsFilter

from pipelines.catalog import datasets_path, load_datasets
from pipelines.definitions import DEPLOYMENT_ENV, whole_build_tags
from pipelines.examples.launch import LOCATION, code_location, create_run, environment, run_worker_command
from pipelines.examples.progress import DemoProgress
from pipelines.examples.spec import DEMO_KEYS, DEMO_SCANNER_KEYS, PLANTED_GENERATOR, REPO
from resources.dataset import DatasetSpec
from trainvault import ApprovedDataset, ConfigurationError, TrainVault
from trainvault.approval import ApprovedLoaderFactory

STEPS = [
    "producer_pins",
    "evaluation_release",
    "dataset_shards",
    "data_manifest",
    "dataset_profile",
    "training_scan",
    "contamination_scan",
    "contamination_report",
    "contamination_exclusions",
    "approved_dataset",
]
BATCH_SIZE = 8
#: The executor `make demo` runs each lifecycle with (TRAINVAULT_DEMO_EXECUTOR overrides it).
DEMO_EXECUTOR = "in_process"


def prepare_home(home: Path) -> None:
    """A Dagster instance folder with telemetry and the UI's first-visit modal off, as the Makefile makes
    it (kept between demos: run history stays)."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\nnux:\n  enabled: false\n")


def prepare_keys(specs: list[DatasetSpec]) -> None:
    """The demo's approver and scanner key pairs, made once where the catalog uses them."""
    from trainvault.approval import write_keypair

    for role, prefix in (("approver", DEMO_KEYS), ("scanner", DEMO_SCANNER_KEYS)):
        used = {s.signing_key_path for s in specs} | {s.scanner_key_path for s in specs}
        if f"{prefix}.key" in used and not Path(f"{prefix}.key").exists():
            prefix.parent.mkdir(parents=True, exist_ok=True)
            write_keypair(prefix)
            print(f"made the demo {role} key pair {prefix}.key (private, 0600) and {prefix}.pub")


def materialize_all(
    specs: list[DatasetSpec], env: dict[str, str], log_dir: Path, progress: DemoProgress | None = None
) -> dict[str, tuple[int, float]]:
    """Each dataset's lifecycle job, one run over every shard, created through the code location
    workspace.yaml loads (so the UI lists it as it lists its own launches) and executed by Dagster's
    run worker; the runs go at once. (exit status, seconds) by dataset. `progress` (a
    `DemoProgress`) is polled while they run and told when each exits."""
    if not env.get("DAGSTER_HOME"):
        raise ConfigurationError(
            "the demo's runs need DAGSTER_HOME in their environment: the instance they record into"
        )
    procs: dict[str, subprocess.Popen[bytes]] = {}
    start = time.perf_counter()
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        with environment(env), code_location(instance, REPO / "workspace.yaml") as location:
            runs = {s.name: create_run(instance, location, f"lifecycle_{s.name}", whole_build_tags(s)) for s in specs}
        for name, run in runs.items():
            log = log_dir / f"lifecycle-{name}.log"
            print(f"run {run.run_id} of lifecycle_{name} in code location {LOCATION}\n  (full log: {log})")
            with open(log, "wb") as out:
                procs[name] = subprocess.Popen(
                    run_worker_command(instance, run), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
                )
    done: dict[str, tuple[int, float]] = {}
    polled = 0.0
    while len(done) < len(procs):
        for name, proc in procs.items():
            if name not in done and proc.poll() is not None:
                done[name] = (proc.returncode, time.perf_counter() - start)
                if progress is not None:
                    progress.exited_run(name, proc.returncode)
        if progress is not None and time.perf_counter() - polled >= 1.0:
            progress.poll()
            polled = time.perf_counter()
        time.sleep(0.2)
    return done


def materialize(spec: DatasetSpec, env: dict[str, str], log: Path) -> tuple[int, float]:
    """One dataset's lifecycle run (what bench/lifecycle.py times); its log in `log`'s folder."""
    return materialize_all([spec], env, log.parent)[spec.name]


def run_summary(instance: dg.DagsterInstance, run_id: str) -> tuple[dict[str, str], dict[str, tuple[str, bool, str]]]:
    """Each step's outcome and each check's (asset, verdict, description) in the run, from the instance's event log."""
    steps: dict[str, str] = {}
    checks: dict[str, tuple[str, bool, str]] = {}
    for record in instance.all_logs(run_id):
        ev = record.dagster_event
        if ev is None:
            continue
        if ev.step_key is not None and ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED"):
            steps[ev.step_key.split("__", 1)[-1]] = ev.event_type_value.removeprefix("STEP_").lower()
        elif isinstance(data := ev.event_specific_data, dg.AssetCheckEvaluation):
            checks[data.check_name] = (data.asset_key.path[-1], data.passed, data.description or "")
    return steps, checks


def materializations(instance: dg.DagsterInstance, run_id: str) -> dict[tuple[str, str | None], dict[str, Any]]:
    """The run's materializations' metadata by (asset name, partition)."""
    out: dict[tuple[str, str | None], dict[str, Any]] = {}
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
        mat = record.event_log_entry.asset_materialization
        if mat is None:
            continue
        out[(mat.asset_key.path[-1], mat.partition)] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def print_manifest(vault: TrainVault, uri: str, sha256: str) -> None:
    manifest = vault.load_manifest(uri)
    summary = manifest.summary()
    print(f"\nmanifest   {uri}\nsha256     {sha256}\nformat     {summary['data_format']}\n")
    print(f"{'split':<7} {'stage':<8} {'shards':>6} {'records':>8} {'bytes':>9}")
    for split, info in summary["splits"].items():
        for stage, st in info["stages"].items():
            print(f"{split:<7} {stage:<8} {st['shards']:>6} {st['records']:>8} {st['bytes']:>9}")
        if info["curricula"]:
            print(f"{'':<7} curricula: " + ", ".join(f"{k} ({v} shards)" for k, v in info["curricula"].items()))


def print_report(vault: TrainVault, uri: str, sha256: str, excluded: int | None) -> None:
    """The report's per-benchmark table; `excluded`: how many records the run's exclusions leave out (None: none made)."""
    from assets.contamination import attested_report
    from trainvault import ObjectRef

    report = attested_report(vault, ObjectRef(uri=uri, sha256=sha256))
    print(f"\ncontamination report  {uri}\nsha256                {sha256}")
    print(
        f"method {report.method.id}, n={report.method.n}, release {report.eval_release.id}; "
        f"scanned {report.coverage.shards} shards, {report.coverage.records} records, {report.coverage.tokens} tokens\n"
    )
    print(f"{'benchmark':<20} {'items':>5} {'contaminated':>12} {'uncheckable':>11}  pass")
    for b in report.benchmarks:
        print(
            f"{b.name:<20} {b.n_items:>5} {b.n_contaminated:>12} {b.n_uncheckable:>11}  {'yes' if b.passed else 'NO'}"
        )
    for it in report.contaminated_items:
        h = it.hits[0]
        print(
            f"  contaminated: {it.benchmark} {it.item_id} in {h.split}/{h.shard} record {h.record_index} "
            f"({it.matched_ngrams}/{it.total_ngrams} n-grams)"
        )
    if report.contaminated_items and excluded:
        print(
            f"excluded: the approval leaves out the {excluded} records that hold them (the dataset's policy allows "
            "exclusions), so no benchmark item reaches the trainer"
        )


def open_as_trainer(
    spec: DatasetSpec, uri: str, sha256: str, batches: int = 2
) -> tuple[ApprovedDataset, Iterable[list[dict[str, Any]]]]:
    """The trainer's side: library only, no Dagster. Returns the approved loader over train."""
    from trainvault.approval import load_verifying_key

    if spec.trusted_keys_path is None:
        raise ConfigurationError(f"dataset {spec.name}: set trusted_keys_path, the public key a trainer trusts")
    approved = TrainVault().open_approved(
        uri, sha256, trusted_keys=[load_verifying_key(spec.trusted_keys_path)], policy=spec.approval_policy()
    )
    stages = train_stages(spec)
    factory: ApprovedLoaderFactory = approved.loader_factory(
        collate_fn=list, dataloader_args={"batch_size": BATCH_SIZE}
    )
    loader: Iterable[list[dict[str, Any]]] = factory.load("train", curriculum_stages=stages)
    s = approved.summary
    signed = (
        f"; report signed by scanner key {s.attestation.report_signers[0][:16]}..., "
        f"{len(s.attestation.rescan.shards)} of {s.attestation.rescan.shards_total} shards re-scanned"
        if s.attestation
        else ""
    )
    print(
        f"\nopened as a trainer: {s.shards} shards, {s.records} records, {s.bytes_hashed} bytes re-hashed{signed}; "
        f"approved loader over train{' (' + ', '.join(stages) + ')' if stages else ''}:"
    )
    for n, batch in enumerate(loader, 1):
        print(f"  batch {n}: {len(batch)} records, {batch[0]['id']}: {batch[0]['text'][:48]!r}")
        if n == batches:
            break
    return approved, loader


def train_stages(spec: DatasetSpec) -> list[str] | None:
    """The stages of the train split's curriculum (None: no curriculum)."""
    stages = [c.stages for c in spec.curricula if c.split == "train"]
    return list(stages[0]) if stages else None


def check_exclusions(approved: ApprovedDataset, loader: Iterable[list[dict[str, Any]]]) -> bool:
    """Read the whole train split through the approved loader: none of the excluded records may appear."""
    excluded = [r for r in approved.exclusions.records if r.split == "train"] if approved.exclusions else []
    print(f"\nexcluded from the approval: {len(excluded)} records")
    for r in excluded:
        print(
            f"  train/{r.shard} record {r.record_index}: " + ", ".join(f"{x.benchmark} {x.item_id}" for x in r.reasons)
        )
    ids = [record["id"] for batch in loader for record in batch]
    planted = [i for i in ids if i.startswith("planted-")]
    ok = bool(excluded) and not planted and len(ids) == len(set(ids))
    print(
        f"the trainer's batches: {len(ids)} records of train, {len(planted)} planted "
        + ("(as expected: no excluded record reaches the trainer)" if ok else "UNEXPECTED: see above")
    )
    return ok


def lifecycle(
    spec: DatasetSpec, instance: dg.DagsterInstance, rc: int, seconds: float, log: Path
) -> tuple[bool, dict[str, Any] | None, dict[str, tuple[str, bool, str]]]:
    """What one dataset's lifecycle run made, printed: (finished, approval metadata, checks)."""
    layout = spec.layout()
    print(
        f"\n== {spec.name} {layout.version}: {len(spec.partition_keys())} shards x {spec.records_per_shard} records, "
        f"{spec.data_format}, store {spec.root_uri}"
    )
    runs = instance.get_runs(filters=RunsFilter(job_name=f"lifecycle_{spec.name}"), limit=1)
    if not runs:
        print(f"no Dagster run was recorded; see {log}")
        return False, None, {}
    run = runs[0]
    steps, checks = run_summary(instance, run.run_id)
    made = materializations(instance, run.run_id)
    for step in STEPS:
        if step == "contamination_exclusions" and not spec.policy.allow_exclusions:
            continue
        extra = ""
        if step == "dataset_shards":
            shards = [m for (name, part), m in made.items() if name == step and part is not None]
            written = sum(bool(m.get("written")) for m in shards)
            extra = f"  {len(shards)} partitions: {written} written, {len(shards) - written} reused unchanged"
        elif step == "contamination_exclusions" and (m := made.get((step, None))):
            extra = f"  {m['excluded records']} records to exclude"
        print(f"  {step:<22} {steps.get(step, 'not executed')}{extra}")
        for check, (owner, passed, description) in checks.items():
            if owner == step:
                print(
                    f"  {'  check ' + check:<22} {'PASSED' if passed else 'FAILED'}"
                    + (f": {description}" if description else "")
                )
    print(f"run {run.run_id}: {run.status.value} in {seconds:.1f} s (exit {rc})")
    vault = TrainVault()
    if m := made.get(("data_manifest", None)):
        print_manifest(vault, m["uri"], m["sha256"])
    if m := made.get(("contamination_report", None)):
        exclusions = made.get(("contamination_exclusions", None), {})
        print_report(vault, m["uri"], m["sha256"], exclusions.get("excluded records"))
    if rc != 0 and checks.get("within_contract", ("", True))[1] is not False:
        print(f"\nthe lifecycle did not finish; the last lines of {log}:")
        print("\n".join(log.read_text(errors="replace").splitlines()[-25:]))
    return rc == 0, made.get(("approved_dataset", None)), checks


def approval_records(spec: DatasetSpec) -> set[str]:
    """The approval records in `spec`'s version folder (earlier runs' included)."""
    return {o.uri for o in TrainVault().storage.list(spec.layout().base + "/approvals")}


def blocked(
    spec: DatasetSpec,
    approval: dict[str, Any] | None,
    checks: dict[str, tuple[str, bool, str]],
    earlier: set[str],
) -> bool:
    """Planted contamination under a policy without exclusions: the check fails and this run approves
    nothing (`earlier`: the approval records an earlier run left in the same version folder)."""
    written = approval_records(spec) - earlier
    failed = checks.get("within_contract", ("", True))[1] is False
    print(
        f"\nthe check within_contract {'FAILED' if failed else 'did not fail'}; approved_dataset "
        f"{'was not executed' if approval is None else 'RAN'}; approval records written by this run for "
        f"{spec.name}: {len(written)} ({len(earlier)} from earlier runs)"
    )
    expected = failed and approval is None and not written
    print("as expected: contaminated data is never approved" if expected else "UNEXPECTED: see the log above")
    return expected


def venv_program(name: str) -> str:
    """The command `name` of this interpreter's environment, as a path a shell in the current folder runs
    (``.venv/bin/trainvault``): outside the venv the bare name is not on PATH."""
    path = Path(sys.executable).with_name(name).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def first_batch_command(spec: DatasetSpec, approval: dict[str, Any]) -> str:
    """The ``trainvault trace`` command naming the records of the approved loader's first batch (step 0)."""
    from assets.approval import trace_command

    command = trace_command(
        approval["uri"],
        approval["sha256"],
        spec,
        exclusions=bool(approval.get("excluded records")),
        batch_size=BATCH_SIZE,
        stages=train_stages(spec),
    )
    return venv_program("trainvault") + command.removeprefix("trainvault")


def next_steps(traces: dict[str, str]) -> None:
    """What to do after the demo: the UI on the same instance, and each approval's first batch traced."""
    print(
        "\nnext:\n  make ui    # the Dagster UI on http://127.0.0.1:3000 (UI_PORT= to change), on this demo's "
        "instance: the runs above, each dataset's assets, checks and approval"
    )
    for name, command in traces.items():
        print(f"  # the records of {name}'s first approved batch, read and verified:\n  {command}")


def show_approval(spec: DatasetSpec, approval: dict[str, Any]) -> str:
    """The approval, its Croissant card, the lines a trainer pastes and the trace command for step 0 (returned)."""
    from assets.approval import trainer_snippet

    excluded = bool(approval.get("excluded records"))
    print(f"\napproval   {approval['uri']}\nsha256     {approval['sha256']}")
    print(f"croissant  {approval['croissant uri']}\nsha256     {approval['croissant sha256']}")
    print("a trainer opens it with:\n")
    print(
        "    " + trainer_snippet(approval["uri"], approval["sha256"], spec, exclusions=excluded).replace("\n", "\n    ")
    )
    print("\nthe records of its first batch (step 0), read and verified:\n")
    command = first_batch_command(spec, approval)
    print("    " + command)
    return command


def main() -> int:
    home = Path(os.environ.get("DAGSTER_HOME") or REPO / ".dagster_home").resolve()
    prepare_home(home)
    planted = os.environ.get("TRAINVAULT_DEMO_PLANT", "") not in ("", "0", "false", "no")
    if planted:
        os.environ["TRAINVAULT_DEMO_GENERATOR"] = PLANTED_GENERATOR
    # In-process by default: the demo's datasets are small, so a process per step (multiprocess)
    # costs several times the work (bench/lifecycle.py); TRAINVAULT_DEMO_EXECUTOR picks another.
    os.environ["TRAINVAULT_EXECUTOR"] = os.environ.get("TRAINVAULT_DEMO_EXECUTOR") or DEMO_EXECUTOR
    os.environ["DAGSTER_HOME"] = str(home)
    env = {**os.environ, **DEPLOYMENT_ENV, "PYTHONWARNINGS": "ignore", "DAGSTER_DISABLE_TELEMETRY": "1"}
    specs = load_datasets(datasets_path())
    prepare_keys(specs)
    print(
        f"trainvault demo: {len(specs)} datasets ({', '.join(s.name for s in specs)})"
        f"{'; evaluation items PLANTED in demo_curriculum train/hard/0' if planted else ''}; DAGSTER_HOME {home}"
    )

    instance = dg.DagsterInstance.get()  # creates the instance's databases before the runs open them
    log_dir = home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    earlier = {spec.name: approval_records(spec) for spec in specs}
    ran = materialize_all(specs, env, log_dir, DemoProgress(instance, {s.name: f"lifecycle_{s.name}" for s in specs}))
    ok, traces = True, dict[str, str]()
    for spec in specs:
        rc, seconds = ran[spec.name]
        finished, approval, checks = lifecycle(spec, instance, rc, seconds, log_dir / f"lifecycle-{spec.name}.log")
        planted_here = planted and spec.generator == PLANTED_GENERATOR
        if planted_here and not spec.policy.allow_exclusions:
            ok = blocked(spec, approval, checks, earlier[spec.name]) and ok
            continue
        if not finished or approval is None:
            ok = False
            continue
        traces[spec.name] = show_approval(spec, approval)
        approved, loader = open_as_trainer(spec, approval["uri"], approval["sha256"])
        if planted_here:
            ok = check_exclusions(approved, loader) and ok
    next_steps(traces)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
