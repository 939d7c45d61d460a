"""Loader exclusions: records skipped where the order is computed, with real DataLoaders.

Shard ``easy/s0`` loses records in its first, a middle and its last block, ``easy/s1`` is
wholly excluded, ``hard/s0`` keeps everything. Record ids encode shard and index
(shard number x 1000 + index).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainvault import ConfigurationError, ResumeStateError, SelectionError, TrainVault  # noqa: E402
from trainvault.loading import LoaderPlan, SplitLoaderFactory  # noqa: E402
from trainvault.publication.reader import read_descriptor  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SHARDS = [("easy", "s0", 60), ("easy", "s1", 23), ("hard", "s0", 31)]
B = 4


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in records]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, list[int]], dict[str, list[int]]]:
    """Manifest URI, every id by shard key, and the exclusions (key -> record indices)."""
    vault = TrainVault()
    uri = str(tmp_path_factory.mktemp("exclude") / "ds" / "data-manifest-v1.json")
    saver = vault.dataset_saver(uri, block_bytes=120)
    by_key: dict[str, list[int]] = {}
    for n, (stage, shard_id, size) in enumerate(SHARDS):
        entry = saver.save(
            "train", stage, [{"id": n * 1000 + k, "text": f"record {k}"} for k in range(size)], shard_id=shard_id
        )
        by_key[entry.key] = [n * 1000 + k for k in range(size)]
    saver.commit_manifest()
    entry = vault.load_manifest(uri).splits["train"].shard("easy/s0")
    blocks = read_descriptor(vault.storage, entry).blocks
    assert len(blocks) >= 3
    middle = blocks[len(blocks) // 2]
    hits = [
        blocks[0].first_record,
        blocks[0].first_record + 1,
        middle.first_record + middle.record_count - 1,
        blocks[-1].first_record + blocks[-1].record_count - 1,
    ]
    return uri, by_key, {"easy/s0": hits, "easy/s1": list(range(23))}


def loader(
    data: Any,
    *,
    exclude: Any = "default",
    workers: int = 0,
    rank: int = 0,
    world: int = 1,
    shuffle: bool = True,
    infinite: bool = False,
    batch: int = B,
) -> Any:
    uri, _, excl = data
    plan = LoaderPlan.create(
        collate_fn=ids,
        shuffle=shuffle,
        seed=3,
        rank=rank,
        world_size=world,
        shuffle_window_blocks=2,
        dataloader_args={"batch_size": batch, "num_workers": workers},
    )
    sdl = SplitLoaderFactory(TrainVault().storage, uri, plan, exclude=excl if exclude == "default" else exclude)
    return sdl.load("train", infinite_iter=infinite)


def remaining(data: Any) -> list[int]:
    _, by_key, excl = data
    return sorted(i for key, all_ids in by_key.items() for k, i in enumerate(all_ids) if k not in excl.get(key, ()))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_two_ranks_deal_only_the_remaining_records(data: Any, workers: int, shuffle: bool) -> None:
    keep = remaining(data)
    per_rank = []
    for rank in range(2):
        ld = loader(data, workers=workers if rank else 0, rank=rank, world=2, shuffle=shuffle)
        batches = list(ld)
        assert len(batches) == len(ld) == -(-len(keep) // (2 * B))
        per_rank.append(batches)
        for step, b in enumerate(batches):  # trace skips the excluded records too
            traced = ld.trace(step)
            assert [t.id for t in traced] == b
            assert all(t.record_index == t.id % 1000 for t in traced)
        assert ld.state_dict()["epoch_records"] == len(keep)
    # 114 - 27 = 87 records, 2 x 4 a round: no padding needed.
    assert sorted(i for batches in per_rank for b in batches for i in b) == keep
    if not shuffle:  # manifest order, minus the excluded records
        assert per_rank[0][0] + per_rank[1][0] == keep[: 2 * B]


def test_resume_counts_the_remaining_records(data: Any) -> None:
    reference = [b for ld in [loader(data)] for _ in range(2) for b in ld]
    first = loader(data, workers=2)
    it = iter(first)
    head = [next(it) for _ in range(7)]
    state = first.state_dict()
    assert state["position"] == 7 * B and "exclude_sha256" in state
    del it
    resumed = loader(data, workers=2)
    resumed.load_state_dict(state)
    assert head + list(resumed) + list(resumed) == reference
    # Elastic: two ranks of batch 3 take the rest of the epoch, nothing excluded, nothing lost.
    rest: list[int] = []
    for rank in range(2):
        ld = loader(data, rank=rank, world=2, batch=3)
        ld.load_state_dict(state)
        rest += [i for b in ld for i in b]
    assert sorted([i for b in head for i in b] + rest) == remaining(data)


def test_a_state_with_other_exclusions_is_refused(data: Any) -> None:
    state = loader(data).state_dict()
    plain = loader(data, exclude=None)
    with pytest.raises(ResumeStateError, match="same exclusions"):
        plain.load_state_dict(state)
    with pytest.raises(ResumeStateError, match="same exclusions"):
        loader(data).load_state_dict(plain.state_dict())
    other = loader(data, exclude={"easy/s0": [5]})
    with pytest.raises(ResumeStateError, match="same exclusions"):
        other.load_state_dict(state)


def test_no_exclusions_leave_order_and_state_as_they_were(data: Any) -> None:
    plain = loader(data, exclude=None)
    empty = loader(data, exclude={"easy/s0": []})
    assert list(plain) == list(empty) == list(loader(data, exclude={}))
    assert plain.state_dict() == empty.state_dict() and "exclude_sha256" not in plain.state_dict()


def test_infinite_and_wholly_excluded_selections(data: Any) -> None:
    ld = loader(data, infinite=True, workers=2)
    it = iter(ld)
    per_epoch = -(-len(remaining(data)) // B)
    got = sorted(i for _ in range(per_epoch) for i in next(it))
    assert got == remaining(data)
    everything = {key: range(len(v)) for key, v in data[1].items()}
    assert list(loader(data, exclude=everything)) == []
    with pytest.raises(SelectionError, match="holds no records"):
        loader(data, exclude=everything, infinite=True)


@pytest.mark.parametrize(
    "exclude,match",
    [
        ([("easy/s0", 1)], "must map shard keys"),
        ({"easy/s9": [1]}, "not in the manifest"),
        ({"easy/s0": [-1]}, "ints >= 0"),
        ({"easy/s0": [True]}, "ints >= 0"),
        ({"easy/s0": ["1"]}, "ints >= 0"),
        ({"easy/s0": "12"}, "collection of record indices"),
        ({"easy/s0": 3}, "collection of record indices"),
        ({"easy/s0": [60]}, "holds 60 records"),
    ],
)
def test_bad_exclusions_are_refused(data: Any, exclude: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        loader(data, exclude=exclude)


class _Identity:
    """The smallest real record view: each stored record is one logical record."""

    view_sha256 = "0" * 64

    def block_counts(self, entry: Any, descriptor: Any) -> list[int]:
        return [b.record_count for b in descriptor.blocks]

    def expand(self, entry: Any, first_record: int, records: list[Any]) -> list[Any]:
        return records

    def collate(self, collate_fn: Any) -> Any:
        return collate_fn


def test_exclusions_and_a_record_view_are_refused_together(data: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be combined"):
        SplitLoaderFactory(TrainVault().storage, data[0], LoaderPlan.create(view=_Identity()), exclude={"easy/s0": [1]})
    viewed = SplitLoaderFactory(
        TrainVault().storage, data[0], LoaderPlan.create(view=_Identity(), collate_fn=ids)
    ).load("train")
    assert next(iter(viewed))
    with pytest.raises(ConfigurationError, match="record view"):
        viewed.trace(0)
