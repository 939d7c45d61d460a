"""Mixtures: the schedule's share bound, and runs of real DataLoaders that revise the
mixture mid-run and resume elastically, against one uninterrupted reference run.

Every record's id encodes its stage and index (stage x 1000 + index), so a record, its
component and a traced shard key are checked against each other.
"""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from trainvault import TrainVault  # noqa: E402
from trainvault.errors import SelectionError  # noqa: E402
from trainvault.loading import LoaderPlan, SplitLoaderFactory  # noqa: E402
from trainvault.mixtures import Mixture, MixtureComponent, load_mixture  # noqa: E402
from trainvault.mixtures.dataset import window_ids  # noqa: E402
from trainvault.mixtures.schedule import (  # noqa: E402
    MAX_TABLE_PERIOD,
    Timeline,
    assign,
    assign_local,
    build_tree,
    periodic_table,
    tree_depth,
)

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

#: Records of each stage (stage i's ids are i * 1000 + index), two shards each.
STAGE_SIZES = (7, 23, 40, 61)


def ids(records: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in records]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("mix") / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, block_bytes=120)
    for i, n in enumerate(STAGE_SIZES):
        half = n // 2
        for j, (lo, hi) in enumerate([(0, half), (half, n)]):
            saver.save(
                "train", f"st{i}", [{"id": i * 1000 + k, "text": f"r{i}-{k}"} for k in range(lo, hi)], shard_id=f"s{j}"
            )
    saver.commit_manifest()
    return uri


# -- the schedule alone ------------------------------------------------------------------


@settings(max_examples=60, deadline=2000, derandomize=True)
@given(weights=st.lists(st.integers(1, 1000), min_size=1, max_size=9), start=st.integers(0, 10**12))
def test_schedule_share_bound(weights: list[int], start: int) -> None:
    """Prefix counts within d/2 of w n, any window of L slots within d of w L (d: tree depth),
    also far into a run (slot 10^12): the bound the README states."""
    ws = {c: Fraction(w) for c, w in enumerate(weights)}
    total = sum(ws.values())
    tl = Timeline([1 << 60] * len(ws), [False] * len(ws), [(0, ws)])
    depth = tl.depth()
    assert depth == (len(ws) - 1).bit_length()
    comps, draws, _ = tl.assign(start, 4000)
    before = tl.segments[0].counts_at(start)
    for c, w in ws.items():
        mine = comps == c
        prefix = before[c] + np.cumsum(mine)
        n = start + np.arange(1, len(comps) + 1)
        assert np.abs(prefix - n * float(w / total)).max() <= depth / 2 + 1e-6
        # Draw numbers count on from what the component drew before this stretch.
        assert (draws[mine] == before[c] + np.arange(mine.sum())).all()
        for lo in (0, 17, 999):
            for length in (1, 32, 1000, 3000):
                got = int(mine[lo : lo + length].sum())
                assert abs(got - length * w / total) <= depth


def test_share_over_1000_batches_of_32_is_within_a_thousandth_of_a_percent() -> None:
    """The issue's window: 1,000 batches of 32 anywhere in the run, five components."""
    ws = {0: Fraction(5), 1: Fraction(3), 2: Fraction(1), 3: Fraction(7, 10), 4: Fraction(3, 10)}
    tl = Timeline([1 << 60] * 5, [False] * 5, [(0, ws)])
    worst = 0.0
    for start in (0, 32 * 12_345, 32 * 10**9):
        comps, _, _ = tl.assign(start, 32_000)
        for c, w in ws.items():
            worst = max(worst, abs(float((comps == c).mean()) - float(w / sum(ws.values()))))
    assert worst <= tl.depth() / 32_000 < 0.0001


