"""`make demo`: the whole custody lifecycle, materialised by the Dagster CLI, then opened by a trainer.

1. A Dagster instance under a project-local ``DAGSTER_HOME`` (telemetry off) and the
   demo's approver key pair (``.demo/keys/approver.key`` / ``.pub``, made once).
2. ``dagster asset materialize --select '*' --partition-range <first shard>...<last shard>``:
   producer pins, every shard partition, the manifest, the training scan, the evaluation
   release (HumanEval + a synthetic benchmark), the contamination report and its
   blocking check, the approval and its check, in one run (multiprocess executor).
3. The trainer's side, with the library only: open the signed approval by URI and
   SHA-256 with the trusted public key and iterate a few batches through the approved
   loader (every block verified before its records are yielded).

``TRAINVAULT_DEMO_PLANT=1`` plants evaluation items into train/hard/0: the check fails,
the approval never runs and no approval record is written. Other settings: see
pipelines/examples/spec.py. ``TRAINVAULT_DEMO_EXECUTOR=in_process`` runs every step in
one process (what bench/lifecycle.py compares against).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pipelines.examples.spec import DEMO_KEYS, REPO, example_spec

STEPS = ["producer_pins", "evaluation_release", "dataset_shards", "data_manifest", "dataset_profile", "training_scan",
         "contamination_report", "approved_dataset"]


def prepare_home(home: Path) -> None:
    """A Dagster instance folder with telemetry off (kept between demos: run history stays)."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\n")


def prepare_keys(spec) -> None:
    from trainvault.approval import write_keypair

    if spec.signing_key_path and not Path(spec.signing_key_path).exists() and str(spec.signing_key_path).startswith(str(DEMO_KEYS)):
        DEMO_KEYS.parent.mkdir(parents=True, exist_ok=True)
        write_keypair(DEMO_KEYS)
        print(f"made the demo approver key pair {DEMO_KEYS}.key (private, 0600) and {DEMO_KEYS}.pub")


def materialize(spec, env: dict[str, str], log: Path) -> tuple[int, float]:
    """The lifecycle, one run, through the Dagster CLI."""
    keys = spec.partition_keys()
    cmd = [str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m", "pipelines.definitions",
           "--select", "*", "--partition-range", f"{keys[0]}...{keys[-1]}"]
    if env.get("TRAINVAULT_DEMO_EXECUTOR") == "in_process":
        cmd += ["--config-json", json.dumps({"execution": {"config": {"in_process": {}}}})]
    print("$ " + " ".join(c if c != "*" else "'*'" for c in cmd[1:]))
    print(f"  (full log: {log})")
    start = time.perf_counter()
    with open(log, "wb") as out:
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    return rc, time.perf_counter() - start


def run_summary(instance, run_id: str) -> tuple[dict[str, str], dict[str, tuple[str, bool]]]:
    """Each step's outcome and each check's (asset, verdict) in the run, from the instance's event log."""
    steps: dict[str, str] = {}
    checks: dict[str, tuple[str, bool]] = {}
    for record in instance.all_logs(run_id):
        ev = record.dagster_event
        if ev is None:
            continue
        if ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED"):
            steps[ev.step_key] = ev.event_type_value.removeprefix("STEP_").lower()
        elif ev.event_type_value == "ASSET_CHECK_EVALUATION":
            data = ev.event_specific_data
            checks[data.check_name] = (data.asset_key.to_user_string(), data.passed)
    return steps, checks


def metadata(instance, key: str, run_id: str) -> dict | None:
    import dagster as dg

    ev = instance.get_latest_materialization_event(dg.AssetKey(key))
    if ev is None or ev.run_id != run_id:
        return None
    return {k: getattr(v, "value", v) for k, v in ev.asset_materialization.metadata.items()}


def print_manifest(vault, uri: str, sha256: str) -> None:
    manifest = vault.load_manifest(uri)
    summary = manifest.summary()
    print(f"\nmanifest   {uri}\nsha256     {sha256}\nformat     {summary['data_format']}\n")
    print(f"{'split':<7} {'stage':<8} {'shards':>6} {'records':>8} {'bytes':>9}")
    for split, info in summary["splits"].items():
        for stage, st in info["stages"].items():
            print(f"{split:<7} {stage:<8} {st['shards']:>6} {st['records']:>8} {st['bytes']:>9}")
        if info["curricula"]:
            print(f"{'':<7} curricula: " + ", ".join(f"{k} ({v} shards)" for k, v in info["curricula"].items()))


