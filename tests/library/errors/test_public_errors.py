"""Bad settings, names, records, documents, selections and loader states raise typed errors
(the property is in `bad_input`): TrainVault and S3 settings, the saver, load_manifest,
iter_shard, split_data_loader and its state, and profiling."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from bad_input import CHECK, JSON, NAMES, RECORD_VALUES, memory_root, mutations, outcome, put_json, refused
from hypothesis import given
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
def test_bad_s3_settings_are_refused_before_any_request(override: dict[str, Any]) -> None:
    vault = TrainVault(storage=StorageConfig(**{**S3_OK, **override}))
    err = refused(lambda: vault.storage.get("s3://bucket/key"), ConfigurationError)
    assert "s3cr3t" not in str(err) and "key-id-value" not in str(err)  # keys are never shown


@CHECK
@given(endpoint=st.text(max_size=30).filter(lambda s: not s.startswith("http")), bucket=st.text(max_size=12))
def test_arbitrary_endpoints_and_buckets_raise_typed_errors(endpoint: str, bucket: str) -> None:
    vault = TrainVault(storage=StorageConfig(**{**S3_OK, "s3_base_url": endpoint}))
    refused(lambda: vault.storage.get(f"s3://{bucket}/key"))


def test_trainvault_settings() -> None:
    refused(lambda: TrainVault(region="us-east-1", storage=StorageConfig()), ConfigurationError)
    env = {"TRAINVAULT_S3_URL": "not a url", "TRAINVAULT_S3_KEY_ID": "k", "TRAINVAULT_S3_SECRET": "s"}
    vault = TrainVault.from_env(env)
    refused(lambda: vault.load_manifest("s3://bucket/m.json"), ConfigurationError)


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
def test_dataset_saver_arguments(vault: TrainVault, kwargs: dict[str, Any], kind: type[BaseException]) -> None:
    args = {"manifest_uri": f"{memory_root()}/m.json", **kwargs}
    refused(lambda: vault.dataset_saver(args.pop("manifest_uri"), **args), kind)


@CHECK
@given(split=NAMES, stage=st.none() | NAMES, shard_id=NAMES)
def test_save_names_are_valid_or_refused(vault: TrainVault, split: str, stage: str | None, shard_id: str) -> None:
    saver = vault.dataset_saver(f"{memory_root()}/m.json")
    got = outcome(lambda: saver.save(split, stage, [{"a": 1}], shard_id=shard_id))
    assert got is None or isinstance(got, InvalidNameError), got


@CHECK
@given(
    records=st.lists(
        st.dictionaries(st.text(max_size=6) | st.integers(), RECORD_VALUES, max_size=3) | RECORD_VALUES, max_size=4
    ),
    metadata=st.none() | JSON | st.dictionaries(st.text(max_size=4), RECORD_VALUES, max_size=2),
    data_format=st.sampled_from(["msgpack.zst", "jsonl.gz"]),
)
def test_save_records_are_encoded_or_refused(
    vault: TrainVault, records: list[Any], metadata: Any, data_format: str
) -> None:
    saver = vault.dataset_saver(f"{memory_root()}/m.json", data_format=data_format)
    got = outcome(lambda: saver.save("train", "s", records, shard_id="x", curriculum_metadata=metadata))
    assert got is None or isinstance(got, (EncodeError, ManifestError)), got


def test_save_records_of_a_wrong_type(vault: TrainVault) -> None:
    saver = vault.dataset_saver(f"{memory_root()}/m.json")
    refused(lambda: saver.save("train", None, None, shard_id="x"), TypeError)  # type: ignore[arg-type]
    refused(lambda: saver.save("train", None, "abc", shard_id="y"), EncodeError)  # type: ignore[arg-type]


# -- documents ------------------------------------------------------------------------------


@CHECK
@given(doc=JSON)
def test_load_manifest_of_arbitrary_json(vault: TrainVault, doc: Any) -> None:
    refused(lambda: vault.load_manifest(put_json(vault, doc)), ManifestError)


@CHECK
@given(raw=st.binary(max_size=64))
def test_load_manifest_of_arbitrary_bytes(vault: TrainVault, raw: bytes) -> None:
    uri = f"{memory_root()}/m.json"
    vault.storage.put_create(uri, raw)
    refused(lambda: vault.load_manifest(uri), ManifestError)


@CHECK
@given(data=st.data())
def test_load_manifest_of_a_damaged_manifest(vault: TrainVault, published: str, data: st.DataObject) -> None:
    doc = json.loads(vault.storage.get(published))
    bad = data.draw(mutations(doc))
    # Relative shard URIs resolve against the manifest's folder, so the copy stays beside it.
    uri = str(Path(published).with_name(f"damaged-{uuid.uuid4().hex}.json"))
    vault.storage.put_create(uri, json.dumps(bad).encode())
    got = outcome(lambda: vault.load_manifest(uri))
    assert got is None or isinstance(got, (ManifestError, StorageError)), got


@CHECK
@given(data=st.data())
def test_iter_shard_with_a_damaged_descriptor(vault: TrainVault, published: str, data: st.DataObject) -> None:
    manifest = vault.load_manifest(published)
    entry = manifest.splits["train"].shards[0]
    bad = data.draw(mutations(json.loads(vault.storage.get(entry.descriptor_uri))))
    raw = json.dumps(bad).encode()
    uri = f"{memory_root()}/descriptor.json"
    vault.storage.put_create(uri, raw)
    # The entry binds the damaged descriptor, so its parsing (not the pin) is what is tested.
    damaged = entry.model_copy(update={"descriptor_uri": uri, "descriptor_sha256": sha256_hex(raw)})
    got = outcome(lambda: list(iter_shard(manifest.data_format, damaged, storage=vault.storage)))
    assert got is None or isinstance(got, TrainVaultError), got


def test_iter_shard_with_a_wrong_format_or_pin(vault: TrainVault, published: str) -> None:
    manifest = vault.load_manifest(published)
    entry = manifest.splits["train"].shards[0]
    refused(lambda: list(iter_shard("nope", entry, storage=vault.storage)), ManifestError)
    repinned = entry.model_copy(update={"descriptor_sha256": "0" * 64})
    refused(lambda: list(iter_shard(manifest.data_format, repinned, storage=vault.storage)))


def test_iter_shard_with_a_wrong_type_of_shard(vault: TrainVault) -> None:
    refused(lambda: list(iter_shard("msgpack.zst", "train/_/a", storage=vault.storage)), TypeError)  # type: ignore[arg-type]


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
def test_split_data_loader_arguments(
    torch: Any, vault: TrainVault, published: str, kwargs: dict[str, Any], kind: type[BaseException]
) -> None:
    refused(lambda: vault.split_data_loader(published, **kwargs), kind)


@pytest.mark.parametrize("args", [{"num_workers": -1}, {"prefetch_factor": 2}, {"timeout": -1}])
def test_dataloader_settings_torch_refuses_are_configuration_errors(
    torch: Any, vault: TrainVault, published: str, args: dict[str, Any]
) -> None:
    refused(lambda: vault.split_data_loader(published, dataloader_args=args).load("train"), ConfigurationError)


@CHECK
@given(split=NAMES, stage=st.none() | NAMES, stages=st.none() | st.lists(NAMES, min_size=1, max_size=3))
def test_load_selects_or_raises_selection_error(
    torch: Any, vault: TrainVault, published: str, split: str, stage: str | None, stages: list[str] | None
) -> None:
    loader = vault.split_data_loader(published)
    got = outcome(lambda: loader.load(split, curriculum_stage=stage, curriculum_stages=stages))
    assert got is None or isinstance(got, SelectionError), got


def test_load_with_wrong_types_of_selection(torch: Any, vault: TrainVault, published: str) -> None:
    loader = vault.split_data_loader(published)
    for call in (
        lambda: loader.load(["train"]),
        lambda: loader.load("train", curriculum_stages=5),
        lambda: loader.load("train", curriculum_stages=[["easy"]]),
        lambda: loader.load("train", 7),
    ):
        refused(call, TypeError)


@CHECK
@given(data=st.data())
def test_load_state_dict_of_a_damaged_state(torch: Any, vault: TrainVault, published: str, data: st.DataObject) -> None:
    loader = vault.split_data_loader(published).load("train")
    state = loader.state_dict()
    bad = data.draw(mutations(state) | JSON)
    got = outcome(lambda: loader.load_state_dict(bad))
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
    vault: TrainVault, published: str, kwargs: dict[str, Any], kind: type[BaseException]
) -> None:
    from trainvault.profile import profile_publication

    refused(lambda: profile_publication(vault.storage, published, **kwargs), kind)


@CHECK
@given(row=st.dictionaries(st.text(max_size=6) | st.integers() | st.binary(max_size=3), RECORD_VALUES, max_size=4))
def test_profiled_rows_are_counted_or_refused(row: dict[Any, Any]) -> None:
    from trainvault.profile import DatasetMetrics

    got = outcome(lambda: DatasetMetrics().observe(row))
    assert got is None or isinstance(got, ProfileError), got
