"""Bad settings of the extensions raise typed errors (the property is in `support.bad_input`, the `bad` fixture): the
component materializer and `split_frame`, the representation writer, the rollout pool's
collector and archive selections. A value out of range is a `ConfigurationError`, a wrong
type a `TypeError`, a selection of nothing a `SelectionError`."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trainvault import ConfigurationError, SampleNotFoundError, SelectionError, StorageError, TrainVault
from trainvault.components import Frame, split_frame
from trainvault.rollouts import RolloutArchive
from trainvault.rollouts.pool import gc, object_uri, put_object
from trainvault.storage import Storage


@pytest.fixture(scope="module")
def vault() -> TrainVault:
    return TrainVault()


# -- component ranges -----------------------------------------------------------------------


@pytest.mark.parametrize("max_rows", [1, 0, -3])
def test_split_frame_below_two_rows_is_a_configuration_error(bad: ModuleType, max_rows: int) -> None:
    got = bad.refused(partial(split_frame, Frame("c", 0, 10), max_rows), ConfigurationError)
    assert isinstance(got, ValueError) and f"got {max_rows}" in str(got)
    assert split_frame(Frame("c", 0, 10), 2).ranges  # two rows are enough


def test_split_frame_of_a_wrong_type(bad: ModuleType, vault: TrainVault) -> None:
    for max_rows in ("8", 8.0, True, None):
        bad.refused(partial(split_frame, Frame("c", 0, 10), max_rows), TypeError)


def test_materializer_settings(
    build_chain: Callable[..., Any], bad: ModuleType, vault: TrainVault, tmp_path: Path
) -> None:
    # The settings are checked before the ledger is looked for: this approval binds none.
    chain = build_chain(vault, str(tmp_path / "data"), shards=1, records_per_shard=5)
    approved = vault.approve_dataset(chain.request())
    for kwargs in ({"mode": "bogus"}, {"mode": "UNPACK"}, {"max_rows": 0}, {"max_rows": -1}):
        got = bad.refused(partial(approved.component_range_materializer, "train", **kwargs), ConfigurationError)
        assert isinstance(got, ValueError), got
    for max_rows in ("8", 8.0, True):
        bad.refused(partial(approved.component_range_materializer, "train", max_rows=max_rows), TypeError)


# -- representations ------------------------------------------------------------------------

TEACHER = {"name": "t", "revision": "r1", "num_layers": 4, "hidden_size": 8}
PROJECTION = {"method": "gaussian", "dim": 4, "seed": 1}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"part_rows": 0},
        {"part_rows": -5},
        {"layers": [4]},
        {"layers": [-1]},
        {"layers": []},
        {"layers": [1, 1]},
        {"state_kinds": []},
        {"state_kinds": ["k", "k"]},
    ],
)
def test_representation_writer_settings(bad: ModuleType, vault: TrainVault, kwargs: dict[str, Any]) -> None:
    pytest.importorskip("torch")
    settings = {"layers": [1], "state_kinds": ["k"], **kwargs}
    root = f"memory://{uuid.uuid4().hex}"
    got = bad.refused(
        lambda: vault.representation_writer(root, teacher=TEACHER, projection=PROJECTION, **settings),
        ConfigurationError,
    )
    assert isinstance(got, ValueError), got
    assert vault.storage.list(root) == []


@pytest.mark.parametrize(
    "kwargs", [{"part_rows": "8"}, {"part_rows": 8.0}, {"part_rows": True}, {"layers": ["1"]}, {"layers": [1.0]}]
)
def test_representation_writer_settings_of_a_wrong_type(
    bad: ModuleType, vault: TrainVault, kwargs: dict[str, Any]
) -> None:
    pytest.importorskip("torch")
    settings = {"layers": [1], "state_kinds": ["k"], **kwargs}
    bad.refused(
        lambda: vault.representation_writer("memory://x", teacher=TEACHER, projection=PROJECTION, **settings), TypeError
    )


# -- rollouts -------------------------------------------------------------------------------

SAMPLES = [{"index": i, "task_id": f"task-{i % 2}", "reward": i / 4} for i in range(4)]


@pytest.fixture()
def archive(vault: TrainVault) -> RolloutArchive:
    return RolloutArchive.save(f"memory://{uuid.uuid4().hex}/a.json", SAMPLES, rollout_id=1, storage=vault)


def test_gc_grace_out_of_range_deletes_nothing(bad: ModuleType, vault: TrainVault, archive: RolloutArchive) -> None:
    pool = archive.index.pool
    archive.release()  # every object is unowned: only the grace check keeps them
    before = vault.storage.list(pool)
    for grace in (-1, -0.5, float("nan"), timedelta(seconds=-1)):
        got = bad.refused(partial(gc, pool, grace=grace, storage=vault.storage), ConfigurationError)
        assert isinstance(got, ValueError) and "grace" in str(got), got
    assert vault.storage.list(pool) == before  # not even a gc marker
    for grace in ("1h", None, True):
        bad.refused(partial(gc, pool, grace=grace, storage=vault.storage), TypeError)
    assert len(gc(pool, grace=timedelta(0), storage=vault.storage).deleted) == len(archive.index.chunks)


def test_a_selection_of_no_sample_is_a_selection_error_and_a_key_error(
    bad: ModuleType, archive: RolloutArchive
) -> None:
    for keys in ({"sample_key": "sample:9"}, {"task_key": "task-7"}, {"sample_key": "sample:0", "task_key": "task-1"}):
        got = bad.refused(partial(archive.load_samples, **keys), SampleNotFoundError)
        assert isinstance(got, SelectionError) and isinstance(got, KeyError) and isinstance(got, ValueError)
        assert str(got).startswith(f"rollout archive {archive.uri} has no sample"), str(got)  # not quoted
    assert len(archive.load_samples(sample_key="sample:0", task_key="task-0")) == 1


def test_archive_save_settings(bad: ModuleType, vault: TrainVault) -> None:
    uri = f"memory://{uuid.uuid4().hex}/a.json"
    for chunk_size in (0, -1):
        got = bad.refused(
            partial(RolloutArchive.save, uri, SAMPLES, rollout_id=1, chunk_size=chunk_size, storage=vault),
            ConfigurationError,
        )
        assert isinstance(got, ValueError) and "chunk_size" in str(got)
    for kwargs in (
        {"chunk_size": "8"},
        {"chunk_size": 8.0},
        {"chunk_size": True},
        {"rollout_id": None},
        {"rollout_id": 1.5},
        {"rollout_id": True},
    ):
        bad.refused(partial(RolloutArchive.save, uri, SAMPLES, storage=vault, **{"rollout_id": 1, **kwargs}), TypeError)
    assert not vault.storage.exists(uri)


def test_an_archive_storage_of_a_wrong_type(bad: ModuleType, archive: RolloutArchive) -> None:
    for storage in (5, "memory://x", object()):
        bad.refused(partial(RolloutArchive, archive.uri, storage=storage), TypeError)
    assert RolloutArchive(archive.uri, storage=Storage()).keys() == archive.keys()


class FailingPuts(Storage):
    """A real Storage whose first `failures` create-only writes raise `StorageError`."""

    def __init__(self, failures: int):
        super().__init__()
        self.failures, self.calls = failures, 0

    def put_create(self, uri: str, data: Any) -> bool:
        self.calls += 1
        if self.calls <= self.failures:
            raise StorageError(f"{uri}: injected failure {self.calls}")
        return super().put_create(uri, data)


def test_put_object_retries_four_times_then_raises_the_storage_error() -> None:
    digest = "0" * 64
    flaky = FailingPuts(4)
    assert put_object(flaky, f"memory://{uuid.uuid4().hex}/pool", digest, b"x") is True and flaky.calls == 5
    broken, pool = FailingPuts(5), f"memory://{uuid.uuid4().hex}/pool"
    with pytest.raises(StorageError, match="injected failure 5"):
        put_object(broken, pool, digest, b"x")
    assert broken.calls == 5 and not broken.exists(object_uri(pool, digest))
