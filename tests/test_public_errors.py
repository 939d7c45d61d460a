"""Bad input to the public API raises typed errors.

The property everywhere: a call either works or raises a `TrainVaultError` subclass naming what
is wrong; a `TypeError` only for an argument of the wrong type. Never a bare `ValueError`,
`KeyError`, `AttributeError`, `IndexError` or `AssertionError`, and never a panic of the storage
client (a `BaseException`, which would pass every ``except Exception``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from approval_chain import build_chain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainvault import (
    ApprovalError,
    BudgetError,
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

CHECK = settings(
    max_examples=40,
    deadline=10_000,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
NAMES = st.text(max_size=12) | st.text("abc._-/ ", min_size=1, max_size=6) | st.sampled_from(["", ".", "..", "x" * 129])


def outcome(call: Callable[[], Any], *, type_errors: bool = False) -> TrainVaultError | TypeError | None:
    """None when `call` works, else the typed error it raised. A `TypeError` passes only with
    `type_errors` (a wrong argument type was given); anything else propagates and fails the test."""
    try:
        call()
    except TrainVaultError as exc:
        return exc
    except TypeError as exc:
        if type_errors:
            return exc
        raise AssertionError(f"a TypeError for values of the right types: {exc!r}") from exc
    return None


def refused(call: Callable[[], Any], kind: type[BaseException] = TrainVaultError) -> BaseException:
    got = outcome(call, type_errors=kind is TypeError)
    assert isinstance(got, kind), f"expected {kind.__name__}, got {got!r}"
    return got


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document (the root included)."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, (*prefix, i))


def replaced(doc: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> Any:
    """A copy of `doc` with the value at `path` replaced (or, with `delete` and a dict parent, removed)."""
    if not path:
        return value
    out = json.loads(json.dumps(doc))
    parent = out
    for k in path[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


@st.composite
def mutations(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` with one place replaced by an arbitrary JSON value, or one field removed."""
    path = draw(st.sampled_from(list(paths(doc))))
    return replaced(doc, path, draw(JSON), delete=draw(st.booleans()))


def memory_root() -> str:
    return f"memory://{uuid.uuid4().hex}"


def put_json(vault: TrainVault, value: Any) -> str:
    uri = f"{memory_root()}/doc.json"
    vault.storage.put_create(uri, json.dumps(value).encode())
    return uri


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


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, vault: TrainVault) -> Any:
    """A whole custody chain with a signed approval: (chain, approval uri, its sha256, public key path)."""
    from trainvault.approval import write_approval
    from trainvault.approval.keys import load_signing_key, write_keypair

    root = tmp_path_factory.mktemp("chain")
    ch = build_chain(vault, str(root / "data"), shards=2, records_per_shard=10)
    private, public, _ = write_keypair(root / "approver")
    written = write_approval(vault, str(root / "approval.json"), vault.approve_dataset(ch.request()),
                             signing_keys=[load_signing_key(private)])
    return ch, written.uri, written.sha256, str(public)


# -- settings -------------------------------------------------------------------------------

CLOSED = "http://127.0.0.1:9"
S3_OK = dict(s3_base_url=CLOSED, region="us-east-1", access_key_id="key-id-value", secret_access_key="s3cr3t-value",
             connect_timeout_s=0.2, recovery_window_s=0.2, client_retries=0, first_contact_attempts=1)


@pytest.mark.parametrize("override", [
    {"s3_base_url": "not a url"}, {"s3_base_url": "http://[::1"}, {"s3_base_url": "http://host:99999"},
    {"s3_base_url": "ftp://host"}, {"region": "us east 1"}, {"region": "ü"}, {"access_key_id": "k\n"},
    {"secret_access_key": "s3cr3t-välue"}, {"connect_timeout_s": -1}, {"read_timeout_s": float("inf")},
    {"request_timeout_s": float("nan")}, {"client_retries": -1}, {"client_retries": "3"},
    {"first_contact_attempts": 0}, {"backoff_max_s": True},
])
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
    vault = TrainVault.from_env({"TRAINVAULT_S3_URL": "not a url", "TRAINVAULT_S3_KEY_ID": "k", "TRAINVAULT_S3_SECRET": "s"})
    refused(lambda: vault.load_manifest("s3://bucket/m.json"), ConfigurationError)


# -- saving ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "kind"), [
    ({"data_format": "nope"}, ManifestError),
    ({"block_bytes": 0}, ConfigurationError),
    ({"block_bytes": -5}, ConfigurationError),
    ({"block_bytes": "big"}, TypeError),
    ({"manifest_uri": "ftp://host/m.json"}, StorageError),
    ({"manifest_uri": ""}, StorageError),
])
def test_dataset_saver_arguments(vault: TrainVault, kwargs: dict[str, Any], kind: type[BaseException]) -> None:
    args = {"manifest_uri": f"{memory_root()}/m.json", **kwargs}
    refused(lambda: vault.dataset_saver(args.pop("manifest_uri"), **args), kind)


