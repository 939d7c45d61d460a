"""The training loader with real DataLoaders and worker processes (fork for local data,
forkserver for S3).

The dataset is small with tiny blocks (many blocks per shard), so worker dealing, shuffle
windows and epoch tails are all exercised in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trainvault import IntegrityError, ResumeStateError, SelectionError, StorageError, TrainVault  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:.pin_memory. argument is set as true:UserWarning"),
]

STAGES = {"easy": 3, "hard": 2, None: 2}  # shards per stage
B = 8


def ids(records: list[dict[str, Any]]) -> list[int]:
    """Collate to record ids, checking the payload on the way (runs inside workers)."""
    for r in records:
        assert int(r["tokens"][0]) == r["id"] and r["text"] == f"record {r['id']}"
    return [r["id"] for r in records]


def tensors(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The trainer's collate: tokens into one int32 tensor, texts as a list."""
    return {"tokens": torch.from_numpy(np.stack([r["tokens"] for r in records])), "text": [r["text"] for r in records]}


def _save(vault: TrainVault, uri: str, first_id: int = 0) -> dict[str, list[int]]:
    saver = vault.dataset_saver(uri, block_bytes=400)
    by_shard: dict[str, list[int]] = {}
    n = first_id
    for stage, count in STAGES.items():
        for k in range(count):
            size = 41 + 13 * k + (7 if stage == "hard" else 0)
            recs = [
                {"id": n + i, "text": f"record {n + i}", "tokens": np.full(6, n + i, dtype=np.int32)}
                for i in range(size)
            ]
            entry = saver.save("train", stage, recs, shard_id=f"s{k}")
            by_shard[entry.key] = [r["id"] for r in recs]
            n += size
    saver.save("valid", None, [{"id": -1, "text": "record -1", "tokens": np.full(6, -1, dtype=np.int32)}], shard_id="v")
    saver.commit_manifest()
    return by_shard


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainVault, str, dict[str, list[int]]]:
    vault = TrainVault()
    uri = str(tmp_path_factory.mktemp("loading") / "ds" / "data-manifest-v1.json")
    return vault, uri, _save(vault, uri)


def _loader(
    ds: Any,
    *,
    workers: int = 0,
    shuffle: bool = True,
    rank: int | None = None,
    world: int | None = None,
    collate: Any = ids,
    stage: Any = None,
    stages: Any = None,
    infinite: bool = False,
    **args: Any,
) -> Any:
    vault, uri, _ = ds
    sdl = vault.ungated_loader_factory(
        uri,
        collate_fn=collate,
        dataloader_args={"batch_size": B, "num_workers": workers, **args},
        shuffle=shuffle,
        seed=7,
        rank=rank,
        world_size=world,
    )
    return sdl.load("train", curriculum_stage=stage, curriculum_stages=stages, infinite_iter=infinite)


def _all_ids(ds: Any) -> list[int]:
    return sorted(i for v in ds[2].values() for i in v)


def _take(it: Any, n: int) -> list[Any]:
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_order_does_not_depend_on_workers(dataset: Any, shuffle: bool) -> None:
    single = list(_loader(dataset, shuffle=shuffle))
    assert sorted(i for b in single for i in b) == _all_ids(dataset)
    assert list(_loader(dataset, workers=3, shuffle=shuffle)) == single
    if not shuffle:
        keys = [s.key for s in dataset[0].load_manifest(dataset[1]).splits["train"].shards]
        assert [i for b in single for i in b] == [i for k in keys for i in dataset[2][k]]


def test_shuffle_mixes_shards_and_reshuffles_each_epoch(dataset: Any) -> None:
    shard_of = {i: key for key, v in dataset[2].items() for i in v}
    loader = _loader(dataset)
    epoch0, epoch1 = list(loader), list(loader)
    assert epoch0 != epoch1 and sorted(i for b in epoch0 for i in b) == sorted(i for b in epoch1 for i in b)
    shards_per_batch = [len({shard_of[i] for i in b}) for b in epoch0]
    assert min(shards_per_batch) >= 2 and np.mean(shards_per_batch) >= 3
    again = _loader(dataset)
    assert list(again) == epoch0 and list(again) == epoch1


def test_exactly_once_across_two_ranks_and_three_workers(dataset: Any) -> None:
    # The single-process run with one batch per round shows what each rank must get.
    rounds = list(_loader(dataset, batch_size=2 * B))
    per_rank = [list(_loader(dataset, workers=3, rank=r, world=2)) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1]) == len(rounds)
    got = [i for rank in per_rank for b in rank for i in b]
    assert sorted(got) == _all_ids(dataset)
    for t, whole in enumerate(rounds[:-1]):
        assert per_rank[0][t] == whole[:B] and per_rank[1][t] == whole[B:]
    assert per_rank[0][-1] + per_rank[1][-1] == rounds[-1]


