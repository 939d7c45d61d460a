"""The dataset catalog (pipelines/datasets.yaml): where it is found, what an entry may say, and
malformed entries failing the location load with an error naming the dataset and the field."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

dg = pytest.importorskip("dagster")

from pipelines.catalog import datasets_path, load_datasets  # noqa: E402
from pipelines.definitions import build_definitions  # noqa: E402
from resources.dataset import parse_partition_key  # noqa: E402
from trainvault.errors import ConfigurationError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")
ROOT = Path(__file__).resolve().parents[2]


def entry(name: str = "tiny", **fields) -> dict:
    base = {
        "name": name,
        "root_uri": "store",
        "generator": "pipelines.examples.notes:generate_notes",
        "stage_metadata": None,
        "data_format": "jsonl.gz",
        "records_per_shard": 10,
        "splits": [{"name": "train", "shards": 2}],
        "evaluation_sources": ["pipelines.examples.benchmarks:synthetic_benchmark"],
        "owners": ["team:data", "ana@example.com"],
        "tags": {"domain": "text"},
        "schedule": {"cron": "15 2 * * *", "enabled": True},
    }
    base.update(fields)
    return base


def catalog(tmp_path: Path, *entries: dict) -> Path:
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": list(entries)}))
    return path


def test_the_shipped_catalog_serves_two_demo_datasets() -> None:
    specs = load_datasets(ROOT / "pipelines" / "datasets.yaml")
    assert [s.name for s in specs] == ["demo_curriculum", "demo_text"]
    curriculum, text = specs
    assert [s.stages for s in curriculum.splits] == [["easy", "medium", "hard"], [], []]
    assert (curriculum.data_format, text.data_format) == ("msgpack.zst", "jsonl.gz")
    assert all(not s.stages for s in text.splits)
    assert not curriculum.schedule.enabled and curriculum.schedule.cron == "0 3 * * *"
    # README: demo_curriculum allows exclusions (up to 1/100), contamination blocks demo_text.
    assert (curriculum.policy.allow_exclusions, curriculum.policy.max_excluded_fraction) == (True, "1/100")
    assert not text.policy.allow_exclusions


def test_scanner_keys_and_the_policy_block_make_the_gates_policy(tmp_path) -> None:
    from trainvault.approval import load_verifying_key, write_keypair

    write_keypair(tmp_path / "scanner")
    (spec,) = load_datasets(
        catalog(
            tmp_path,
            entry(
                scanner_key_path="scanner.key",
                trusted_scanner_keys=["scanner.pub"],
                policy={
                    "rescan_min_shards": 3,
                    "rescan_fraction": "5/100",
                    "rescan_seed": 7,
                    "allow_exclusions": True,
                    "max_excluded_fraction": "2/1000",
                },
            ),
        )
    )
    assert spec.scanner_key_path == str(tmp_path / "scanner.key")  # relative to the YAML file's folder
    assert spec.trusted_scanner_keys == [str(tmp_path / "scanner.pub")]
    policy = spec.approval_policy("a" * 64, "b" * 64)
    assert policy.scanner_keys == (load_verifying_key(tmp_path / "scanner.pub"),)
    assert (policy.rescan_min_shards, policy.rescan_fraction, policy.rescan_seed) == (3, (5, 100), 7)
    assert (policy.allow_exclusions, policy.max_excluded_fraction) == (True, (2, 1000))
    assert policy.rescan_count(100) == 5 and policy.rescan_count(10) == 3
    assert spec.scanner_signing_key().public_key == load_verifying_key(tmp_path / "scanner.pub")

    # No scanner settings: the scanner signs with the dataset's signing key and the gate trusts the approver's key.
    write_keypair(tmp_path / "approver")
    (plain,) = load_datasets(
        catalog(tmp_path, entry(signing_key_path="approver.key", trusted_keys_path="approver.pub"))
    )
    assert plain.scanner_key_paths() == [str(tmp_path / "approver.pub")]
    assert plain.scanner_signing_key().public_key == load_verifying_key(tmp_path / "approver.pub")
    assert not plain.policy.allow_exclusions and plain.approval_policy().rescan_count(100) == 2


def test_the_trace_command_and_the_snippet_ask_for_the_same_policy(tmp_path) -> None:
    """Both come from one trainer policy: a re-scan depth or exclusion limit the approver set is in both."""
    from assets.approval import policy_snippet, trace_command
    from trainvault.approval import ApprovalPolicy, load_verifying_key
    from trainvault.approval.keys import write_keypair
    from trainvault.cli import build_parser
    from trainvault.cli.approval import policy_from_args

    write_keypair(tmp_path / "scanner")
    settings = {"rescan_min_shards": 3, "rescan_fraction": "5/1000", "max_excluded_fraction": "2/1000"}
    (spec,) = load_datasets(
        catalog(
            tmp_path,
            entry(
                scanner_key_path="scanner.key",
                trusted_scanner_keys=["scanner.pub"],
                policy={**settings, "allow_exclusions": True, "unscanned_fields": ["meta.title"]},
            ),
        )
    )
    command = trace_command("a.json", "0" * 64, spec, exclusions=True, batch_size=8, stages=None)
    args = build_parser().parse_args(shlex.split(command)[1:])
    from_command = policy_from_args(args)
    from_snippet = eval(
        policy_snippet(spec, exclusions=True),
        {"ApprovalPolicy": ApprovalPolicy, "load_verifying_key": load_verifying_key},
    )
    assert from_command == from_snippet
    assert (from_command.rescan_min_shards, from_command.rescan_fraction) == (3, (5, 1000))
    assert from_command.max_excluded_fraction == (2, 1000) and from_command.unscanned_fields == ("meta.title",)


def test_a_split_without_stages_has_shards_of_no_stage(tmp_path) -> None:
    # shards() once inferred `str` for the stage: a stageless split's shards must carry None, which the
    # generator, the stage metadata and the partition key (`_`) each read as "no stage".
    (spec,) = load_datasets(
        catalog(
            tmp_path,
            entry(
                splits=[{"name": "train", "stages": ["easy", "hard"], "shards": 1}, {"name": "valid", "shards": 1}],
                generator="pipelines.examples.curriculum:generate_records",
                stage_metadata="pipelines.examples.curriculum:stage_metadata",
            ),
        )
    )
    assert spec.shards() == [("train", "easy", "0"), ("train", "hard", "0"), ("valid", None, "0")]
    assert spec.partition_keys() == ["train/easy/0", "train/hard/0", "valid/_/0"]
    assert [parse_partition_key(k) for k in spec.partition_keys()] == spec.shards()
    assert spec.metadata_of_stage("valid", None) is None and spec.metadata_of_stage("train", "hard") == {
        "name": "hard",
        "family": "composition",
        "operands": 5,
        "max_value": 1000,
    }
    (first, *_) = spec.records("valid", None, "0")
    assert first["id"].startswith("valid-none-0-")  # the generator saw no stage, not the text "None"


def test_an_entry_becomes_prefixed_assets_a_job_and_a_schedule(tmp_path) -> None:
    (spec,) = load_datasets(catalog(tmp_path, entry()))
    assert spec.root_uri == str(tmp_path / "store")  # relative to the YAML file's folder
    assert spec.partition_keys() == ["train/_/0", "train/_/1"]
    defs = build_definitions([spec])
    graph = defs.resolve_asset_graph()
    manifest = graph.get(dg.AssetKey(["tiny", "data_manifest"]))
    assert manifest.owners == ["team:data", "ana@example.com"] and manifest.tags["domain"] == "text"
    assert manifest.group_name == "tiny" and manifest.tags["trainvault/stage"] == "build" and "file" in manifest.kinds
    assert graph.get(dg.AssetKey(["tiny", "approved_dataset"])).kinds >= {"pytorch", "file"}
    assert {graph.get(k).group_name for k in graph.get_all_asset_keys()} == {"tiny"}  # one unit per dataset
    assert {graph.get(k).tags["trainvault/stage"] for k in graph.get_all_asset_keys()} == {
        "build",
        "evaluate",
        "approve",
    }
    assert all(graph.get(k).description for k in graph.get_all_asset_keys())
    schedule = defs.resolve_schedule_def("nightly_rebuild_tiny")
    assert schedule.cron_schedule == "15 2 * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    shards = graph.get(dg.AssetKey(["tiny", "dataset_shards"])).partitions_def
    assert shards.get_partition_keys() == ["train/_/0", "train/_/1"]


def test_environment_variables_fill_values_and_unset_ones_are_named(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TINY_ROOT", "s3://bucket/publications")
    monkeypatch.setenv("TINY_RECORDS", "7")
    path = catalog(
        tmp_path,
        entry(
            root_uri="${TINY_ROOT}",
            records_per_shard="${TINY_RECORDS:-3}",
            splits=[{"name": "train", "shards": "${TINY_SHARDS:-3}"}],
        ),
    )
    (spec,) = load_datasets(path)
    assert (spec.root_uri, spec.records_per_shard, len(spec.partition_keys())) == ("s3://bucket/publications", 7, 3)
    monkeypatch.delenv("TINY_ROOT")
    with pytest.raises(ConfigurationError, match=r"'tiny'.*field 'root_uri' needs \$\{TINY_ROOT\}"):
        load_datasets(path)


def test_the_catalog_path_comes_from_the_environment_else_pyproject() -> None:
    assert datasets_path({}) == ROOT / "pipelines" / "datasets.yaml"  # [tool.trainvault] datasets
    assert datasets_path({"TRAINVAULT_DATASETS": "/elsewhere/d.yaml"}) == Path("/elsewhere/d.yaml")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "bad-name"}, r"dataset 'bad-name': field 'name' must be an identifier"),
        ({"name": "9lives"}, r"dataset '9lives': field 'name' must be an identifier"),
        ({"records_per_shard": "many"}, r"dataset 'tiny': field records_per_shard"),
        ({"root_uri": None}, r"dataset 'tiny': field root_uri"),
        ({"splits": [{"name": "train", "shards": 0}]}, r"dataset 'tiny': field 'splits.train.shards'"),
        ({"splits": []}, r"dataset 'tiny': field 'splits' declares no shard"),
        ({"splits": 5}, r"dataset 'tiny': field 'splits' must be a list"),
        ({"splits": [{"name": "train", "shard": 2}]}, r"dataset 'tiny': field splits.0.shard_ids"),
        ({"generator": "not a callable"}, r"dataset 'tiny': field 'generator'"),
        ({"evaluation_sources": ["x"]}, r"dataset 'tiny': field 'evaluation_sources.0'"),
        ({"owners": ["somebody"]}, r"dataset 'tiny': field 'owners' has 'somebody'"),
        ({"tags": {"a key": "x"}}, r"dataset 'tiny': field 'tags'"),
        ({"schedule": {"cron": "nightly"}}, r"dataset 'tiny': field 'schedule.cron'"),
        ({"data_format": "csv"}, r"dataset 'tiny': field 'data_format' is 'csv', expected one of msgpack.zst"),
        ({"root_uri": "ftp://host/store"}, r"dataset 'tiny': field 'root_uri': ftp://host/store: unsupported scheme"),
        (
            {"curricula": [{"split": "test", "name": "c", "stages": ["a"]}]},
            r"dataset 'tiny': field 'curricula.c' orders stages \['a'\] of split 'test'",
        ),
        (
            {
                "splits": [{"name": "train", "stages": ["a"], "shards": 1}],
                "curricula": [{"split": "train", "name": "c", "stages": ["a", "b"]}],
            },
            r"field 'curricula.c' orders stages",
        ),
        ({"ngram_n": 0}, r"dataset 'tiny': field 'ngram_n' must be at least 1"),
        ({"schedule": {"cron": "99 99 * * *"}}, r"dataset 'tiny': field 'schedule.cron' is '99 99"),
        (
            {"splits": [{"name": "train", "shards": 2}, {"name": "train", "shards": 1}]},
            r"dataset 'tiny': field 'splits' names 'train' twice",
        ),
        (
            {"splits": [{"name": "train", "stages": ["a", "a"], "shards": 1}]},
            r"dataset 'tiny': field 'splits.train.stages' names 'a' twice",
        ),
        (
            {"splits": [{"name": "train", "shard_ids": ["0", "0"]}]},
            r"dataset 'tiny': field 'splits.train.shard_ids' names '0' twice",
        ),
        ({"splits": [{"name": "tr/ain", "shards": 1}]}, r"dataset 'tiny': field 'splits' has 'tr/ain'"),
        (
            {"splits": [{"name": "train", "stages": ["_"], "shards": 1}]},
            r"dataset 'tiny': field 'splits.train.stages' has '_'",
        ),
        (
            {"splits": [{"name": "train", "shard_ids": ["a/b"]}]},
            r"dataset 'tiny': field 'splits.train.shard_ids' has 'a/b'",
        ),
        ({"schedule": {"cron": "0 3 * * *", "enabled": "sometimes"}}, r"dataset 'tiny': field schedule.enabled"),
        ({"colour": "blue"}, r"dataset 'tiny': field colour"),
        (
            {"policy": {"rescan_fraction": "2%"}},
            r"dataset 'tiny': field 'policy.rescan_fraction' is '2%', expected N/D",
        ),
        ({"policy": {"max_excluded_fraction": "3/2"}}, r"dataset 'tiny': field 'policy.max_excluded_fraction'"),
        ({"policy": {"max_excluded_fraction": "1/0"}}, r"dataset 'tiny': field 'policy.max_excluded_fraction'"),
        ({"policy": {"rescan_min_shards": -1}}, r"dataset 'tiny': field 'policy.rescan_min_shards'"),
        ({"policy": {"scanner_threshold": 0}}, r"dataset 'tiny': field 'policy.scanner_threshold'"),
        ({"policy": {"allow_exclusions": "perhaps"}}, r"dataset 'tiny': field policy.allow_exclusions"),
        ({"policy": {"exclude": True}}, r"dataset 'tiny': field policy.exclude is not a policy field"),
        ({"schedule": {"cron": "0 3 * * *", "on": True}}, r"dataset 'tiny': field schedule.on is not a schedule field"),
        ({"trusted_scanner_keys": "scanner.pub"}, r"dataset 'tiny': field trusted_scanner_keys"),
    ],
)
def test_a_malformed_entry_names_the_dataset_and_the_field(tmp_path, fields, message) -> None:
    path = catalog(tmp_path, entry("ok"), entry(**fields))
    with pytest.raises(ConfigurationError, match=message):
        load_datasets(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("datasets: [", r"not valid YAML"),
        ("other: 1", r"expected a non-empty list under 'datasets:'"),
        ("datasets: [3]", r"entry 0 is not a mapping"),
        ("datasets:\n  - {? [a, b] : 1}\n", r"(?s)not valid YAML .*unhashable key"),
        (
            "datasets:\n  - name: a\n    policy: {}\n    policy: {allow_exclusions: true}\n",
            r"key 'policy' is given twice .*line 4",
        ),
    ],
)
def test_a_malformed_file_is_refused(tmp_path, text, message) -> None:
    path = tmp_path / "datasets.yaml"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        load_datasets(path)


def test_a_missing_file_and_a_twice_declared_dataset_are_refused(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match=r"cannot read it.*TRAINVAULT_DATASETS"):
        load_datasets(tmp_path / "absent.yaml")
    with pytest.raises(ConfigurationError, match=r"dataset 'tiny' is declared twice"):
        load_datasets(catalog(tmp_path, entry(), entry()))


def test_a_malformed_catalog_fails_the_location_load(tmp_path) -> None:
    """`dagster definitions validate` (what the webserver does on load) fails, naming dataset and field."""
    path = catalog(tmp_path, entry(splits=[{"name": "train", "shards": -1}]))
    env = {**os.environ, "TRAINVAULT_DATASETS": str(path), "DAGSTER_HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    cmd = [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-m", "pipelines.definitions"]
    bad = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0
    assert "ConfigurationError" in bad.stdout + bad.stderr
    assert "dataset 'tiny': field 'splits.train.shards'" in bad.stdout + bad.stderr
    path.write_text(yaml.safe_dump({"datasets": [entry()]}))
    good = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]


def test_fields_the_policy_exempts_are_approved_and_the_trainer_lines_exempt_them_too(tmp_path) -> None:
    """A nested text field the contract cannot scan denies the approval, unless the catalog's
    `policy.unscanned_fields` exempts it; the trainer lines the approval's metadata gives then
    pass the same exemption and open it."""
    from pipelines.definitions import whole_build_tags
    from resources.storage import StorageResource
    from trainvault.approval import write_keypair

    write_keypair(tmp_path / "approver")
    keys = {"signing_key_path": "approver.key", "trusted_keys_path": "approver.pub"}
    runs = {}
    for name, unscanned in (("denied", []), ("exempt", ["meta.title"])):
        generator = "support.titled_notes:generate_titled_notes"
        path = catalog(tmp_path, entry(name, generator=generator, policy={"unscanned_fields": unscanned}, **keys))
        (spec,) = load_datasets(path)
        assert spec.approval_policy().unscanned_fields == tuple(unscanned)
        job = build_definitions([spec], StorageResource()).resolve_job_def(f"lifecycle_{name}")
        runs[name] = job.execute_in_process(
            instance=dg.DagsterInstance.ephemeral(), tags=whole_build_tags(spec), raise_on_error=False
        )
    denied = runs["denied"]
    assert not denied.success
    (failure,) = [e for e in denied.all_events if e.is_step_failure]
    assert failure.step_key == "denied__approved_dataset"
    assert "'meta.title' carry text" in str(failure.event_specific_data.error)

    assert runs["exempt"].success
    (approval,) = [
        e for e in runs["exempt"].get_asset_materialization_events() if e.asset_key.path[-1] == "approved_dataset"
    ]
    lines = (
        approval.materialization.metadata["open it (trainer)"].value.removeprefix("```python\n").removesuffix("\n```")
    )
    assert "unscanned_fields=['meta.title']" in lines
    scope: dict = {}
    exec(lines, scope)  # the lines the UI shows, run as a trainer pastes them
    batch = next(iter(scope["loader"]))
    assert batch and all(r["meta"]["title"].startswith("Field notes, train shard") for r in batch)
    # The trace command the demo prints passes the exemption too.
    from assets.approval import trace_command

    command = trace_command(
        approval.materialization.metadata["dagster/uri"].value,
        "0" * 64,
        spec,
        exclusions=False,
        batch_size=8,
        stages=None,
    )
    assert "--unscanned-field meta.title" in command


def test_a_malformed_unscanned_field_fails_the_load_naming_the_field(tmp_path) -> None:
    path = catalog(tmp_path, entry(policy={"unscanned_fields": ["meta."]}))
    with pytest.raises(ConfigurationError, match=r"'tiny'.*field 'policy.unscanned_fields' holds \['meta.'\]"):
        load_datasets(path)
