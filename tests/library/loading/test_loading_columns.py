"""Columnar batches (``batch_format="columns"``): the same rows, in the same order, as the record
path, with real DataLoaders (0 and 2 workers), two ranks, shuffling, exclusions and resume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
pytest.importorskip("pyarrow")

from trainvault import ConfigurationError, IntegrityError, TrainVault  # noqa: E402
from trainvault.loading import LoaderPlan, SplitLoaderFactory  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N = 150
B = 7
FORMATS = ("msgpack.zst", "parquet", "jsonl.gz")


def make_record(i: int, fmt: str) -> dict[str, Any]:
    tokens = np.arange(i, i + 1 + i % 11, dtype=np.int32)
    vec = np.array([i, -i, i * 0.5], dtype=np.float32)
    if fmt == "jsonl.gz":
        return {"id": i, "text": f"doc {i}", "score": i / 4, "tokens": tokens.tolist(), "vec": vec.tolist()}
    return {"id": i, "text": f"doc {i}", "score": i / 4, "tokens": tokens, "vec": vec}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Manifest URI by format: two shards of many small blocks."""
    out = {}
    for fmt in FORMATS:
        uri = str(tmp_path_factory.mktemp(fmt.replace(".", "_")) / "data-manifest-v1.json")
        saver = TrainVault().dataset_saver(uri, data_format=fmt, block_bytes=400)
        saver.save("train", None, [make_record(i, fmt) for i in range(0, 90)], shard_id="a")
        saver.save("train", None, [make_record(i, fmt) for i in range(90, N)], shard_id="b")
        saver.commit_manifest()
        out[fmt] = uri
    return out


EXCLUDE = {"_/a": [0, 5, 6, 40, 89], "_/b": [3, 59]}


def factory(uri: str, batch_format: str, *, workers: int = 0, rank: int = 0, world: int = 2) -> SplitLoaderFactory:
    plan = LoaderPlan.create(
        collate_fn=list if batch_format == "records" else None,
        shuffle=True,
        seed=11,
        rank=rank,
        world_size=world,
        shuffle_window_blocks=3,
        # A worker that hangs fails the test on the DataLoader's deadline.
        dataloader_args={"batch_size": B, "num_workers": workers, "timeout": 120 if workers else 0},
        batch_format=batch_format,
    )
    return SplitLoaderFactory(TrainVault().storage, uri, plan, exclude=EXCLUDE)


