"""Bad approval requests, URIs, pins, keys, policies and budgets raise typed errors (the
property is in `support.bad_input`, the `bad` fixture); a missing split is a SelectionError on every path that selects
one; the command line answers bad arguments with one error line, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvault import ApprovalError, BudgetError, ResumeStateError, SelectionError, TrainVault

#: The walks' hypothesis settings (tests/library/errors/conftest.py registers them).
CHECK = settings.get_profile("bad-input")


@pytest.fixture(scope="module")
def vault() -> TrainVault:
    return TrainVault()


@pytest.fixture(scope="module")
def chain(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory, vault: TrainVault) -> Any:
    """A whole custody chain with a signed approval: (chain, approval uri, its sha256, public key path)."""
    from trainvault.approval import write_approval
    from trainvault.approval.keys import load_signing_key, write_keypair

    root = tmp_path_factory.mktemp("chain")
    ch = build_chain(vault, str(root / "data"), shards=2, records_per_shard=10)
    private, public, _ = write_keypair(root / "approver")
    written = write_approval(
        vault,
        str(root / "approval.json"),
        vault.approve_dataset(ch.request()),
        signing_keys=[load_signing_key(private)],
    )
    return ch, written.uri, written.sha256, str(public)


# -- approval -------------------------------------------------------------------------------


@CHECK
@given(data=st.data())
def test_approve_dataset_of_arbitrary_requests(bad: ModuleType, vault: TrainVault, data: st.DataObject) -> None:
    doc = data.draw(bad.JSON | st.binary(max_size=32))
    bad.refused(lambda: vault.approve_dataset(doc), ApprovalError)


@CHECK
@given(data=st.data(), uri=st.text(max_size=24), sha256=st.text(max_size=70))
def test_approve_dataset_with_damaged_bindings(
    bad: ModuleType, vault: TrainVault, chain: Any, data: st.DataObject, uri: str, sha256: str
) -> None:
    ch = chain[0]
    request = json.loads(ch.request().to_json_bytes())
    name = data.draw(st.sampled_from(sorted(ch.refs)))
    binding = dict(request[name])
    binding[data.draw(st.sampled_from(["uri", "sha256"]))] = uri if data.draw(st.booleans()) else sha256
    bad.refused(lambda: vault.approve_dataset({**request, name: binding}))


@CHECK
@given(uri=st.text(max_size=24), sha256=st.text(max_size=70) | st.just("0" * 64))
def test_open_approved_of_arbitrary_uris_and_pins(
    bad: ModuleType, vault: TrainVault, chain: Any, uri: str, sha256: str
) -> None:
    _, approval_uri, approval_sha, public = chain
    bad.refused(lambda: vault.open_approved(uri, approval_sha, trusted_keys=[public]))
    bad.refused(lambda: vault.open_approved(approval_uri, sha256, trusted_keys=[public]))


def test_open_approved_with_bad_keys_and_thresholds(
    bad: ModuleType, vault: TrainVault, chain: Any, tmp_path: Path
) -> None:
    _, approval_uri, approval_sha, public = chain
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key")
    for keys in ([], [str(garbage)], [str(tmp_path / "missing.pub")]):
        bad.refused(partial(vault.open_approved, approval_uri, approval_sha, trusted_keys=keys), ApprovalError)
    for threshold in (0, -1, 2, "1", None):
        bad.refused(
            partial(vault.open_approved, approval_uri, approval_sha, trusted_keys=[public], threshold=threshold),
            ApprovalError,
        )
    bad.refused(lambda: vault.open_approved(approval_uri, approval_sha, trusted_keys=[5]), TypeError)


def test_approval_policy_with_a_bad_pin(bad: ModuleType) -> None:
    from trainvault.approval import ApprovalPolicy

    bad.refused(lambda: ApprovalPolicy(evaluation_release_sha256="zz"))


def test_approval_policy_with_a_string_of_versions(bad: ModuleType) -> None:
    from trainvault.approval import ApprovalPolicy

    bad.refused(lambda: ApprovalPolicy(allowed_producers={"trainvault": "1.0"}))


def test_approval_policy_of_a_wrong_type(bad: ModuleType, vault: TrainVault, chain: Any) -> None:
    from trainvault.approval import ApprovalPolicy

    bad.refused(lambda: ApprovalPolicy(allowed_producers=5), TypeError)
    bad.refused(lambda: vault.approve_dataset(chain[0].request(), policy=5), TypeError)


@CHECK
@given(
    total=st.integers(-2, 300) | st.text(max_size=3) | st.none(),
    every=st.none() | st.integers(-2, 50) | st.floats(allow_nan=True),
    checkpoints=st.lists(st.integers(-2, 400) | st.text(max_size=2), max_size=3),
    stage_ends=st.none()
    | st.dictionaries(st.text(max_size=3) | st.integers(), st.integers(-2, 400) | st.none(), max_size=3),
    consume=st.lists(st.integers(-3, 200) | st.booleans(), max_size=4),
)
def test_position_budget_settings_and_consumption(
    bad: ModuleType, total: Any, every: Any, checkpoints: Any, stage_ends: Any, consume: list[Any]
) -> None:
    from trainvault.loading import PositionBudget

    budget: list[Any] = []
    got = bad.outcome(
        lambda: budget.append(
            PositionBudget(total, checkpoint_every=every, checkpoints=checkpoints, stage_ends=stage_ends)
        )
    )
    assert got is None or isinstance(got, BudgetError), got
    for n in consume if budget else []:
        got = bad.outcome(partial(budget[0].consume, n))
        assert got is None or isinstance(got, BudgetError), got
    if budget:
        got = bad.outcome(lambda: budget[0].restore({**budget[0].snapshot(), "consumed": -1}))
        assert isinstance(got, ResumeStateError), got


def test_position_budget_of_wrong_types(bad: ModuleType) -> None:
    from trainvault.loading import PositionBudget

    bad.refused(lambda: PositionBudget(10, stage_ends=[("a", 5)]), TypeError)
    bad.refused(lambda: PositionBudget(10, checkpoints=5), TypeError)


# -- a missing split is a SelectionError on every path that selects one -----------------------


def test_missing_split_is_a_selection_error_everywhere(
    bad: ModuleType, vault: TrainVault, chain: Any, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    from trainvault.derivation import SourceDataset, collate_sources
    from trainvault.profile import profile_publication

    ch, approval_uri, approval_sha, public = chain
    approved = vault.open_approved(approval_uri, approval_sha, trusted_keys=[public])
    manifest = vault.load_manifest(ch.manifest_uri)
    paths_that_select = {
        "DataManifest.split": lambda: manifest.split("nope"),
        "SplitManifest.shard": lambda: manifest.split("train").shard("nope/s0"),
        "SplitLoaderFactory.load": lambda: vault.ungated_loader_factory(ch.manifest_uri).load("nope"),
        "ApprovedDataset.loader_factory": lambda: approved.loader_factory().load("nope"),
        "ApprovedDataset.component_range_materializer": lambda: approved.component_range_materializer("nope"),
        "build_component_ledger": lambda: vault.build_component_ledger(
            ch.manifest_uri, split="nope", declare=lambda record: []
        ),
        "profile_publication": lambda: profile_publication(vault.storage, ch.manifest_uri, splits=["nope"]),
        "collate_sources": lambda: collate_sources(
            vault.dataset_saver(str(tmp_path / "out" / "m.json")),
            [SourceDataset("a", ch.manifest_uri, "nope", into="train")],
            num_repeats=1,
        ),
    }
    for name, call in paths_that_select.items():
        got = bad.outcome(call)
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
        ["approve", g, "--out", str(tmp_path / "a.json"), "--signing-key", str(tmp_path / "not-a-key.key")],
        ["approve", g, "--out", str(tmp_path / "a.json"), "--signing-key", str(tmp_path / "missing.key")],
        ["verify", g, "--sha256", "zz", "--trusted-key", str(tmp_path / "missing.pub")],
        ["verify", g, "--sha256", "0" * 64, "--trusted-key", str(tmp_path / "missing.pub"), "--threshold", "0"],
        ["archive", "inspect", g],
        ["archive", "gc", "ftp://host/pool", "--grace", "1h"],
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINVAULT_", "AWS_"))}
    env.update(
        PYTHONPATH=str(Path(__file__).resolve().parents[3]),
        TRAINVAULT_S3_URL="not a url",
        TRAINVAULT_S3_KEY_ID="key",
        TRAINVAULT_S3_SECRET="secret",
    )

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "trainvault.cli", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
        )

    with ThreadPoolExecutor(4) as pool:
        for argv, done in zip(cases, pool.map(run, cases), strict=False):
            assert done.returncode == 1, (argv, done.stderr)
            assert done.stdout == "" and "Traceback" not in done.stderr, (argv, done.stderr)
            assert done.stderr.startswith("trainvault: error: ") and done.stderr.count("\n") == 1, (argv, done.stderr)
