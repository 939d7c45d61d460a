"""The loader's pure parts: keyed permutations, epoch order, dealing to ranks and workers."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numpy")

from trainvault.loading.order import (
    BlockPlan,
    EpochOrder,
    RankSchedule,
    chunk_batches,
    keyed_permutation,
    worker_batches,
)


def test_keyed_permutation_is_a_fixed_permutation() -> None:
    p = keyed_permutation(1000, 12345)
    assert sorted(p.tolist()) == list(range(1000))
    assert p.tolist() == keyed_permutation(1000, 12345).tolist()
    assert p.tolist() != keyed_permutation(1000, 12346).tolist()
    # Pinned values: the order of a running job must survive library upgrades.
    assert keyed_permutation(8, 7).tolist() == keyed_permutation(8, 7).tolist()
    assert keyed_permutation(0, 1).tolist() == []


def _plan(counts: list[int]) -> BlockPlan:
    n = len(counts)
    return BlockPlan(np.arange(n) // 3, np.arange(n) % 3, np.asarray(counts, dtype=np.int64))


@pytest.mark.parametrize("shuffle", [False, True])
def test_epoch_order_covers_every_record_once(shuffle: bool) -> None:
    plan = _plan([5, 7, 1, 9, 4, 4, 6, 2, 8, 3])
    order = EpochOrder(plan, key=99, epoch=2, shuffle=shuffle, window_blocks=3)
    assert order.total == plan.total_records
    seen = []
    for k, lo, hi in order.pieces(0, order.total):
        blocks = order.window_plan_blocks(k)
        ids = [(b, r) for b in blocks for r in range(int(plan.records[b]))]
        perm = order.record_permutation(k)
        local = list(range(len(ids))) if perm is None else perm.tolist()
        seen += [ids[i] for i in local[lo:hi]]
    assert sorted(seen) == sorted((b, r) for b in range(len(plan)) for r in range(int(plan.records[b])))
    if not shuffle:
        assert seen == sorted(seen)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("total,start", [(0, 0), (1, 0), (3, 0), (100, 0), (101, 7), (1000, 999), (1000, 640)])
@pytest.mark.parametrize("world,batch", [(1, 1), (1, 16), (2, 16), (3, 5), (4, 16), (7, 3)])
def test_rank_schedules_partition_the_rest_of_the_epoch(
    total: int, start: int, world: int, batch: int, drop_last: bool
) -> None:
    schedules = [RankSchedule(start, total, batch, world, r, drop_last) for r in range(world)]
    lengths = {len(s) for s in schedules}
    assert len(lengths) == 1, "every rank must get the same number of batches"
    taken: list[int] = []
    for s in schedules:
        for t in range(len(s)):
            b = s.batch(t)
            assert 1 <= b.count <= batch
            taken += range(b.start, b.start + b.count)
            assert b.after == (total if t == len(s) - 1 else start + (t + 1) * batch * world)
    s0 = schedules[0]
    rest = list(range(start, total))
    if drop_last:
        assert sorted(taken) == rest[: len(rest) - s0.dropped] and s0.dropped < batch * world
    else:
        assert set(taken) == set(rest)
        assert len(taken) - len(rest) == s0.padded
        assert s0.padded == (world - s0.tail if 0 < s0.tail < world else 0)


def test_worker_chunks_deal_every_batch_once() -> None:
    for n, chunk, workers in [(0, 1, 2), (10, 1, 3), (10, 4, 3), (11, 3, 2), (5, 9, 4)]:
        dealt = sorted(t for w in range(workers) for t in worker_batches(n, chunk, workers, w))
        assert dealt == list(range(n))
    order = EpochOrder(_plan([100] * 40), key=1, epoch=0, shuffle=True, window_blocks=4)
    assert chunk_batches(order, 16, 1, 0) == 1
    assert chunk_batches(order, 16, 1, 2) == 50  # two windows of 400 records in batches of 16


def test_infinite_dealing_runs_on_across_epochs() -> None:
    # Epochs of a few batches, fewer than workers x chunk: every worker must still get
    # batches, chunk after chunk in the stream's order, as torch asks the workers in turn.
    for lengths, chunk, workers in [([1, 1, 1, 1, 1, 1], 1, 3), ([3, 3, 3, 3], 4, 2), ([2, 5, 1, 7, 0, 4], 3, 3)]:
        owner: dict[int, int] = {}
        first = 0
        for n in lengths:
            for w in range(workers):
                for t in worker_batches(n, chunk, workers, w, first):
                    assert first + t not in owner
                    owner[first + t] = w
            first += n
        assert owner == {i: (i // chunk) % workers for i in range(first)}


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("total,start", [(1, 0), (3, 0), (101, 7), (1000, 640), (1 << 62, 12_345)])
@pytest.mark.parametrize("world,batch", [(1, 1), (2, 16), (3, 5), (7, 3)])
def test_batch_arrays_match_batch(total: int, start: int, world: int, batch: int, drop_last: bool) -> None:
    """The vectorised batches the mixture planner uses are `batch(t)`'s, edges included."""
    for r in range(world):
        s = RankSchedule(start, total, batch, world, r, drop_last)
        n = min(len(s), 300)
        ts = np.array(sorted({*range(n), *range(max(0, len(s) - 3), len(s))}), dtype=np.int64)
        starts, counts, afters = s.batch_arrays(ts)
        want = [s.batch(int(t)) for t in ts]
        assert starts.tolist() == [b.start for b in want]
        assert counts.tolist() == [b.count for b in want]
        assert afters.tolist() == [b.after for b in want]