@settings(max_examples=60, deadline=5000, derandomize=True)
@given(
    weights=st.lists(st.tuples(st.integers(1, 999), st.sampled_from([1, 10, 100, 1000])), min_size=1, max_size=9),
    start=st.one_of(st.integers(0, 10**6), st.integers(0, 1 << 61)),
)
def test_table_lookup_assigns_exactly_as_the_tree(weights: list[tuple[int, int]], start: int) -> None:
    """The periodic table (the fast path) gives the tree's component and draw for every slot,
    also far past the table's period and past int64 products (the tree on Python ints)."""
    tree = build_tree([(c, Fraction(n, d)) for c, (n, d) in enumerate(weights)])
    x = np.arange(start, start + 2000, dtype=np.int64)
    want_c, want_d = assign(tree, x.astype(object))
    got_c, got_d = assign_local(tree, x)
    assert got_c.tolist() == [int(c) for c in want_c] and got_d.tolist() == [int(d) for d in want_d]


def test_small_weights_use_the_table_and_large_denominators_the_tree() -> None:
    """Weights with few decimals take the table path; a period past MAX_TABLE_PERIOD does not."""
    assert periodic_table(build_tree([(0, Fraction(1, 2)), (1, Fraction(3, 10)), (2, Fraction(1, 5))]))[0] == 10
    assert periodic_table(build_tree([(0, Fraction(1)), (1, Fraction(MAX_TABLE_PERIOD + 1))])) is None


def test_slots_beyond_int64_products_are_assigned() -> None:
    """Weights 1 : 999,983 (period too long for the table) at slot 10^12: 2ax overflows int64,
    so the tree runs on Python ints (main raised TypeError from np.divmod on objects)."""
    ws = {0: Fraction(1), 1: Fraction(999_983)}
    tl = Timeline([1 << 62] * 2, [False] * 2, [(0, ws)])
    start, n = 10**12, 3_000_000
    comps, draws, _ = tl.assign(start, n)
    before, after = tl.segments[0].counts_at(start), tl.segments[0].counts_at(start + n)
    for c in ws:
        mine = comps == c
        assert int(mine.sum()) == after[c] - before[c]
        assert (draws[mine] == before[c] + np.arange(mine.sum())).all()
    assert 0 < after[0] - before[0] <= 4


@pytest.mark.parametrize("rising", [True, False])
def test_window_ids_number_windows_as_a_sorted_unique(rising: bool) -> None:
    """The planner's run-based window numbering (draws rising) and its fallback (any order)
    give np.unique's keys and indices."""
    rng = np.random.default_rng(3)
    draws = np.sort(rng.integers(0, 5000, 3000)) if rising else rng.integers(0, 5000, 3000)
    epochs, windows = draws // 1000, (draws % 1000) // 70
    keys: list[tuple[int, int, int]] = [(0, 0, 0)]
    got = window_ids(4, draws, epochs, windows, keys)
    rows, want = np.unique(np.stack([epochs, windows], axis=1), axis=0, return_inverse=True)
    assert keys[1:] == [(4, e, w) for e, w in rows.tolist()]
    assert got.tolist() == want.reshape(-1).tolist()


def test_drop_renormalises_and_a_dropped_component_stays_out() -> None:
    tl = Timeline(
        [10, 1 << 60], [True, False], [(0, {0: Fraction(1), 1: Fraction(1)}), (100, {0: Fraction(1), 1: Fraction(1)})]
    )
    comps, _, revs = tl.assign(0, 200)
    assert (comps == 0).sum() == 10  # one pass, then out: also under the later revision that lists it
    assert comps[20:].tolist() == [1] * 180
    assert revs[99] == 0 and revs[100] == 1
    assert [s.start for s in tl.segments] == [0, 19, 100] and tree_depth(tl.segments[1].tree) == 0


# -- real DataLoaders ---------------------------------------------------------------------