def test_drop_last_gives_full_equal_batches(dataset: Any) -> None:
    per_rank = [list(_loader(dataset, workers=2, rank=r, world=3, drop_last=True)) for r in range(3)]
    assert len({len(p) for p in per_rank}) == 1
    got = [i for p in per_rank for b in p for i in b]
    assert all(len(b) == B for p in per_rank for b in p)
    assert len(got) == len(set(got)) and len(_all_ids(dataset)) - len(got) < 3 * B
    state = _loader(dataset, rank=0, world=3, drop_last=True)
    list(state)
    assert state.state_dict()["remainder"] == "drop"


def _reference(ds: Any, shuffle: bool, epochs: int = 2) -> list[list[int]]:
    loader = _loader(ds, shuffle=shuffle)
    return [b for _ in range(epochs) for b in loader]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("cut,workers_before,workers_after", [(0, 0, 2), (5, 2, 3), (39, 0, 0), (51, 3, 1)])
def test_exact_resume(dataset: Any, shuffle: bool, cut: int, workers_before: int, workers_after: int) -> None:
    reference = _reference(dataset, shuffle)
    per_epoch = len(reference) // 2
    assert per_epoch > 40
    first = _loader(dataset, workers=workers_before, shuffle=shuffle)
    seen: list[list[int]] = []
    for _ in range(2):
        need = min(cut - len(seen), per_epoch)
        seen += _take(iter(first), need)
        if need < per_epoch:
            break
    state = first.state_dict()
    resumed = _loader(dataset, workers=workers_after, shuffle=shuffle)
    resumed.load_state_dict(state)
    rest: list[list[int]] = []
    for _ in range(2):
        if len(seen) + len(rest) < len(reference):
            rest += list(resumed)
    assert seen + rest == reference


def test_resume_at_end_of_epoch_starts_the_next(dataset: Any) -> None:
    reference = _reference(dataset, True)
    loader = _loader(dataset)
    first = list(loader)
    resumed = _loader(dataset, workers=2)
    resumed.load_state_dict(loader.state_dict())
    assert first + list(resumed) == reference


@pytest.mark.parametrize("shuffle", [False, True])
def test_elastic_resume_two_ranks_to_four(dataset: Any, shuffle: bool) -> None:
    steps = 9
    before = []
    states = []
    for r in range(2):
        loader = _loader(dataset, shuffle=shuffle, rank=r, world=2, workers=2 if r else 0)
        it = iter(loader)
        before += [i for b in _take(it, steps) for i in b]
        states.append(loader.state_dict())
        del it
    assert states[0] == states[1] and states[0]["position"] == steps * 2 * B
    after = []
    counts = set()
    for r in range(4):
        loader = _loader(dataset, shuffle=shuffle, rank=r, world=4, workers=3 if r == 1 else 0)
        loader.load_state_dict(states[0])
        batches = list(loader)
        counts.add(len(batches))
        after += [i for b in batches for i in b]
    assert len(counts) == 1
    assert sorted(before + after) == _all_ids(dataset)


def test_curriculum_stages(dataset: Any) -> None:
    by_shard = dataset[2]
    easy = sorted(i for k, v in by_shard.items() if k.startswith("easy/") for i in v)
    hard = sorted(i for k, v in by_shard.items() if k.startswith("hard/") for i in v)
    assert sorted(i for b in _loader(dataset, stage="easy", workers=2) for i in b) == easy
    union = [i for b in _loader(dataset, stages=["hard", "easy"], workers=2) for i in b]
    assert sorted(union) == sorted(easy + hard)
    ordered = [i for b in _loader(dataset, stages=["hard", "easy"], shuffle=False) for i in b]
    assert ordered == [i for k in ("hard/s0", "hard/s1", "easy/s0", "easy/s1", "easy/s2") for i in by_shard[k]]
    with pytest.raises(SelectionError, match="known stages: easy, hard"):
        _loader(dataset, stage="medium")
    with pytest.raises(SelectionError, match="'medium'"):
        _loader(dataset, stages=["easy", "medium"])
    with pytest.raises(SelectionError, match="lists a stage twice"):
        _loader(dataset, stages=["easy", "hard", "easy"])
    with pytest.raises(SelectionError, match="published splits: train, valid"):
        dataset[0].ungated_loader_factory(dataset[1]).load("test")


def test_foreign_state_is_refused(dataset: Any, tmp_path: Path) -> None:
    loader = _loader(dataset)
    next(iter(loader))
    state = loader.state_dict()
    with pytest.raises(ResumeStateError, match="selection"):
        _loader(dataset, stage="easy").load_state_dict(state)
    with pytest.raises(ResumeStateError, match="seed=7"):
        vault, uri, _ = dataset
        vault.ungated_loader_factory(uri, shuffle=True, seed=8).load("train").load_state_dict(state)
    with pytest.raises(ResumeStateError, match="shuffle"):
        _loader(dataset, shuffle=False).load_state_dict(state)
    other_uri = str(tmp_path / "other" / "data-manifest-v1.json")
    _save(dataset[0], other_uri, first_id=5000)
    other = dataset[0].ungated_loader_factory(other_uri, shuffle=True, seed=7).load("train")
    with pytest.raises(ResumeStateError, match="manifest"):
        other.load_state_dict(state)
    with pytest.raises(ResumeStateError):
        loader.load_state_dict({"format": "something else"})
    with pytest.raises(ResumeStateError, match="position"):
        loader.load_state_dict({**state, "position": -1})


