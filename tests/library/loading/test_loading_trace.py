"""`loader.trace(step)` against what real DataLoaders yielded, step by step.

Hypothesis draws the configuration (shards, records per shard, block size, batch size,
shuffle, drop_last, world size, workers, curriculum union, finite or infinite, exclusions) and an
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

from trainvault import SelectionError, TrainVault  # noqa: E402
from trainvault.loading import LoaderPlan, SplitLoaderFactory  # noqa: E402
from trainvault.loading.trace import TracedRecord  # noqa: E402

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


def excluded(cfg: dict[str, Any]) -> dict[str, list[int]] | None:
    """None, every third record of every shard, or all of the first shard."""
    sizes = [n for stage in cfg["stages"] for n in stage]
    keys = [f"st{i}/s{j}" for i, stage in enumerate(cfg["stages"]) for j in range(len(stage))]
    if cfg["exclude"] == "every third":
        return {key: list(range(0, n, 3)) for key, n in zip(keys, sizes, strict=False)}
    return {keys[0]: list(range(sizes[0]))} if cfg["exclude"] == "first shard" else None


def make(uri: str, cfg: dict[str, Any], rank: int, world: int, batch: int, workers: int) -> Any:
    plan = LoaderPlan.create(
        collate_fn=ids,
        shuffle=cfg["shuffle"],
        seed=cfg["seed"],
        rank=rank,
        world_size=world,
        shuffle_window_blocks=cfg["window"],
        dataloader_args={"batch_size": batch, "drop_last": cfg["drop_last"], "num_workers": workers},
    )
    sdl = SplitLoaderFactory(TrainVault().storage, uri, plan, exclude=cfg.get("exclude_map"))
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


configs = st.fixed_dictionaries(
    {
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
        "exclude": st.sampled_from(["none", "every third", "first shard"]),
        "cut": st.floats(0, 1),
        "world2": st.integers(1, 3),
        "batch2": st.integers(1, 5),
    }
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(cfg=configs)
def test_trace_names_what_every_step_yielded(tmp_path_factory: pytest.TempPathFactory, cfg: dict[str, Any]) -> None:
    uri, keys = save(tmp_path_factory.mktemp("trace"), cfg["stages"], cfg["block_bytes"])
    names = [f"st{i}" for i in range(len(cfg["stages"]))]
    # A union of the stages in reverse order, or every shard of the split.
    cfg = {**cfg, "stages": names[::-1] if cfg["union"] else None, "exclude_map": excluded(cfg)}
    world, batch = cfg["world"], cfg["batch"]
    probe = make(uri, {**cfg, "infinite": False}, 0, world, batch, 0)
    ds = probe.split_dataset
    if ds.total == 0 or (cfg["drop_last"] and ds.total < world * batch):  # not one batch
        assert list(probe) == []
        if cfg["infinite"]:
            with pytest.raises(SelectionError):  # refused up front: it would never yield
                make(uri, cfg, 0, world, batch, 0)
        return
    loaders = [make(uri, cfg, r, world, batch, cfg["workers"] if r == 0 else 0) for r in range(world)]
    per_epoch = len(ds.schedule(0))
    gone = {n * 1000 + k for key, ks in (cfg["exclude_map"] or {}).items() for n in keys if keys[n] == key for k in ks}
    # Traced before any batch is yielded: the steps an uninterrupted run will yield.
    first_step = loaders[0].trace(0)
    # Three epochs: from the third on, a step's epoch and batch come from `// ` and `%` of whole epochs.
    got = [run(loader, 3 * per_epoch, cfg["infinite"], per_epoch) for loader in loaders]
    assert first_step == expected(got[0][0], keys)
    assert not gone & {i for batches in got for b in batches for i in b}
    for step in range(3 * per_epoch):
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
    if cfg["drop_last"] and ds.total < world2 * batch2:
        if cfg["infinite"]:  # refused up front: it would never yield
            with pytest.raises(SelectionError):
                make(uri, cfg, 0, world2, batch2, 0)
        return  # the new dealing gives no batch at all: nothing to trace after the cut
    resumed = []
    for r in range(world2):
        loader = make(uri, cfg, r, world2, batch2, cfg["workers"] if r == world2 - 1 else 0)
        loader.load_state_dict(state)
        resumed.append(loader)
    at_end = state["position"] >= ds.total
    rest = len(resumed[0].split_dataset.schedule(ds.total if at_end else state["position"]))
    after = [_resumed_run(loader, cfg["infinite"], rest, at_end) for loader in resumed]
    tracer = resumed[0]
    for step in range(cut):
        for r in range(world):
            assert tracer.trace(step, rank=r) == expected(got[r][step], keys), ("before", step, r)
    for k in range(len(after[0])):
        for r in range(world2):
            assert tracer.trace(cut + k, rank=r) == expected(after[r][k], keys), ("after", cut + k, r)
    # The state of the resumed run carries its history: a loader built from it alone traces the same.
    again = make(uri, cfg, 0, 1, 1, 0)
    again.load_state_dict(json.loads(json.dumps(resumed[0].state_dict())))
    assert again.trace(cut - 1 if cut else 0, rank=0, read=False) == tracer.trace(
        cut - 1 if cut else 0, rank=0, read=False
    )
    if after[0]:
        last = cut + len(after[0]) - 1
        assert again.trace(last, rank=world2 - 1) == expected(after[world2 - 1][-1], keys)


def _resumed_run(loader: Any, infinite: bool, rest: int, at_end: bool) -> list[list[int]]:
    """The rest of the interrupted epoch (`rest` batches, maybe none), then one more epoch."""
    whole = len(loader.split_dataset.schedule(0))
    if infinite:
        it = iter(loader)
        return [next(it) for _ in range(rest + whole)]
    out = list(iter(loader))
    if not at_end:  # that was the rest of the interrupted epoch; the next iter() starts another
        assert len(out) == rest
        out += list(iter(loader))
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, str]]:
    return save(tmp_path_factory.mktemp("small"), [[23, 17], [30]], 100)


CFG = {"shuffle": True, "seed": 1, "window": 2, "drop_last": False, "infinite": False, "stages": None}


def test_an_epoch_cut_short_is_a_redealing_point(small: Any) -> None:
    uri, keys = small
    ld = make(uri, CFG, 0, 1, 4, 2)
    head = list(itertools.islice(iter(ld), 5))  # the rest of epoch 0 is never dealt
    tail = list(iter(ld)) + list(iter(ld))  # epochs 1 and 2
    got = head + tail
    assert [ld.trace(s) for s in range(len(got))] == [expected(b, keys) for b in got]
    state = ld.state_dict()
    assert [h["step"] for h in state["history"]] == [0, 5] and state["step"] == len(got)
    fresh = make(uri, CFG, 0, 1, 4, 0)
    fresh.load_state_dict(state)
    assert fresh.trace(6) == expected(got[6], keys) and fresh.trace(2) == expected(got[2], keys)


def test_a_version_1_state_is_taken_as_an_uninterrupted_run(small: Any) -> None:
    uri, keys = small
    ld = make(uri, CFG, 1, 2, 3, 0)
    per_epoch = len(ld)
    got = [b for _ in range(2) for b in ld]
    it = iter(ld)
    got += [next(it) for _ in range(3)]
    state = ld.state_dict()
    old = {k: v for k, v in state.items() if k not in ("step", "history", "manifest_uri")}
    old["version"] = 1
    resumed = make(uri, CFG, 1, 2, 3, 0)
    resumed.load_state_dict(old)
    assert resumed.state_dict()["step"] == 2 * per_epoch + 3 == state["step"]
    assert [resumed.trace(s) for s in range(len(got))] == [expected(b, keys) for b in got]
    nxt = list(resumed)
    assert resumed.trace(len(got)) == expected(nxt[0], keys)
    # A damaged version 1 state (no batch, no ranks) is refused, not a division by zero.
    from trainvault import ResumeStateError

    for field in ("batch_size", "world_size"):
        with pytest.raises(ResumeStateError, match="it is damaged"):
            make(uri, CFG, 1, 2, 3, 0).load_state_dict({**old, field: 0})


def test_bad_steps_and_ranks(small: Any) -> None:
    from trainvault import ConfigurationError

    uri, _ = small
    ld = make(uri, CFG, 0, 2, 4, 0)
    for step in (-1, "3", True, 1.0):
        with pytest.raises(ConfigurationError, match="step must be an int"):
            ld.trace(step)
    with pytest.raises(ConfigurationError, match="ran on 2 rank"):
        ld.trace(0, rank=2)
    # 70 records never fill a round of 40 x 2 with drop_last: no step 0 exists.
    empty = make(uri, {**CFG, "drop_last": True}, 0, 2, 40, 0)
    assert list(empty) == []
    with pytest.raises(SelectionError, match="never happens"):
        empty.trace(0)


@pytest.mark.parametrize(
    "change,match",
    [
        ({"version": 3}, "version 3 is not supported"),
        ({"history": []}, "non-empty list"),
        ({"history": "x"}, "non-empty list"),
        ({"history": [1]}, "entries are dicts"),
        (
            {"history": [{"step": 0, "epoch": 0, "position": 0, "batch_size": 4, "world_size": 1, "remainder": "x"}]},
            "pad or drop",
        ),
        (
            {"history": [{"step": 0, "epoch": 0, "position": 0, "batch_size": 0, "world_size": 1, "remainder": "pad"}]},
            "out of range",
        ),
        ({"history": [{"step": 0, "epoch": 0, "position": 0, "batch_size": 4, "remainder": "pad"}]}, "lacks field"),
        ({"step": -0.5}, "must be int"),
        (
            {
                "step": 0,
                "history": [
                    {"step": 3, "epoch": 0, "position": 0, "batch_size": 4, "world_size": 1, "remainder": "pad"}
                ],
            },
            "out of order",
        ),
        ({"manifest_uri": None}, "must be str"),
        ({"batch_size": 0}, "must be >= 1, >= 1 and pad or drop"),
        ({"world_size": -1}, "must be >= 1, >= 1 and pad or drop"),
        ({"remainder": "keep"}, "must be >= 1, >= 1 and pad or drop"),
        # Well-typed but impossible histories would name other records: a point past the epoch's end,
        # one that goes back, one past where the run stands.
        (
            {
                "history": [
                    {"step": 0, "epoch": 0, "position": 71, "batch_size": 4, "world_size": 1, "remainder": "pad"}
                ]
            },
            "it is damaged",
        ),
        (
            {
                "step": 2,
                "history": [
                    {"step": 0, "epoch": 1, "position": 0, "batch_size": 4, "world_size": 1, "remainder": "pad"},
                    {"step": 1, "epoch": 0, "position": 8, "batch_size": 4, "world_size": 1, "remainder": "pad"},
                ],
            },
            "it is damaged",
        ),
        (
            {"history": [{"step": 0, "epoch": 3, "position": 0, "batch_size": 4, "world_size": 1, "remainder": "pad"}]},
            "it is damaged",
        ),
    ],
)
def test_damaged_version_2_states_are_refused(small: Any, change: dict[str, Any], match: str) -> None:
    from trainvault import ResumeStateError

    uri, _ = small
    ld = make(uri, CFG, 0, 1, 4, 0)
    with pytest.raises(ResumeStateError, match=match):
        ld.load_state_dict({**ld.state_dict(), **change})


@pytest.mark.parametrize("workers", [0, 2])
def test_a_step_not_yet_yielded_continues_the_iteration_in_progress(small: Any, workers: int) -> None:
    uri, keys = small
    ld = make(uri, CFG, 0, 1, 4, workers)
    per_epoch = len(ld)
    it = iter(ld)
    assert ld.trace(0) == expected(next(it), keys)  # an iteration begun, then traced ahead of it
    for step in range(1, per_epoch):
        assert ld.trace(step) == expected(next(it), keys), step
    # Dropped part-way, the iteration is over: the next steps are the next iter()'s (epoch 1).
    it = iter(ld)
    first = [next(it) for _ in range(2)]
    assert ld.trace(per_epoch + 2) == expected(next(it), keys)
    del it
    assert ld.trace(per_epoch + 3) == expected(next(iter(ld)), keys)
    assert [ld.trace(per_epoch + s) for s in range(2)] == [expected(b, keys) for b in first]
    # A state loaded while an iteration runs: the next steps are the resumed run's (here batch 3, not 4).
    other = make(uri, CFG, 0, 1, 3, workers)
    live = iter(other)
    next(live)
    other.load_state_dict(ld.state_dict())
    step = ld.state_dict()["step"]
    assert other.trace(step) == expected(next(iter(other)), keys)


def test_read_records_reads_each_block_once_however_many_records_it_asks(tmp_path: Path) -> None:
    """The one reader both traces use (`load()`'s and a mixture's): records in the order asked,
    repeats included, each block fetched and verified once."""
    from trainvault.loading.trace import read_records

    uri, _ = save(tmp_path, [[12, 7]], block_bytes=60)
    plan = LoaderPlan.create(collate_fn=ids, dataloader_args={"batch_size": 4})
    chosen = SplitLoaderFactory(TrainVault().storage, uri, plan).select_blocks("train", "st0")
    blocks = chosen.blocks
    assert len(blocks.records) >= 4  # several blocks per shard: repeats below span blocks
    asked = [(3, 0), (0, 1), (3, 0), (0, 0), (1, 0), (0, 1)]
    got = read_records(chosen.fetcher, blocks, [b for b, _ in asked], [r for _, r in asked])
    shard_ids = [0, 1]  # record id = shard number x 1000 + index in the shard
    assert [r["id"] for r in got] == [
        shard_ids[int(blocks.shard[b])] * 1000 + blocks.record_index(b, r) for b, r in asked
    ]
    assert chosen.fetcher.times.take()[-1] == 3  # blocks 3, 0 and 1: each read once
