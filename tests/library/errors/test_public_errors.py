"""Bad settings, names, records, documents, selections and loader states raise typed errors
(the property is in `support.bad_input`, the `bad` fixture): TrainVault and S3 settings, the saver, load_manifest,
iter_shard, ungated_loader_factory and its state, and profiling."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvault import (
    ConfigurationError,
    EncodeError,
    IntegrityError,
    InvalidNameError,
    ManifestError,
    ProfileError,
    ResumeStateError,
    SelectionError,
    StorageConfig,
    StorageError,
    TrainVault,
    TrainVaultError,
    iter_shard,
)
from trainvault.canonical import sha256_hex

#: The walks' hypothesis settings (tests/library/errors/conftest.py registers them).
CHECK = settings.get_profile("bad-input")


@pytest.fixture(scope="module")
def vault() -> TrainVault:
    return TrainVault()


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, vault: TrainVault) -> str:
    """A small dataset on a local folder: split train (stages easy and hard) and split valid."""
    uri = str(tmp_path_factory.mktemp("pub") / "data-manifest-v1.json")
    saver = vault.dataset_saver(uri, block_bytes=64)
    saver.save("train", "easy", [{"i": i, "text": f"easy {i}"} for i in range(12)], shard_id="a")
    saver.save("train", "hard", [{"i": i, "text": f"hard {i}"} for i in range(12)], shard_id="b")
    saver.save("valid", None, [{"i": i} for i in range(5)], shard_id="v")
    saver.commit_manifest()
    return uri


# -- settings -------------------------------------------------------------------------------

CLOSED = "http://127.0.0.1:9"
S3_OK = dict(
    s3_base_url=CLOSED,
    region="us-east-1",
    access_key_id="key-id-value",
    secret_access_key="s3cr3t-value",
    connect_timeout_s=0.2,
    recovery_window_s=0.2,
    client_retries=0,
    first_contact_attempts=1,
)


@pytest.mark.parametrize(
    "override",
    [
        {"s3_base_url": "not a url"},
        {"s3_base_url": "http://[::1"},
        {"s3_base_url": "http://host:99999"},
        {"s3_base_url": "ftp://host"},
        {"region": "us east 1"},
        {"region": "ü"},
        {"access_key_id": "k\n"},
        {"secret_access_key": "s3cr3t-välue"},
        {"connect_timeout_s": -1},
        {"read_timeout_s": float("inf")},
        {"request_timeout_s": float("nan")},
        {"client_retries": -1},
        {"client_retries": "3"},
        {"first_contact_attempts": 0},
        {"backoff_max_s": True},
    ],
)
def test_bad_s3_settings_are_refused_before_any_request(bad: ModuleType, override: dict[str, Any]) -> None:
    vault = TrainVault(storage=StorageConfig(**{**S3_OK, **override}))
    err = bad.refused(lambda: vault.storage.get("s3://bucket/key"), ConfigurationError)
    assert "s3cr3t" not in str(err) and "key-id-value" not in str(err)  # keys are never shown


@CHECK
@given(endpoint=st.text(max_size=30).filter(lambda s: not s.startswith("http")), bucket=st.text(max_size=12))
def test_arbitrary_endpoints_and_buckets_raise_typed_errors(bad: ModuleType, endpoint: str, bucket: str) -> None:
    vault = TrainVault(storage=StorageConfig(**{**S3_OK, "s3_base_url": endpoint}))
    bad.refused(lambda: vault.storage.get(f"s3://{bucket}/key"))


def test_trainvault_settings(bad: ModuleType) -> None:
    bad.refused(lambda: TrainVault(region="us-east-1", storage=StorageConfig()), ConfigurationError)
    env = {"TRAINVAULT_S3_URL": "not a url", "TRAINVAULT_S3_KEY_ID": "k", "TRAINVAULT_S3_SECRET": "s"}
    vault = TrainVault.from_env(env)
    bad.refused(lambda: vault.load_manifest("s3://bucket/m.json"), ConfigurationError)


# -- saving ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({"data_format": "nope"}, ManifestError),
        ({"block_bytes": 0}, ConfigurationError),
        ({"block_bytes": -5}, ConfigurationError),
        ({"block_bytes": "big"}, TypeError),
        ({"manifest_uri": "ftp://host/m.json"}, StorageError),
        ({"manifest_uri": ""}, StorageError),
    ],
)
def test_dataset_saver_arguments(
    bad: ModuleType, vault: TrainVault, kwargs: dict[str, Any], kind: type[BaseException]
) -> None:
    args = {"manifest_uri": f"{bad.memory_root()}/m.json", **kwargs}
    bad.refused(lambda: vault.dataset_saver(args.pop("manifest_uri"), **args), kind)


@CHECK
@given(data=st.data())
def test_save_names_are_valid_or_refused(bad: ModuleType, vault: TrainVault, data: st.DataObject) -> None:
    split, stage, shard_id = data.draw(bad.NAMES), data.draw(st.none() | bad.NAMES), data.draw(bad.NAMES)
    saver = vault.dataset_saver(f"{bad.memory_root()}/m.json")
    got = bad.outcome(lambda: saver.save(split, stage, [{"a": 1}], shard_id=shard_id))
    assert got is None or isinstance(got, InvalidNameError), got


@CHECK
@given(data=st.data(), data_format=st.sampled_from(["msgpack.zst", "jsonl.gz"]))
def test_save_records_are_encoded_or_refused(
    bad: ModuleType, vault: TrainVault, data: st.DataObject, data_format: str
) -> None:
    values = bad.RECORD_VALUES
    records = data.draw(
        st.lists(st.dictionaries(st.text(max_size=6) | st.integers(), values, max_size=3) | values, max_size=4)
    )
    metadata = data.draw(st.none() | bad.JSON | st.dictionaries(st.text(max_size=4), values, max_size=2))
    saver = vault.dataset_saver(f"{bad.memory_root()}/m.json", data_format=data_format)
    got = bad.outcome(lambda: saver.save("train", "s", records, shard_id="x", curriculum_metadata=metadata))
    assert got is None or isinstance(got, (EncodeError, ManifestError)), got


def test_save_records_of_a_wrong_type(bad: ModuleType, vault: TrainVault) -> None:
    saver = vault.dataset_saver(f"{bad.memory_root()}/m.json")
    bad.refused(lambda: saver.save("train", None, None, shard_id="x"), TypeError)
    bad.refused(lambda: saver.save("train", None, "abc", shard_id="y"), EncodeError)


# -- documents ------------------------------------------------------------------------------


@CHECK
@given(data=st.data())
def test_load_manifest_of_arbitrary_json(bad: ModuleType, vault: TrainVault, data: st.DataObject) -> None:
    doc = data.draw(bad.JSON)
    bad.refused(lambda: vault.load_manifest(bad.put_json(vault, doc)), ManifestError)


@CHECK
@given(raw=st.binary(max_size=64))
def test_load_manifest_of_arbitrary_bytes(bad: ModuleType, vault: TrainVault, raw: bytes) -> None:
    uri = f"{bad.memory_root()}/m.json"
    vault.storage.put_create(uri, raw)
    bad.refused(lambda: vault.load_manifest(uri), ManifestError)


@CHECK
@given(data=st.data())
def test_load_manifest_of_a_damaged_manifest(
    bad: ModuleType, vault: TrainVault, published: str, data: st.DataObject
) -> None:
    doc = json.loads(vault.storage.get(published))
    mutated = data.draw(bad.mutations(doc))
    # Relative shard URIs resolve against the manifest's folder, so the copy stays beside it.
    uri = str(Path(published).with_name(f"damaged-{uuid.uuid4().hex}.json"))
    vault.storage.put_create(uri, json.dumps(mutated).encode())
    got = bad.outcome(lambda: vault.load_manifest(uri))
    assert got is None or isinstance(got, (ManifestError, StorageError)), got


@CHECK
@given(data=st.data())
def test_iter_shard_with_a_damaged_descriptor(
    bad: ModuleType, vault: TrainVault, published: str, data: st.DataObject
) -> None:
    manifest = vault.load_manifest(published)
    entry = manifest.splits["train"].shards[0]
    mutated = data.draw(bad.mutations(json.loads(vault.storage.get(entry.descriptor_uri))))
    raw = json.dumps(mutated).encode()
    uri = f"{bad.memory_root()}/descriptor.json"
    vault.storage.put_create(uri, raw)
    # The entry binds the damaged descriptor, so its parsing (not the pin) is what is tested.
    damaged = entry.model_copy(update={"descriptor_uri": uri, "descriptor_sha256": sha256_hex(raw)})
    got = bad.outcome(lambda: list(iter_shard(manifest.data_format, damaged, storage=vault.storage)))
    assert got is None or isinstance(got, TrainVaultError), got


def test_iter_shard_with_a_wrong_format_or_pin(bad: ModuleType, vault: TrainVault, published: str) -> None:
    manifest = vault.load_manifest(published)
    entry = manifest.splits["train"].shards[0]
    bad.refused(lambda: list(iter_shard("nope", entry, storage=vault.storage)), ManifestError)
    repinned = entry.model_copy(update={"descriptor_sha256": "0" * 64})
    bad.refused(lambda: list(iter_shard(manifest.data_format, repinned, storage=vault.storage)))


def test_iter_shard_with_a_wrong_type_of_shard(bad: ModuleType, vault: TrainVault) -> None:
    bad.refused(lambda: list(iter_shard("msgpack.zst", "train/_/a", storage=vault.storage)), TypeError)


# -- loading --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({"dataloader_args": {"batch_size": 0}}, ConfigurationError),
        ({"dataloader_args": {"batch_size": 2.5}}, ConfigurationError),
        ({"dataloader_args": {"sampler": None}}, ConfigurationError),
        ({"dataloader_args": {"in_order": False}}, ConfigurationError),
        ({"rank": 2, "world_size": 2}, ConfigurationError),
        ({"rank": 0, "world_size": 0}, ConfigurationError),
        ({"shuffle": "yes"}, TypeError),
        ({"seed": "1"}, TypeError),
    ],
)
def test_ungated_loader_factory_arguments(
    bad: ModuleType, torch: Any, vault: TrainVault, published: str, kwargs: dict[str, Any], kind: type[BaseException]
) -> None:
    bad.refused(lambda: vault.ungated_loader_factory(published, **kwargs), kind)


@pytest.mark.parametrize("args", [{"num_workers": -1}, {"prefetch_factor": 2}, {"timeout": -1}])
def test_dataloader_settings_torch_refuses_are_configuration_errors(
    bad: ModuleType, torch: Any, vault: TrainVault, published: str, args: dict[str, Any]
) -> None:
    bad.refused(lambda: vault.ungated_loader_factory(published, dataloader_args=args).load("train"), ConfigurationError)


@CHECK
@given(data=st.data())
def test_load_selects_or_raises_selection_error(
    bad: ModuleType, torch: Any, vault: TrainVault, published: str, data: st.DataObject
) -> None:
    names = bad.NAMES
    split, stage = data.draw(names), data.draw(st.none() | names)
    stages = data.draw(st.none() | st.lists(names, min_size=1, max_size=3))
    loader = vault.ungated_loader_factory(published)
    got = bad.outcome(lambda: loader.load(split, curriculum_stage=stage, curriculum_stages=stages))
    assert got is None or isinstance(got, SelectionError), got


def test_load_with_wrong_types_of_selection(bad: ModuleType, torch: Any, vault: TrainVault, published: str) -> None:
    loader = vault.ungated_loader_factory(published)
    for call in (
        lambda: loader.load(["train"]),
        lambda: loader.load("train", curriculum_stages=5),
        lambda: loader.load("train", curriculum_stages=[["easy"]]),
        lambda: loader.load("train", 7),
    ):
        bad.refused(call, TypeError)


@CHECK
@given(data=st.data())
def test_load_state_dict_of_a_damaged_state(
    bad: ModuleType, torch: Any, vault: TrainVault, published: str, data: st.DataObject
) -> None:
    loader = vault.ungated_loader_factory(published).load("train")
    state = loader.state_dict()
    damaged = data.draw(bad.mutations(state) | bad.JSON)
    got = bad.outcome(lambda: loader.load_state_dict(damaged))
    assert got is None or isinstance(got, ResumeStateError), got


# -- profiling ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({"validation": "nope"}, ProfileError),
        ({"schema": "nope"}, ProfileError),
        ({"schema": 5}, ProfileError),
        ({"max_labels": 0}, ProfileError),
        ({"max_labels": "many"}, ProfileError),
        ({"manifest_sha256": "0" * 64}, IntegrityError),
        ({"hook": lambda row: [1]}, ProfileError),
        ({"hook": lambda row: {"x": object()}}, ProfileError),
        ({"hook": lambda row: {"x": float("nan")}}, ProfileError),
        ({"hook": lambda row: {5: 1}}, InvalidNameError),
    ],
)
def test_profile_publication_settings(
    bad: ModuleType, vault: TrainVault, published: str, kwargs: dict[str, Any], kind: type[BaseException]
) -> None:
    from trainvault.profile import profile_publication

    bad.refused(lambda: profile_publication(vault.storage, published, **kwargs), kind)


@CHECK
@given(data=st.data())
def test_profiled_rows_are_counted_or_refused(bad: ModuleType, data: st.DataObject) -> None:
    keys = st.text(max_size=6) | st.integers() | st.binary(max_size=3)
    row = data.draw(st.dictionaries(keys, bad.RECORD_VALUES, max_size=4))
    from trainvault.profile.metrics import DatasetMetrics

    got = bad.outcome(lambda: DatasetMetrics().observe(row))
    assert got is None or isinstance(got, ProfileError), got