@CHECK
@given(split=NAMES, stage=st.none() | NAMES, shard_id=NAMES)
def test_save_names_are_valid_or_refused(vault: TrainVault, split: str, stage: str | None, shard_id: str) -> None:
    saver = vault.dataset_saver(f"{memory_root()}/m.json")
    got = outcome(lambda: saver.save(split, stage, [{"a": 1}], shard_id=shard_id))
    assert got is None or isinstance(got, InvalidNameError), got


RECORD_VALUES = JSON | st.binary(max_size=8) | st.integers(min_value=2**63, max_value=2**80) | st.just(float("nan")) \
    | st.builds(object) | st.sets(st.integers(), max_size=2)


@CHECK
@given(
    records=st.lists(st.dictionaries(st.text(max_size=6) | st.integers(), RECORD_VALUES, max_size=3) | RECORD_VALUES,
                     max_size=4),
    metadata=st.none() | JSON | st.dictionaries(st.text(max_size=4), RECORD_VALUES, max_size=2),
    data_format=st.sampled_from(["msgpack.zst", "jsonl.gz"]),
)
def test_save_records_are_encoded_or_refused(vault: TrainVault, records: list[Any], metadata: Any,
                                             data_format: str) -> None:
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


@pytest.mark.xfail(strict=True, reason="reader.py (publication layer): iter_shard reads .descriptor_uri of whatever "
                                       "it is given, an AttributeError; it should be a TypeError")
def test_iter_shard_with_a_wrong_type_of_shard(vault: TrainVault) -> None:
    refused(lambda: list(iter_shard("msgpack.zst", "train/_/a", storage=vault.storage)), TypeError)  # type: ignore[arg-type]


# -- loading --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.mark.parametrize(("kwargs", "kind"), [
    ({"dataloader_args": {"batch_size": 0}}, ConfigurationError),
    ({"dataloader_args": {"batch_size": 2.5}}, ConfigurationError),
    ({"dataloader_args": {"sampler": None}}, ConfigurationError),
    ({"dataloader_args": {"in_order": False}}, ConfigurationError),
    ({"rank": 2, "world_size": 2}, ConfigurationError),
    ({"rank": 0, "world_size": 0}, ConfigurationError),
    ({"shuffle": "yes"}, TypeError),
    ({"seed": "1"}, TypeError),
])
def test_split_data_loader_arguments(torch: Any, vault: TrainVault, published: str, kwargs: dict[str, Any],
                                     kind: type[BaseException]) -> None:
    refused(lambda: vault.split_data_loader(published, **kwargs), kind)


@pytest.mark.parametrize("args", [{"num_workers": -1}, {"prefetch_factor": 2}, {"timeout": -1}])
def test_dataloader_settings_torch_refuses_are_configuration_errors(torch: Any, vault: TrainVault, published: str,
                                                                    args: dict[str, Any]) -> None:
    refused(lambda: vault.split_data_loader(published, dataloader_args=args).load("train"), ConfigurationError)


@CHECK
@given(split=NAMES, stage=st.none() | NAMES, stages=st.none() | st.lists(NAMES, min_size=1, max_size=3))
def test_load_selects_or_raises_selection_error(torch: Any, vault: TrainVault, published: str, split: str,
                                                stage: str | None, stages: list[str] | None) -> None:
    loader = vault.split_data_loader(published)
    got = outcome(lambda: loader.load(split, curriculum_stage=stage, curriculum_stages=stages))
    assert got is None or isinstance(got, SelectionError), got


def test_load_with_wrong_types_of_selection(torch: Any, vault: TrainVault, published: str) -> None:
    loader = vault.split_data_loader(published)
    for call in (lambda: loader.load(["train"]), lambda: loader.load("train", curriculum_stages=5),
                 lambda: loader.load("train", curriculum_stages=[["easy"]]), lambda: loader.load("train", 7)):
        refused(call, TypeError)


@CHECK
@given(data=st.data())
def test_load_state_dict_of_a_damaged_state(torch: Any, vault: TrainVault, published: str, data: st.DataObject) -> None:
    loader = vault.split_data_loader(published).load("train")
    state = loader.state_dict()
    bad = data.draw(mutations(state) | JSON)
    got = outcome(lambda: loader.load_state_dict(bad))
    assert got is None or isinstance(got, ResumeStateError), got


# -- approval -------------------------------------------------------------------------------