def test_state_is_small_and_describes_the_run(dataset: Any) -> None:
    loader = _loader(dataset, stages=["easy", "hard"])
    it = iter(loader)
    _take(it, 3)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["position"] == 3 * B and state["seed"] == 7
    assert len(repr(state)) < 1000
    text = loader.describe_state()
    assert "epoch 0" in text and f"position {3 * B}/" in text and "easy, hard" in text
    assert state["manifest_sha256"] in text


def test_infinite_iter_runs_epoch_after_epoch_and_resumes(dataset: Any) -> None:
    reference = _reference(dataset, True, epochs=3)
    loader = _loader(dataset, infinite=True, workers=2)
    it = iter(loader)
    got = _take(it, len(reference) - 10)
    assert got == reference[: len(got)]
    state = loader.state_dict()
    assert state["epoch"] == 2
    del it
    resumed = _loader(dataset, infinite=True)
    resumed.load_state_dict(state)
    assert _take(iter(resumed), 10) == reference[len(got) :]
    with pytest.raises(TypeError):
        len(resumed)


def test_persistent_workers_and_pin_memory(dataset: Any) -> None:
    reference = _reference(dataset, True, epochs=3)
    per_epoch = len(reference) // 3
    loader = _loader(dataset, workers=2, persistent_workers=True, pin_memory=True, collate=ids)
    assert len(loader) == per_epoch
    assert list(loader) + list(loader) == reference[: 2 * per_epoch]
    # A resume in between makes the workers restart at the resumed position.
    loader.load_state_dict({**loader.state_dict(), "epoch": 0, "position": 5 * B})
    assert list(loader) == reference[5:per_epoch]
    assert list(loader) == reference[per_epoch : 2 * per_epoch]
    batch = next(iter(_loader(dataset, workers=2, pin_memory=True, collate=tensors)))
    assert batch["tokens"].dtype == torch.int32 and batch["tokens"].shape == (B, 6) and len(batch["text"]) == B


def test_s3_with_workers(s3_vault: TrainVault, s3_bucket: str) -> None:
    uri = f"s3://{s3_bucket}/ds/data-manifest-v1.json"
    ds = (s3_vault, uri, _save(s3_vault, uri))
    got = [list(_loader(ds, workers=2, rank=r, world=2)) for r in range(2)]
    assert sorted(i for p in got for b in p for i in b) == _all_ids(ds)


def test_altered_block_fails_closed(tmp_path: Path) -> None:
    vault = TrainVault()
    uri = str(tmp_path / "ds" / "data-manifest-v1.json")
    ds = (vault, uri, _save(vault, uri))
    shard = next((tmp_path / "ds" / "shards" / "train" / "hard").glob("s1.*zst"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    for workers in (0, 2):
        with pytest.raises(IntegrityError, match="changed after"):
            list(_loader(ds, workers=workers, shuffle=False))


def test_refused_arguments(dataset: Any) -> None:
    vault, uri, _ = dataset
    with pytest.raises(ValueError, match="in_order"):
        vault.ungated_loader_factory(uri, dataloader_args={"in_order": False})
    with pytest.raises(ValueError, match="shuffle="):
        vault.ungated_loader_factory(uri, dataloader_args={"shuffle": True})
    with pytest.raises(ValueError, match="batch_size"):
        vault.ungated_loader_factory(uri, dataloader_args={"batch_size": 0})
    with pytest.raises(ValueError, match="rank"):
        vault.ungated_loader_factory(uri, rank=2, world_size=2)


def test_torch_is_optional() -> None:
    code = (
        "import sys\n"
        "import trainvault\n"
        "assert 'torch' not in sys.modules, 'import trainvault imported torch'\n"
        "sys.modules['torch'] = None\n"
        "try:\n"
        "    trainvault.TrainVault().ungated_loader_factory('memory://x/data-manifest-v1.json')\n"
        "except ImportError as exc:\n"
        "    assert \"pip install 'trainvault[torch]'\" in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('no ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_memory_store_with_workers_is_refused_up_front() -> None:
    vault = TrainVault()
    uri = f"memory://loader-{os.getpid()}/ds/data-manifest-v1.json"
    saver = vault.dataset_saver(uri)
    saver.save("train", None, [{"i": i} for i in range(20)], shard_id="0")
    saver.commit_manifest()
    collect = vault.ungated_loader_factory(
        uri, collate_fn=lambda rs: [r["i"] for r in rs], dataloader_args={"batch_size": 5}
    )
    assert [i for b in collect.load("train") for i in b] == list(range(20))  # num_workers=0 works
    workers = vault.ungated_loader_factory(uri, dataloader_args={"batch_size": 5, "num_workers": 2})
    with pytest.raises(StorageError, match="memory:// stores live inside one process"):
        workers.load("train")