def print_report(vault, uri: str, sha256: str) -> None:
    from trainvault.contamination import read_report

    report = read_report(vault, uri, sha256=sha256).document
    print(f"\ncontamination report  {uri}\nsha256                {sha256}")
    print(f"method {report.method.id}, n={report.method.n}, release {report.eval_release.id}; "
          f"scanned {report.coverage.shards} shards, {report.coverage.records} records, {report.coverage.tokens} tokens\n")
    print(f"{'benchmark':<20} {'items':>5} {'contaminated':>12} {'uncheckable':>11}  pass")
    for b in report.benchmarks:
        print(f"{b.name:<20} {b.n_items:>5} {b.n_contaminated:>12} {b.n_uncheckable:>11}  {'yes' if b.passed else 'NO'}")
    for it in report.contaminated_items:
        h = it.hits[0]
        print(f"  contaminated: {it.benchmark} {it.item_id} in {h.split}/{h.shard} record {h.record_index} "
              f"({it.matched_ngrams}/{it.total_ngrams} n-grams)")


def open_as_trainer(uri: str, sha256: str, trusted_key: str, batches: int = 3) -> None:
    """The trainer's side: library only, no Dagster."""
    from trainvault import TrainVault
    from trainvault.approval import load_verifying_key

    approved = TrainVault().open_approved(uri, sha256, trusted_keys=[load_verifying_key(trusted_key)])
    loader = approved.split_data_loader(collate_fn=list, dataloader_args={"batch_size": 8}).load(
        "train", curriculum_stages=["easy", "medium", "hard"])
    print(f"\nopened as a trainer: {approved.summary.shards} shards, {approved.summary.records} records, "
          f"{approved.summary.bytes_hashed} bytes re-hashed; approved loader over train (easy, medium, hard):")
    for n, batch in enumerate(loader, 1):
        print(f"  batch {n}: {len(batch)} records, {batch[0]['id']}: {batch[0]['text'][:48]!r}")
        if n == batches:
            break


def main() -> int:
    home = Path(os.environ.get("DAGSTER_HOME") or REPO / ".dagster_home").resolve()
    prepare_home(home)
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore", "DAGSTER_DISABLE_TELEMETRY": "1"}
    os.environ["DAGSTER_HOME"] = str(home)
    spec = example_spec()
    prepare_keys(spec)
    pub = spec.publication()
    planted = spec.generator.endswith(":planted_records")
    print(f"trainvault demo: dataset {spec.name} {pub.version}, {len(spec.partition_keys())} shards x "
          f"{spec.records_per_shard} records{' (evaluation items PLANTED in train/hard/0)' if planted else ''}")
    print(f"store {spec.root_uri}   DAGSTER_HOME {home}\n")

    log = Path(spec.root_uri if "://" not in spec.root_uri else REPO / ".demo").parent / "lifecycle-run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    rc, seconds = materialize(spec, env, log)

    import dagster as dg

    from trainvault import TrainVault

    instance = dg.DagsterInstance.get()
    runs = instance.get_runs(limit=1)
    if not runs:
        print(f"no Dagster run was recorded; see {log}")
        return 1
    run = runs[0]
    steps, checks = run_summary(instance, run.run_id)
    print()
    for step in STEPS:
        status = steps.get(step, "not executed")
        extra = ""
        if step == "dataset_shards" and (m := metadata(instance, step, run.run_id)):
            extra = f"  {m['shards']} partitions: {m['written']} written, {m['reused']} reused unchanged"
        print(f"  {step:<22} {status}{extra}")
        for check, (owner, passed) in checks.items():
            if owner == step:
                print(f"  {'  check ' + check:<22} {'PASSED' if passed else 'FAILED'}")
    print(f"run {run.run_id}: {run.status.value} in {seconds:.1f} s (exit {rc})")

    vault = TrainVault()
    if m := metadata(instance, "data_manifest", run.run_id):
        print_manifest(vault, m["uri"], m["sha256"])
    if m := metadata(instance, "contamination_report", run.run_id):
        print_report(vault, m["uri"], m["sha256"])
    approval = metadata(instance, "approved_dataset", run.run_id)

    if planted:
        approvals = vault.storage.list(pub.base + "/approvals")
        failed = checks.get("within_contract", ("", True))[1] is False
        print(f"\nthe check within_contract {'FAILED' if failed else 'did not fail'}; "
              f"approved_dataset {steps.get('approved_dataset', 'was not executed')}; "
              f"approval records for {pub.version}: {len(approvals)}")
        ok = failed and approval is None and not approvals
        print("as expected: contaminated data is never approved" if ok else "UNEXPECTED: see the log above")
        return 0 if ok else 1
    if rc != 0 or approval is None:
        print(f"\nthe lifecycle did not finish; the last lines of {log}:")
        print("\n".join(log.read_text(errors="replace").splitlines()[-25:]))
        return 1
    print(f"\napproval   {approval['uri']}\nsha256     {approval['sha256']}\na trainer opens it with:\n")
    from assets.approval import trainer_snippet

    print("    " + trainer_snippet(approval["uri"], approval["sha256"], spec.trusted_keys_path).replace("\n", "\n    "))
    open_as_trainer(approval["uri"], approval["sha256"], spec.trusted_keys_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