@CHECK
@given(doc=JSON | st.binary(max_size=32))
def test_approve_dataset_of_arbitrary_requests(vault: TrainVault, doc: Any) -> None:
    refused(lambda: vault.approve_dataset(doc), ApprovalError)


@CHECK
@given(data=st.data(), uri=st.text(max_size=24), sha256=st.text(max_size=70))
def test_approve_dataset_with_damaged_bindings(vault: TrainVault, chain: Any, data: st.DataObject, uri: str,
                                               sha256: str) -> None:
    ch = chain[0]
    request = json.loads(ch.request().to_json_bytes())
    name = data.draw(st.sampled_from(sorted(ch.refs)))
    binding = dict(request[name])
    binding[data.draw(st.sampled_from(["uri", "sha256"]))] = uri if data.draw(st.booleans()) else sha256
    refused(lambda: vault.approve_dataset({**request, name: binding}))


@CHECK
@given(uri=st.text(max_size=24), sha256=st.text(max_size=70) | st.just("0" * 64))
def test_open_approved_of_arbitrary_uris_and_pins(vault: TrainVault, chain: Any, uri: str, sha256: str) -> None:
    _, approval_uri, approval_sha, public = chain
    refused(lambda: vault.open_approved(uri, approval_sha, trusted_keys=[public]))
    refused(lambda: vault.open_approved(approval_uri, sha256, trusted_keys=[public]))


def test_open_approved_with_bad_keys_and_thresholds(vault: TrainVault, chain: Any, tmp_path: Path) -> None:
    _, approval_uri, approval_sha, public = chain
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key")
    for keys in ([], [str(garbage)], [str(tmp_path / "missing.pub")]):
        refused(lambda: vault.open_approved(approval_uri, approval_sha, trusted_keys=keys), ApprovalError)
    for threshold in (0, -1, 2, "1", None):
        refused(lambda: vault.open_approved(approval_uri, approval_sha, trusted_keys=[public], threshold=threshold),
                ApprovalError)
    refused(lambda: vault.open_approved(approval_uri, approval_sha, trusted_keys=[5]), TypeError)


GATE_OWNER = "approval/gate.py (spine): "


@pytest.mark.xfail(strict=True, reason=GATE_OWNER + "ApprovalPolicy.__post_init__ raises a bare ValueError")
def test_approval_policy_with_a_bad_pin() -> None:
    from trainvault.approval import ApprovalPolicy

    refused(lambda: ApprovalPolicy(evaluation_release_sha256="zz"))


@pytest.mark.xfail(strict=True, reason=GATE_OWNER + "ApprovalPolicy.__post_init__ raises a bare ValueError")
def test_approval_policy_with_a_string_of_versions() -> None:
    from trainvault.approval import ApprovalPolicy

    refused(lambda: ApprovalPolicy(allowed_producers={"trainvault": "1.0"}))


@pytest.mark.xfail(strict=True, reason=GATE_OWNER + "ApprovalPolicy(allowed_producers=5) and approve_dataset("
                                                    "policy=5) raise AttributeError, not TypeError")
def test_approval_policy_of_a_wrong_type(vault: TrainVault, chain: Any) -> None:
    from trainvault.approval import ApprovalPolicy

    refused(lambda: ApprovalPolicy(allowed_producers=5), TypeError)  # type: ignore[arg-type]
    refused(lambda: vault.approve_dataset(chain[0].request(), policy=5), TypeError)


@CHECK
@given(
    total=st.integers(-2, 300) | st.text(max_size=3) | st.none(),
    every=st.none() | st.integers(-2, 50) | st.floats(allow_nan=True),
    checkpoints=st.lists(st.integers(-2, 400) | st.text(max_size=2), max_size=3),
    stage_ends=st.none() | st.dictionaries(st.text(max_size=3) | st.integers(), st.integers(-2, 400) | st.none(),
                                           max_size=3),
    consume=st.lists(st.integers(-3, 200) | st.booleans(), max_size=4),
)
def test_position_budget_settings_and_consumption(total: Any, every: Any, checkpoints: Any, stage_ends: Any,
                                                  consume: list[Any]) -> None:
    from trainvault.approval import PositionBudget

    budget: list[Any] = []
    got = outcome(lambda: budget.append(PositionBudget(total, checkpoint_every=every, checkpoints=checkpoints,
                                                       stage_ends=stage_ends)))
    assert got is None or isinstance(got, BudgetError), got
    for n in consume if budget else []:
        got = outcome(lambda: budget[0].consume(n))
        assert got is None or isinstance(got, BudgetError), got
    if budget:
        got = outcome(lambda: budget[0].restore({**budget[0].snapshot(), "consumed": -1}))
        assert isinstance(got, ResumeStateError), got