def loader(uri: str, cfg: dict[str, Any], rank: int, world: int, batch: int, workers: int) -> Any:
    plan = LoaderPlan.create(
        collate_fn=ids,
        shuffle=cfg["shuffle"],
        seed=cfg["seed"],
        rank=rank,
        world_size=world,
        shuffle_window_blocks=cfg["window"],
        dataloader_args={"batch_size": batch, "num_workers": workers},
    )
    sdl = SplitLoaderFactory(TrainVault().storage, uri, plan)
    return load_mixture(sdl, cfg["mixtures"][0])


def mixture(stages: list[int], weights: list[int], flags: dict[int, tuple[bool, str]]) -> Mixture:
    return Mixture(
        "train",
        [
            MixtureComponent(f"st{s}", w, f"st{s}", replacement=flags[s][0], run_out=flags[s][1])
            for s, w in zip(stages, weights, strict=False)
        ],
    )


def lockstep(loaders: list[Any], steps: int, out: list[int], stepped: list[list[list[int]]]) -> None:
    """Up to `steps` steps of every rank; the global record stream (rounds, ranks in order) onto `out`."""
    its = [iter(ld) for ld in loaders]
    for _ in range(steps):
        before = loaders[0].state_dict()["position"]
        batches = [next(it, None) for it in its]
        if batches[0] is None:
            assert all(b is None for b in batches)
            return
        for r, b in enumerate(batches):
            stepped[r].append(b)
        dealt = loaders[0].state_dict()["position"] - before  # a padded tail repeats a record on a rank
        out += [i for b in batches for i in b][:dealt]


configs = st.fixed_dictionaries(
    {
        "stages": st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
        "weights": st.lists(st.integers(1, 5), min_size=3, max_size=3),
        "flags": st.lists(st.tuples(st.booleans(), st.sampled_from(["repeat", "drop"])), min_size=4, max_size=4),
        "shuffle": st.booleans(),
        "window": st.integers(1, 3),
        "seed": st.integers(0, 3),
        "world": st.integers(1, 3),
        "batch": st.integers(1, 5),
        "workers": st.sampled_from([0, 1, 2]),
        "world2": st.integers(1, 3),
        "batch2": st.integers(1, 6),
        "workers2": st.sampled_from([0, 2]),
        "cut": st.integers(0, 12),
        "more": st.integers(1, 12),
        "revisions": st.lists(
            st.tuples(st.integers(0, 10), st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True)), max_size=3
        ),
    }
)


