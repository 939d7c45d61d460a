"""`loader.trace(step)` against what real DataLoaders yielded, step by step.

Hypothesis draws the configuration (shards, records per shard, block size, batch size,
shuffle, drop_last, world size, workers, curriculum union, finite or infinite) and an
elastic resume (another world size and batch size). Every record's id encodes its shard
and index (shard number x 1000 + index), so a traced shard key and record index are
checked against the record each rank actually received.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from trainvault import TrainVault  # noqa: E402
from trainvault.loading import SplitDataLoader, TracedRecord  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

_COUNTER = itertools.count()


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in records]


def save(root: Path, stages: list[list[int]], block_bytes: int) -> tuple[str, dict[int, str]]:
    """Stage i holds shards of the given sizes; returns the manifest URI and shard number -> key."""
    uri = str(root / f"ds{next(_COUNTER)}" / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, block_bytes=block_bytes)
    keys: dict[int, str] = {}
    n = 0
    for i, sizes in enumerate(stages):
        for j, size in enumerate(sizes):
            recs = [{"id": n * 1000 + k, "text": f"r{n}-{k}"} for k in range(size)]
            keys[n] = saver.save("train", f"st{i}", recs, shard_id=f"s{j}").key
            n += 1
    saver.commit_manifest()
    return uri, keys


def expected(batch: list[int], keys: dict[int, str]) -> list[TracedRecord]:
    return [TracedRecord("train", keys[i // 1000], i % 1000, i) for i in batch]


def make(uri: str, cfg: dict[str, Any], rank: int, world: int, batch: int, workers: int) -> Any:
    sdl = SplitDataLoader(
        TrainVault().storage, uri, collate_fn=ids, shuffle=cfg["shuffle"], seed=cfg["seed"], rank=rank,
        world_size=world, shuffle_window_blocks=cfg["window"],
        dataloader_args={"batch_size": batch, "drop_last": cfg["drop_last"], "num_workers": workers},
    )
    return sdl.load("train", curriculum_stages=cfg["stages"], infinite_iter=cfg["infinite"])


def run(loader: Any, steps: int, infinite: bool, per_epoch: int) -> list[list[int]]:
    """`steps` batches: an infinite loader straight on, a finite one epoch by epoch (iter() each)."""
    if infinite:
        it = iter(loader)
        return [next(it) for _ in range(steps)]
    out: list[list[int]] = []
    while len(out) < steps:
        out += itertools.islice(iter(loader), min(per_epoch, steps - len(out)))
    return out


configs = st.fixed_dictionaries({
    "stages": st.lists(st.lists(st.integers(1, 25), min_size=1, max_size=2), min_size=1, max_size=3),
    "union": st.booleans(),
    "block_bytes": st.integers(40, 160),
    "batch": st.integers(1, 5),
    "world": st.integers(1, 3),
    "shuffle": st.booleans(),
    "drop_last": st.booleans(),
    "window": st.integers(1, 3),
    "seed": st.integers(0, 3),
    "workers": st.sampled_from([0, 2]),
    "infinite": st.booleans(),
    "cut": st.floats(0, 1),
    "world2": st.integers(1, 3),
    "batch2": st.integers(1, 5),
})


@settings(max_examples=14, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cfg=configs)
def test_trace_names_what_every_step_yielded(tmp_path_factory: pytest.TempPathFactory, cfg: dict[str, Any]) -> None:
    uri, keys = save(tmp_path_factory.mktemp("trace"), cfg["stages"], cfg["block_bytes"])
    names = [f"st{i}" for i in range(len(cfg["stages"]))]
    # A union of the stages in reverse order, or every shard of the split.
    cfg = {**cfg, "stages": names[::-1] if cfg["union"] else None}
    world, batch = cfg["world"], cfg["batch"]
    loaders = [make(uri, cfg, r, world, batch, cfg["workers"] if r == 0 else 0) for r in range(world)]
    ds = loaders[0].split_dataset
    per_epoch = len(ds.schedule(0))
    if per_epoch == 0:
        assert loaders[0].split_dataset.drop_last and list(loaders[0]) == []
        return
    # Traced before any batch is yielded: the steps an uninterrupted run will yield.
    first_step = loaders[0].trace(0)
    got = [run(loader, 2 * per_epoch, cfg["infinite"], per_epoch) for loader in loaders]
    assert first_step == expected(got[0][0], keys)
    for step in range(2 * per_epoch):
        for r in range(world):
            assert loaders[0].trace(step, rank=r) == expected(got[r][step], keys), (step, r)
    assert [t.id for t in loaders[-1].trace(0, read=False)] == [None] * len(got[-1][0])
    assert [(t.shard, t.record_index) for t in loaders[-1].trace(1, read=False)] == [
        (t.shard, t.record_index) for t in expected(got[-1][1], keys)
    ]

    # Elastic resume: cut a fresh run at some step of the first epoch, go on with another
    # world size and batch size for the rest of that epoch and one more.
    cut = round(cfg["cut"] * per_epoch)
    first = make(uri, cfg, 0, world, batch, 0)
    run(first, cut, cfg["infinite"], per_epoch)
    state = json.loads(json.dumps(first.state_dict()))
    assert state["step"] == cut
    world2, batch2 = cfg["world2"], cfg["batch2"]
    resumed = []
    for r in range(world2):
        loader = make(uri, cfg, r, world2, batch2, cfg["workers"] if r == world2 - 1 else 0)
        loader.load_state_dict(state)
        resumed.append(loader)
    if cfg["drop_last"] and len(resumed[0].split_dataset.schedule(0)) == 0:
        return  # the new dealing gives no batch at all: nothing to trace after the cut
    rest = len(resumed[0].split_dataset.schedule(state["position"] if state["position"] < ds.total else ds.total))
    after = [_resumed_run(loader, cfg["infinite"], rest) for loader in resumed]
    tracer = resumed[0]
    for step in range(cut):
        for r in range(world):
            assert tracer.trace(step, rank=r) == expected(got[r][step], keys), ("before", step, r)
    for k, batches in enumerate(after[0]):
        for r in range(world2):
            assert tracer.trace(cut + k, rank=r) == expected(after[r][k], keys), ("after", cut + k, r)
    # The state of the resumed run carries its history: a loader built from it alone traces the same.
    again = make(uri, cfg, 0, 1, 1, 0)
    again.load_state_dict(json.loads(json.dumps(resumed[0].state_dict())))
    assert again.trace(cut - 1 if cut else 0, rank=0, read=False) == tracer.trace(cut - 1 if cut else 0, rank=0,
                                                                                  read=False)
    last = cut + len(after[0]) - 1
    assert again.trace(last, rank=world2 - 1) == expected(after[world2 - 1][-1], keys)


def _resumed_run(loader: Any, infinite: bool, rest: int) -> list[list[int]]:
    """The rest of the interrupted epoch (`rest` batches, maybe none), then one more epoch."""
    whole = len(loader.split_dataset.schedule(0))
    if infinite:
        it = iter(loader)
        return [next(it) for _ in range(rest + whole)]
    out = list(iter(loader))
    if rest:
        assert len(out) == rest
        out += list(iter(loader))
    return out