def test_position_budget_of_wrong_types() -> None:
    from trainvault.approval import PositionBudget

    refused(lambda: PositionBudget(10, stage_ends=[("a", 5)]), TypeError)  # type: ignore[arg-type]
    refused(lambda: PositionBudget(10, checkpoints=5), TypeError)  # type: ignore[arg-type]


# -- profiling ------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "kind"), [
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
])
def test_profile_publication_settings(vault: TrainVault, published: str, kwargs: dict[str, Any],
                                      kind: type[BaseException]) -> None:
    from trainvault.profile import profile_publication

    refused(lambda: profile_publication(vault.storage, published, **kwargs), kind)


@CHECK
@given(row=st.dictionaries(st.text(max_size=6) | st.integers() | st.binary(max_size=3), RECORD_VALUES, max_size=4))
def test_profiled_rows_are_counted_or_refused(row: dict[Any, Any]) -> None:
    from trainvault.profile import DatasetMetrics

    got = outcome(lambda: DatasetMetrics().observe(row))
    assert got is None or isinstance(got, ProfileError), got


# -- a missing split is a SelectionError on every path that selects one -----------------------

def test_missing_split_is_a_selection_error_everywhere(torch: Any, vault: TrainVault, chain: Any,
                                                       tmp_path: Path) -> None:
    from trainvault.profile import SourceDataset, collate_sources, profile_publication

    ch, approval_uri, approval_sha, public = chain
    approved = vault.open_approved(approval_uri, approval_sha, trusted_keys=[public])
    manifest = vault.load_manifest(ch.manifest_uri)
    paths_that_select = {
        "DataManifest.split": lambda: manifest.split("nope"),
        "SplitManifest.shard": lambda: manifest.split("train").shard("nope/s0"),
        "SplitDataLoader.load": lambda: vault.split_data_loader(ch.manifest_uri).load("nope"),
        "ApprovedDataset.split_data_loader": lambda: approved.split_data_loader().load("nope"),
        "ApprovedDataset.component_range_materializer": lambda: approved.component_range_materializer("nope"),
        "build_component_ledger": lambda: vault.build_component_ledger(ch.manifest_uri, split="nope",
                                                                       declare=lambda record: []),
        "profile_publication": lambda: profile_publication(vault.storage, ch.manifest_uri, splits=["nope"]),
        "collate_sources": lambda: collate_sources(vault.dataset_saver(str(tmp_path / "out" / "m.json")),
                                                   [SourceDataset("a", ch.manifest_uri, "nope", into="train")],
                                                   num_repeats=1),
    }
    for name, call in paths_that_select.items():
        got = outcome(call)
        assert isinstance(got, SelectionError), f"{name}: {got!r}"


# -- the command line -----------------------------------------------------------------------

def test_cli_refuses_bad_arguments_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "garbage.json").write_text('{"x": 1}')
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe")
    (tmp_path / "folder").mkdir()
    (tmp_path / "not-a-key.key").write_text("not a key")
    g = str(tmp_path / "garbage.json")
    cases = [
        ["inspect", str(tmp_path / "missing.json")],
        ["inspect", "ftp://host/m.json"],
        ["inspect", g],
        ["inspect", str(tmp_path / "binary.json")],
        ["inspect", str(tmp_path / "folder")],
        ["inspect", "s3://bucket/m.json"],
        ["keygen", "--out", str(tmp_path / "missing" / "k")],
        ["approve", g, "--out", str(tmp_path / "a.json"), "--key", str(tmp_path / "not-a-key.key")],
        ["approve", g, "--out", str(tmp_path / "a.json"), "--key", str(tmp_path / "missing.key")],
        ["verify", g, "--sha256", "zz", "--key", str(tmp_path / "missing.pub")],
        ["verify", g, "--sha256", "0" * 64, "--key", str(tmp_path / "missing.pub"), "--threshold", "0"],
        ["archive", "inspect", g],
        ["archive", "gc", "ftp://host/pool", "--grace", "1h"],
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINVAULT_", "AWS_"))}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[1]), TRAINVAULT_S3_URL="not a url",
               TRAINVAULT_S3_KEY_ID="key", TRAINVAULT_S3_SECRET="secret")

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "trainvault.cli", *argv], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120)

    with ThreadPoolExecutor(4) as pool:
        for argv, done in zip(cases, pool.map(run, cases)):
            assert done.returncode == 1, (argv, done.stderr)
            assert done.stdout == "" and "Traceback" not in done.stderr, (argv, done.stderr)
            assert done.stderr.startswith("trainvault: error: ") and done.stderr.count("\n") == 1, (argv, done.stderr)