def rows(batch: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A columnar batch back as rows (id, text, score, tokens, vec), to compare with records."""
    ids = batch["id"].tolist()
    if "tokens.offsets" in batch:
        off = batch["tokens.offsets"].tolist()
        tokens = [batch["tokens"][off[j] : off[j + 1]].tolist() for j in range(len(ids))]
    else:
        tokens = batch["tokens"].tolist()
    vec = batch["vec"].tolist()
    return [(ids[j], batch["text"][j], batch["score"][j].item(), tokens[j], vec[j]) for j in range(len(ids))]


def record_rows(batch: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["id"], r["text"], r["score"], list(map(int, r["tokens"])), list(map(float, r["vec"]))) for r in batch]


def check_columns(batch: dict[str, Any]) -> None:
    assert batch["id"].dtype == torch.int64 and batch["id"].ndim == 1
    assert batch["vec"].shape == (len(batch["id"]), 3)  # fixed-length arrays: one 2-D tensor
    assert isinstance(batch["text"], list) and all(isinstance(t, str) for t in batch["text"])
    if "tokens.offsets" in batch:
        off = batch["tokens.offsets"]
        assert off.dtype == torch.int64 and len(off) == len(batch["id"]) + 1 and int(off[-1]) == len(batch["tokens"])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rank", [0, 1])
def test_columns_hold_the_record_paths_rows_in_order(datasets: dict[str, str], fmt: str, rank: int) -> None:
    uri = datasets[fmt]
    expected = [record_rows(b) for b in factory(uri, "records", rank=rank).load("train")]
    got = list(factory(uri, "columns", rank=rank).load("train"))
    for b in got:
        check_columns(b)
    assert [rows(b) for b in got] == expected
    ids = [r[0] for b in expected for r in b]
    assert not {0, 5, 6, 40, 89, 93, 149} & set(ids)  # the exclusions, never dealt
    assert any("tokens.offsets" in b for b in got)  # ragged tokens did occur


@pytest.mark.parametrize("fmt", ["msgpack.zst", "parquet"])
def test_columns_with_two_workers_match_the_record_path(datasets: dict[str, str], fmt: str) -> None:
    uri = datasets[fmt]
    expected = [record_rows(b) for b in factory(uri, "records", rank=1).load("train")]
    assert [rows(b) for b in factory(uri, "columns", workers=2, rank=1).load("train")] == expected


@pytest.mark.parametrize("fmt", ["msgpack.zst", "parquet"])
def test_columnar_tensors_from_workers_cross_in_shared_memory(datasets: dict[str, str], fmt: str) -> None:
    uri = datasets[fmt]
    expected = [record_rows(b) for b in factory(uri, "records", rank=1).load("train")]
    got = list(factory(uri, "columns", workers=2, rank=1).load("train"))
    assert [rows(b) for b in got] == expected
    # A tensor from a DataLoader worker arrives through torch's shared memory (its
    # multiprocessing pickler moves the storage there), not as pickled bytes.
    tensors = [v for b in got for v in b.values() if isinstance(v, torch.Tensor)]
    assert tensors and all(t.is_shared() for t in tensors)
    # All of a batch's tensors lie in one segment: one handle crosses per batch, not one per tensor.
    for b in got:
        assert len({v.untyped_storage().data_ptr() for v in b.values() if isinstance(v, torch.Tensor)}) == 1
    # In the trainer's own process nothing is shared: the check above can fail.
    local = next(iter(factory(uri, "columns", rank=1).load("train")))
    assert not any(v.is_shared() for v in local.values() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("workers", [0, 2])
def test_columns_resume_where_the_record_path_does(datasets: dict[str, str], workers: int) -> None:
    uri = datasets["parquet"]
    expected = [record_rows(b) for b in factory(uri, "records").load("train")]
    first = factory(uri, "columns", workers=workers).load("train")
    it = iter(first)
    head = [rows(next(it)) for _ in range(3)]
    state = first.state_dict()
    del it
    again = factory(uri, "columns", workers=workers).load("train")
    again.load_state_dict(state)
    assert head + [rows(b) for b in again] == expected
    # The record path resumes from a columnar run's state too: the state does not depend on it.
    records = factory(uri, "records").load("train")
    records.load_state_dict(state)
    assert [record_rows(b) for b in records] == expected[3:]


def test_trace_names_the_columnar_batches_rows(datasets: dict[str, str]) -> None:
    loader = factory(datasets["msgpack.zst"], "columns").load("train")
    batches = list(loader)
    assert [r.id for r in loader.trace(2)] == batches[2]["id"].tolist()


def test_batch_format_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="batch_format must be one of"):
        LoaderPlan.create(batch_format="rows")
    with pytest.raises(ConfigurationError, match="takes no collate_fn"):
        LoaderPlan.create(batch_format="columns", collate_fn=list)


def _save(tmp_path: Path, records: list[dict[str, Any]], fmt: str = "msgpack.zst") -> str:
    uri = str(tmp_path / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, data_format=fmt)
    saver.save("train", None, records, shard_id="s")
    saver.commit_manifest()
    return uri


def _columns(uri: str) -> list[Any]:
    plan = LoaderPlan.create(batch_format="columns", dataloader_args={"batch_size": 4})
    return list(SplitLoaderFactory(TrainVault().storage, uri, plan).load("train"))


def test_records_of_different_fields_are_refused(tmp_path: Path) -> None:
    uri = _save(tmp_path, [{"id": 1}, {"id": 2, "extra": 3}])
    with pytest.raises(ConfigurationError, match=r"different fields.*batch_format='records'"):
        _columns(uri)


def test_a_field_named_like_offsets_is_refused(tmp_path: Path) -> None:
    uri = _save(tmp_path, [{"t": [1, 2], "t.offsets": 0}, {"t": [3], "t.offsets": 1}])
    with pytest.raises(ConfigurationError, match=r"'t\.offsets'"):
        _columns(uri)


def test_nulls_in_a_parquet_number_column_stay_python_values(tmp_path: Path) -> None:
    uri = _save(tmp_path, [{"x": 1, "t": [1]}, {"x": None, "t": None}], fmt="parquet")
    (batch,) = _columns(uri)
    assert batch == {"x": [1, None], "t": [[1], None]}


def test_a_changed_block_fails_before_it_is_decoded(tmp_path: Path) -> None:
    uri = _save(tmp_path, [{"id": i, "text": "x" * 50} for i in range(40)], fmt="parquet")
    shard = next((tmp_path / "shards").rglob("*.parquet"))
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF
    os.chmod(shard, 0o644)
    shard.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="block 0"):
        _columns(uri)


def test_a_mixture_refuses_columnar_batches(datasets: dict[str, str]) -> None:
    from trainvault.mixtures import Mixture, MixtureComponent, load_mixture

    plan = LoaderPlan.create(batch_format="columns", dataloader_args={"batch_size": 4})
    mix = Mixture("train", [MixtureComponent("a", 1)])
    with pytest.raises(ConfigurationError, match="mixture loader forms record batches only"):
        load_mixture(SplitLoaderFactory(TrainVault().storage, datasets["msgpack.zst"], plan), mix)


@pytest.mark.parametrize("fmt", ["parquet", "msgpack.zst"])
def test_booleans_and_float_lists_become_tensors(tmp_path: Path, fmt: str) -> None:
    records = [{"flag": i % 3 == 0, "w": [i / 2] * (1 + i % 2), "n": np.uint16(i)} for i in range(6)]
    uri = _save(tmp_path, records, fmt=fmt)
    batches = _columns(uri)
    flags = [f for b in batches for f in b["flag"].tolist()]
    assert flags == [True, False, False, True, False, False] and batches[0]["flag"].dtype == torch.bool
    b = batches[0]
    assert b["w"].tolist() == [0.0, 0.5, 0.5, 1.0, 1.5, 1.5] and b["w.offsets"].tolist() == [0, 1, 3, 4, 6]
    assert b["n"].tolist() == [0, 1, 2, 3]