@settings(
    max_examples=18,
    deadline=30_000,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(cfg=configs)
def test_revised_mixture_resumes_exactly(dataset: str, cfg: dict[str, Any]) -> None:
    flags = dict(enumerate(cfg["flags"]))
    cfg["mixtures"] = [mixture(cfg["stages"], cfg["weights"], flags)]
    world, batch, world2, batch2 = cfg["world"], cfg["batch"], cfg["world2"], cfg["batch2"]
    first = [loader(dataset, cfg, r, world, batch, cfg["workers"] if r == 0 else 0) for r in range(world)]
    # Revisions: one before the run, one while it iterates (workers restart), one after the resume.
    revs = [(gap, mixture(stages, cfg["weights"] * 2, flags)) for gap, stages in cfg["revisions"]]
    applied: list[tuple[int, Mixture]] = []  # (slot, mixture) for the reference run

    def revise(loaders: list[Any], at_step: int, mix: Mixture) -> None:
        try:
            for ld in loaders:
                ld.set_mixture(mix, at_step=at_step)
        except SelectionError:  # past the end of a finite stream: refused on every rank alike
            return
        applied.append((loaders[0].state_dict()["revisions"][-1]["at_slot"], mix))

    if revs:
        revise(first, revs[0][0] + 1, revs[0][1])
    stream: list[int] = []
    stepped: list[list[list[int]]] = [[] for _ in range(world)]
    lockstep(first, cfg["cut"] // 2, stream, stepped)
    if len(revs) > 1:
        revise(first, len(stepped[0]) + revs[1][0], revs[1][1])
    lockstep(first, cfg["cut"] - cfg["cut"] // 2, stream, stepped)
    state = json.loads(json.dumps(first[0].state_dict()))
    assert all(ld.state_dict() == state for ld in first)  # every rank holds the same state
    cut = len(stepped[0])

    second = [loader(dataset, cfg, r, world2, batch2, cfg["workers2"] if r == world2 - 1 else 0) for r in range(world2)]
    for ld in second:
        ld.load_state_dict(state)
    if len(revs) > 2:
        revise(second, cut + revs[2][0], revs[2][1])
    stepped2: list[list[list[int]]] = [[] for _ in range(world2)]
    lockstep(second, cfg["more"], stream, stepped2)

    # The uninterrupted reference: one rank, batches of one, the same revisions at the same record slots.
    ref = loader(dataset, cfg, 0, 1, 1, 0)
    for slot, mix in applied:
        ref.set_mixture(mix, at_step=slot)
    expected = [b[0] for b in itertools.islice(iter(ref), len(stream))]
    assert stream == expected

    # Trace: every step of both runs, from the resumed loader's history (rank by rank).
    tracer = second[0]
    for step in range(cut):
        for r in range(world):
            assert [t.id for t in tracer.trace(step, rank=r)] == stepped[r][step], (step, r)
    for k in range(len(stepped2[0])):
        for r in range(world2):
            traced = tracer.trace(cut + k, rank=r)
            assert [t.id for t in traced] == stepped2[r][k], (cut + k, r)
            assert all(t.component == f"st{t.id // 1000}" and t.shard.startswith(f"st{t.id // 1000}/") for t in traced)

    # Shares: each component's count over every stretch of one revision is within the tree's bound.
    per_slot = [ref.trace(s, read=False)[0] for s in range(len(stream))]
    _check_shares(ref, per_slot)
    _check_passes(ref, cfg, flags, stream)


def _check_shares(ref: Any, per_slot: list[Any]) -> None:
    timeline = ref._timeline
    for seg_i, seg in enumerate(timeline.segments):
        if seg.tree is None:
            continue
        end = timeline.segments[seg_i + 1].start if seg_i + 1 < len(timeline.segments) else len(per_slot)
        span = per_slot[seg.start : min(end, len(per_slot))]
        if not span:
            continue
        assert {t.revision for t in span} == {seg.revision}
        weights = {c.name: c.exact_weight for c in ref._revisions[seg.revision].mixture.components}
        live = {n: w for n, w in weights.items() if ref._names.index(n) in _leaves(seg.tree)}
        total = sum(live.values())
        depth = tree_depth(seg.tree)
        for name, w in live.items():
            got = sum(t.component == name for t in span)
            assert abs(got - len(span) * w / total) <= depth / 2 + 1e-9, (name, got, len(span))


def _leaves(tree: Any) -> set[int]:
    return {tree} if isinstance(tree, int) else _leaves(tree[2]) | _leaves(tree[3])


def _check_passes(ref: Any, cfg: dict[str, Any], flags: dict[int, tuple[bool, str]], stream: list[int]) -> None:
    """Without replacement each whole pass of a component is every record of its stage once;
    a dropped component deals one pass at most; the report counts what the stream holds."""
    report = {r.name: r for r in ref.mixture_report()}
    for name, r in report.items():
        s = int(name[2:])
        mine = [i for i in stream if i // 1000 == s]
        assert r.draws == len(mine) and r.records == STAGE_SIZES[s]
        assert r.repeated == max(0, len(mine) - STAGE_SIZES[s])
        if flags[s][1] == "drop":
            assert len(mine) <= STAGE_SIZES[s]
        if not flags[s][0]:
            for p in range(len(mine) // STAGE_SIZES[s]):
                chunk = mine[p * STAGE_SIZES[s] : (p + 1) * STAGE_SIZES[s]]
                assert sorted(chunk) == [s * 1000 + k for k in range(STAGE_SIZES[s])]
        else:
            assert set(mine) <= {s * 1000 + k for k in range(STAGE_SIZES[s])}
