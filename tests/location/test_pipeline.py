"""The Dagster code location on real ephemeral instances, in process: the whole lifecycle
(scanner-signed scan and report, sample re-scan, Croissant card), planted contamination
that blocks or, where the policy allows, is excluded, a report signed by an untrusted
scanner, a standalone approval after a failed report, rebuilds that write nothing, new
versions for changed inputs, an OMS signature beside the approval, and definitions that load
(locally and at scale)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

dg = pytest.importorskip("dagster")

from pipelines.definitions import build_definitions, whole_build_tags  # noqa: E402
from pipelines.examples.spec import example_spec, key_fields  # noqa: E402
from resources.policy import ApprovalPolicyConfig  # noqa: E402
from resources.storage import StorageResource  # noqa: E402
from trainvault import TrainVault  # noqa: E402
from trainvault.approval import load_verifying_key, write_keypair  # noqa: E402
from trainvault.canonical import sha256_hex  # noqa: E402
from trainvault.errors import ApprovalError  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:Parameter `backfill_policy`"),
    pytest.mark.filterwarnings("ignore:Parameter `data_version`"),
]

ROOT = Path(__file__).resolve().parents[2]
LIFECYCLE = {
    "producer_pins",
    "dataset_shards",
    "data_manifest",
    "training_scan",
    "evaluation_release",
    "contamination_scan",
    "contamination_report",
    "contamination_exclusions",
    "dataset_profile",
    "approved_dataset",
}
PLANTED = {
    "humaneval:HumanEval/0",
    "humaneval:HumanEval/7",
    "humaneval:HumanEval/42",
    "synthetic-wordprob:wordprob/3",
    "synthetic-wordprob:wordprob/11",
}
#: Contamination blocks: no exclusions (the demo_curriculum entry allows them by default).
BLOCKING = ApprovalPolicyConfig(allow_exclusions=False)


def small_spec(root: Path, keys: Path, records: int = 20, **overrides):
    """Five shards of 20 records: train easy/medium/hard, valid, test; scanned and signed by the
    scanner key pair beside `keys` (``scanner.key``, ``scanner.pub``)."""
    fields = {**key_fields(keys, keys.with_name("scanner")), **overrides}
    return example_spec(str(root), shards_per_stage=1, eval_shards=1, records=records, **fields)


def run_lifecycle(spec, instance, *, selection=None):
    defs = build_definitions([spec], StorageResource())
    job = defs.resolve_job_def(f"lifecycle_{spec.name}")
    if selection is None:
        return job.execute_in_process(instance=instance, tags=whole_build_tags(spec), raise_on_error=False)
    return job.execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey([spec.name, k]) for k in selection], raise_on_error=False
    )


def materialized(result) -> set[str]:
    """The asset names (without the dataset prefix) the run materialized."""
    return {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}


def made(result, name: str) -> dict:
    """The metadata of the run's (unpartitioned) materialization of asset `name`."""
    (ev,) = [
        e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == name and e.partition is None
    ]
    return {k: getattr(v, "value", v) for k, v in ev.materialization.metadata.items()}


def observations(instance: dg.DagsterInstance, spec) -> list[dict]:
    """The metadata of every observation of `spec`'s approved_dataset, newest first."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey([spec.name, "approved_dataset"])), limit=100, ascending=False
    ).records
    return [{k: v.value for k, v in r.asset_observation.metadata.items()} for r in records if r.asset_observation]


def checks(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    prefix = tmp_path_factory.mktemp("keys") / "approver"
    write_keypair(prefix)
    write_keypair(prefix.with_name("scanner"))
    return prefix


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="module")
def clean(store_root, keys):
    """One clean lifecycle run on an ephemeral instance."""
    spec = small_spec(store_root, keys)
    instance = dg.DagsterInstance.ephemeral()
    result = run_lifecycle(spec, instance)
    return spec, instance, result


@pytest.fixture(scope="module")
def planted(store_root, keys):
    """The same dataset with evaluation items planted into train/hard/0, on its own instance."""
    spec = small_spec(store_root, keys, plant=True, policy=BLOCKING)
    instance = dg.DagsterInstance.ephemeral()
    result = run_lifecycle(spec, instance)
    return spec, instance, result


@pytest.fixture(scope="module")
def excluded(tmp_path_factory, keys):
    """The planted dataset under a policy that allows exclusions (5 of 105 records: up to 5/100)."""
    spec = small_spec(
        tmp_path_factory.mktemp("excluded"),
        keys,
        plant=True,
        policy=ApprovalPolicyConfig(allow_exclusions=True, max_excluded_fraction="5/100"),
    )
    result = run_lifecycle(spec, dg.DagsterInstance.ephemeral())
    return spec, result


def test_full_lifecycle_passes_and_a_trainer_opens_the_approval(clean, keys) -> None:
    spec, _, result = clean
    assert result.success
    assert materialized(result) >= LIFECYCLE
    assert {"within_contract": True, "approval_opens": True}.items() <= checks(result).items()
    shards = [
        e.partition for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == "dataset_shards"
    ]
    assert sorted(shards) == sorted(spec.partition_keys()) and len(shards) == 5

    layout = spec.layout()
    manifest = made(result, "data_manifest")
    assert manifest["uri"] == layout.manifest_uri and manifest["uri"].startswith(layout.base + "/")
    assert layout.base.endswith(f"/demo_curriculum/{layout.version}")
    report = made(result, "contamination_report")
    assert report["pass"] is True and report["contaminated item ids"] == []
    # The default contract's evidence rule (ngram-exact-v3): what it leaves out is shown, per benchmark and by item.
    assert all("uncounted" in row.data for row in report["per benchmark"].records)
    assert "uncounted items" in report
    approval = made(result, "approved_dataset")
    assert approval["uri"].startswith(layout.base + "/approvals/")
    assert approval["sha256"] in approval["open it (trainer)"]

    assert "policy=ApprovalPolicy(scanner_keys=[load_verifying_key(" in approval["open it (trainer)"]
    assert "allow_exclusions" not in approval["open it (trainer)"]  # nothing excluded: none bound
    assert made(result, "contamination_exclusions")["excluded records"] == 0

    # Scan manifest and report are attestations signed by the scanner's key; the gate re-scanned 2 of 5 shards.
    scanner = load_verifying_key(keys.with_name("scanner.pub")).keyid
    assert made(result, "training_scan")["signed by (scanner key id)"] == scanner
    assert report["signed by (scanner key id)"] == scanner and report["uri"].endswith(".dsse.json")
    assert approval["report signed by"] == [scanner] and len(approval["re-scanned shards"]) == 2

    # The trainer: library only, pinned by URI and sha256, trusting the public keys, under the dataset's policy.
    approved = TrainVault().open_approved(
        approval["uri"],
        approval["sha256"],
        trusted_keys=[load_verifying_key(f"{keys}.pub")],
        policy=spec.approval_policy(),
    )
    assert approved.summary.attestation.report_signers == [scanner]
    assert approved.summary.attestation.scan_manifest_signers == [scanner]
    assert approved.summary.exclusions is None and "exclusions" not in approved.bindings
    assert approved.manifest_sha256 == manifest["sha256"]
    assert {"data_manifest", "training_scan_manifest", "contamination_report", "producer_pins"} <= set(
        approved.bindings
    )
    assert {"train_metrics", "valid_metrics", "test_metrics"} <= set(approved.bindings)  # the profile's sidecars
    approval_meta = approved.approval.provenance if approved.approval else {}
    assert approval_meta.get("dagster_run_id") == result.run_id
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 7}).load("train")
    records = [r for batch in loader for r in batch]
    assert len(records) == 60
    assert records[0]["id"] == "train-easy-0-00000"


def test_the_approval_writes_a_croissant_card_mlcroissant_loads(clean) -> None:
    mlc = pytest.importorskip("mlcroissant")
    spec, _, result = clean
    approval = made(result, "approved_dataset")
    path = Path(approval["croissant uri"].removeprefix("file://"))
    assert path.parent == Path(spec.layout().base.removeprefix("file://"))
    assert approval["croissant written"] is True and sha256_hex(path.read_bytes()) == approval["croissant sha256"]
    card = json.loads(path.read_bytes())
    assert card["name"] == "demo_curriculum" and card["version"] == spec.layout().version
    assert card["tv:approval"]["record"] == {
        **card["tv:approval"]["record"],
        "uri": approval["uri"],
        "sha256": approval["sha256"],
    }
    assert {r["name"] for r in card["recordSet"]} == {"train", "valid", "test"}
    dataset = mlc.Dataset(jsonld=str(path))
    assert not dataset.metadata.ctx.issues.errors


def test_an_oms_key_writes_a_bundle_model_signing_accepts_and_the_command_that_verifies_it(
    tmp_path_factory, keys
) -> None:
    from model_signing import verifying

    from trainvault.approval.ecdsa import write_ecdsa_keypair

    _, public, _ = write_ecdsa_keypair(keys.with_name("oms"))
    spec = small_spec(tmp_path_factory.mktemp("oms"), keys, oms_key_path=str(keys.with_name("oms.key")))
    result = run_lifecycle(spec, dg.DagsterInstance.ephemeral())
    approval = made(result, "approved_dataset")
    bundle = Path(approval["oms signature"])
    assert bundle.parent.name == "oms" and bundle.parent.parent.name == "approvals"
    data = Path(spec.layout().data_root.removeprefix("file://"))
    command = f"model_signing verify key {data} --signature {bundle} --public_key {public}"
    assert approval["verify it (model_signing)"] == f"`{command}`"
    verifying.Config().use_elliptic_key_verifier(public_key=public).verify(data, bundle)
    argv = [str(Path(sys.executable).with_name("model_signing")), *shlex.split(command)[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Verification succeeded" in done.stdout, done.stdout + done.stderr


def test_planted_records_are_excluded_where_the_policy_allows_and_the_loader_never_yields_them(excluded, keys) -> None:
    spec, result = excluded
    assert result.success, [str(e) for e in result.all_events if e.is_step_failure]
    assert checks(result) == {**checks(result), "within_contract": True, "approval_opens": True}
    exclusions = made(result, "contamination_exclusions")
    per = {row.data["benchmark"]: row.data["excluded records"] for row in exclusions["excluded per benchmark"].records}
    assert per == {"humaneval": 3, "synthetic-wordprob": 2} and exclusions["excluded records"] == 5
    approval = made(result, "approved_dataset")
    assert approval["excluded records"] == 5 and "allow_exclusions=True" in approval["open it (trainer)"]
    # The approval's page shows the verdict: pass, and per benchmark what was found and what is excluded.
    assert approval["verdict"].startswith("pass: ") and "after excluding 5 record(s)" in approval["verdict"]
    verdict = {row.data["benchmark"]: row.data for row in approval["per benchmark"].records}
    assert {name: (v["contaminated"], v["excluded records"], v["pass"]) for name, v in verdict.items()} == {
        "humaneval": (5, 3, False),  # items the planted records hold (near-duplicates included)
        "synthetic-wordprob": (6, 2, False),
    }

    approved = TrainVault().open_approved(
        approval["uri"],
        approval["sha256"],
        trusted_keys=[load_verifying_key(f"{keys}.pub")],
        policy=spec.approval_policy(),
    )
    assert approved.exclusions is not None and len(approved.exclusions.records) == 5
    assert sha256_hex(TrainVault().storage.get(exclusions["uri"])) == approved.bindings["exclusions"].sha256
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 7}).load("train")
    ids = [r["id"] for batch in loader for r in batch]
    assert len(ids) == len(set(ids)) == 60 and not [i for i in ids if i.startswith("planted-")]
    # The same approval under a trainer policy that allows no exclusions does not open.
    with pytest.raises(ApprovalError, match="does not allow exclusions"):
        TrainVault().open_approved(
            approval["uri"],
            approval["sha256"],
            trusted_keys=[load_verifying_key(f"{keys}.pub")],
            policy=BLOCKING.approval_policy(spec.scanner_public_keys()),
        )


def test_a_report_signed_by_an_untrusted_scanner_key_fails_the_approval_naming_the_key(
    clean, tmp_path, keys, store_root
) -> None:
    """The clean build's version rebuilt with another scanner key: its signatures go beside the
    first ones (a folder per key id), and the gate refuses them."""
    approvals = TrainVault().storage.list(clean[0].layout().base + "/approvals")
    write_keypair(tmp_path / "rogue")
    spec = small_spec(store_root, keys, scanner_key_path=str(tmp_path / "rogue.key"))
    assert spec.layout().version == clean[0].layout().version
    instance = dg.DagsterInstance.ephemeral()
    result = run_lifecycle(spec, instance)
    assert not result.success
    rogue = load_verifying_key(tmp_path / "rogue.pub").keyid
    assert made(result, "contamination_report")["signed by (scanner key id)"] == rogue
    assert f"/{rogue[:16]}/" in made(result, "contamination_report")["uri"]
    assert (
        made(result, "training_scan")["uri"]
        == spec.layout().base + f"/scans/{rogue[:16]}/training-scan-manifest-v1.dsse.json"
    )
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key.endswith("approved_dataset")
    message = failure.event_specific_data.error.message
    assert rogue in message and "not by 1 of the trusted scanner keys" in message
    # The refusal is said on approved_dataset's page too, with the approval that stays current (none here).
    (seen,) = observations(instance, spec)
    assert seen["approval status"].startswith(f"blocked in run {result.run_id}: the gate refused the approval: ")
    assert rogue in seen["approval status"] and seen["current approval"].startswith("none: ")
    assert "current approval" in failure.step_failure_data.user_failure_data.metadata
    assert TrainVault().storage.list(spec.layout().base + "/approvals") == approvals


def test_planted_contamination_fails_the_check_and_leaves_no_approval(planted) -> None:
    spec, instance, result = planted
    assert not result.success
    assert checks(result)["within_contract"] is False
    assert "approval_opens" not in checks(result)
    assert "approved_dataset" not in materialized(result)
    assert "contamination_report" in materialized(result)
    report = made(result, "contamination_report")
    assert report["pass"] is False
    ids = report["contaminated item ids"]
    assert set(ids) >= PLANTED
    layout = spec.layout()
    assert TrainVault().storage.list(layout.base + "/approvals") == []
    # approved_dataset's own page says the run approved nothing and that no approval is current.
    (seen,) = observations(instance, spec)
    assert seen["approval status"].startswith(f"blocked in run {result.run_id}: the blocking check within_contract")
    assert seen["current approval"].startswith("none: ") and "current approval sha256" not in seen


def test_after_a_blocked_run_the_approval_page_names_the_approval_that_stays_current(tmp_path, keys) -> None:
    # One instance, as the UI sees it: an approval (exclusions allowed), then the same version blocked
    # (exclusions forbidden). The asset's last materialization is still the first run's.
    allowed = ApprovalPolicyConfig(allow_exclusions=True, max_excluded_fraction="5/100")
    approving = small_spec(tmp_path / "store", keys, plant=True, policy=allowed)
    instance = dg.DagsterInstance.ephemeral()
    first = run_lifecycle(approving, instance)
    assert first.success and observations(instance, approving) == []
    approval = made(first, "approved_dataset")
    blocked = small_spec(tmp_path / "store", keys, plant=True, policy=BLOCKING)
    assert blocked.layout().version == approving.layout().version
    second = run_lifecycle(blocked, instance)
    assert not second.success and checks(second)["within_contract"] is False

    key = dg.AssetKey([blocked.name, "approved_dataset"])
    latest = instance.get_latest_materialization_event(key)
    assert latest is not None and latest.run_id == first.run_id  # what the UI shows beside "Failed"
    (seen,) = observations(instance, blocked)
    assert seen["approval status"].startswith(f"blocked in run {second.run_id}: ")
    assert seen["current approval sha256"] == approval["sha256"] and seen["current approval run"] == first.run_id
    assert seen["current approval uri"] == approval["uri"]
    assert seen["current approval"].startswith(f"{approval['sha256']} (version {approval['version']}, run ")


def test_approval_run_on_its_own_after_a_failed_report_fails(planted) -> None:
    spec, instance, _ = planted
    result = run_lifecycle(spec, instance, selection=["approved_dataset"])
    assert not result.success
    assert materialized(result) == set()
    failures = [e for e in result.all_events if e.is_step_failure]
    assert failures and "approval denied" in str(failures[0].event_specific_data.error.message)
    assert TrainVault().storage.list(spec.layout().base + "/approvals") == []


def test_rebuild_of_unchanged_inputs_writes_nothing_and_reuses_the_approval(clean, store_root) -> None:
    spec, instance, first = clean
    before = files(store_root)
    again = run_lifecycle(spec, instance)
    assert again.success
    # Every object (shards, documents, hand-offs, scans, the approval record) as it was: nothing written or touched.
    assert files(store_root) == before
    shards = [e for e in again.get_asset_materialization_events() if e.asset_key.path[-1] == "dataset_shards"]
    assert len(shards) == 5 and not any(e.materialization.metadata["written"].value for e in shards)
    approval = made(again, "approved_dataset")
    assert approval["written"] is False
    assert (approval["uri"], approval["sha256"]) == (
        made(first, "approved_dataset")["uri"],
        made(first, "approved_dataset")["sha256"],
    )


def test_a_changed_input_is_a_new_version_never_an_overwrite(clean, keys, store_root) -> None:
    spec, _, _ = clean
    before = files(store_root)
    changed = small_spec(store_root, keys, records=21)
    assert changed.layout().version != spec.layout().version
    instance = dg.DagsterInstance.ephemeral()
    result = run_lifecycle(changed, instance, selection=None)
    assert result.success
    after = files(store_root)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing published was touched
    assert any(f"/{changed.layout().version}/data/" in k for k in set(after) - set(before))


def test_definitions_load_with_jobs_schedule_and_blocking_checks() -> None:
    from pipelines.definitions import defs

    dg.Definitions.validate_loadable(defs)
    job = defs.resolve_job_def("lifecycle_demo_curriculum")
    keys = {k.to_user_string() for k in job.asset_layer.selected_asset_keys}
    assert {f"demo_curriculum/{name}" for name in LIFECYCLE} == keys
    schedule = defs.resolve_schedule_def("nightly_rebuild_demo_curriculum")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    checks = {
        spec.name: spec
        for c in [*defs.asset_checks, *defs.assets]
        for spec in c.check_specs
        if spec.asset_key.path[0] == "demo_curriculum"
    }
    assert {"within_contract", "approval_opens", "task_data_valid"} == set(checks)
    assert all(spec.blocking for spec in checks.values())
    request = schedule.evaluate_tick(dg.build_schedule_context(instance=dg.DagsterInstance.ephemeral())).run_requests[0]
    assert request.tags["dagster/asset_partition_range_start"] == "train/easy/0"


def test_scale_configuration_loads(tmp_path, monkeypatch) -> None:
    """Postgres storage with the Kubernetes run launcher, or with Celery: the instance configs
    validate, their classes accept their config, and the code location loads with each executor."""
    pytest.importorskip("dagster_postgres")
    pytest.importorskip("dagster_k8s")
    pytest.importorskip("dagster_celery")
    import yaml
    from dagster._config import process_config
    from dagster._core.instance.ref import InstanceRef
    from dagster._serdes.config_class import ConfigurableClassData  # noqa: F401

    for name in ("DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOST", "DAGSTER_PG_DB", "TRAINVAULT_IMAGE"):
        monkeypatch.setenv(name, "set-in-the-deployment")
    for config, launcher in (("dagster-k8s.yaml", "K8sRunLauncher"), ("dagster-celery.yaml", "DefaultRunLauncher")):
        home = tmp_path / config
        home.mkdir()
        shutil.copy(ROOT / "pipelines" / "deploy" / config, home / "dagster.yaml")
        ref = InstanceRef.from_dir(str(home))
        assert ref.run_storage_data.class_name == "PostgresRunStorage"
        assert ref.run_launcher_data.class_name == launcher
        for data in (ref.run_storage_data, ref.event_storage_data, ref.schedule_storage_data, ref.run_launcher_data):
            cls = getattr(__import__(data.module_name, fromlist=[data.class_name]), data.class_name)
            result = process_config(cls.config_type(), yaml.safe_load(data.config_yaml) or {})
            assert result.success, (config, data.class_name, result.errors)
    for executor in ("k8s", "celery"):
        defs = build_definitions([example_spec(str(tmp_path / "s3-root"))], executor=executor)
        dg.Definitions.validate_loadable(defs)
        assert defs.resolve_job_def("lifecycle_demo_curriculum").executor_def.name == executor


def test_the_library_imports_without_dagster() -> None:
    code = (
        "import sys; sys.modules['dagster'] = None\n"
        "import trainvault, trainvault.contamination, trainvault.approval, trainvault.loading\n"
        "assert not any(m == 'dagster' or m.startswith('dagster_') for m in sys.modules if sys.modules[m] is not None)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert out.returncode == 0, out.stderr


def test_lifecycle_against_s3_with_credentials_from_env_vars(
    s3_server, s3_bucket, s3_config, s3_key_id, s3_secret, keys, monkeypatch
) -> None:
    """The same code location against an S3 server: credentials come in as EnvVars and never
    show in the run's events; a trainer opens the approval from S3."""

    from resources.storage import storage_from_env

    for name, value in (
        ("TRAINVAULT_S3_URL", s3_server),
        ("TRAINVAULT_S3_REGION", "us-east-1"),
        ("TRAINVAULT_S3_KEY_ID", s3_key_id),
        ("TRAINVAULT_S3_SECRET", s3_secret),
    ):
        monkeypatch.setenv(name, value)
    store = storage_from_env()
    assert isinstance(store.secret_access_key, dg.EnvVar)
    spec = small_spec(f"s3://{s3_bucket}/publications", keys)
    instance = dg.DagsterInstance.ephemeral()
    result = (
        build_definitions([spec], store)
        .resolve_job_def("lifecycle_demo_curriculum")
        .execute_in_process(instance=instance, tags=whole_build_tags(spec), raise_on_error=False)
    )
    assert result.success
    approval = made(result, "approved_dataset")
    assert approval["uri"].startswith(f"s3://{s3_bucket}/publications/demo_curriculum/v-")
    assert "TRAINVAULT_S3_SECRET" in approval["open it (trainer)"]
    events = "\n".join(str(e) for e in instance.all_logs(result.run_id))
    assert s3_secret not in events and s3_key_id not in events
    approved = TrainVault(storage=s3_config(s3_server)).open_approved(
        approval["uri"],
        approval["sha256"],
        trusted_keys=[load_verifying_key(f"{keys}.pub")],
        policy=spec.approval_policy(),  # the approver's scanner key and re-scan sample
    )
    assert approved.summary.records == 100
