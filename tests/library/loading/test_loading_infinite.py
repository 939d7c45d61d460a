"""Infinite iteration with real DataLoader workers, over splits of every size.

Each example runs its loaders in a forked child of its own session, so a loader that
hangs fails the example on a deadline (and is killed, workers included) instead of
hanging the suite.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")


from trainvault import SelectionError, TrainVault
from trainvault.loading import LoaderPlan, SplitLoaderFactory

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

#: Seconds one example may take before it counts as hung; a working example takes a few.
DEADLINE_S = 60
EPOCHS = 3
#: Each rank's batches, each batch its record ids.
Batches = list[list[list[int]]]


def _ids(records: list[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in records]


def _save(root: Path, records: int, shards: int) -> str:
    """`shards` shards of `records` records, one block each; record ids count from 0."""
    vault = TrainVault()
    uri = str(root / "data-manifest-v1.json")
    saver = vault.dataset_saver(uri)
    for s in range(shards):
        saver.save("train", None, [{"id": s * records + i} for i in range(records)], shard_id=f"s{s}")
    saver.commit_manifest()
    return uri


def _loader(uri: str, case: dict[str, Any], rank: int, workers: int, infinite: bool = True) -> Any:
    plan = LoaderPlan.create(
        collate_fn=_ids,
        dataloader_args={"batch_size": case["batch"], "num_workers": workers, "drop_last": case["drop_last"]},
        shuffle=case["shuffle"],
        seed=3,
        rank=rank,
        world_size=case["world"],
        shuffle_window_blocks=case["window"],
    )
    return SplitLoaderFactory(TrainVault().storage, uri, plan).load("train", infinite_iter=infinite)


def _take(loader: Any, n: int) -> list[list[int]]:
    it = iter(loader)
    return [next(it) for _ in range(n)]


def _child(send: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.setsid()  # its own process group: the parent can kill it with its DataLoader workers
    try:
        send.send((True, fn(*args)))
    except BaseException:
        send.send((False, traceback.format_exc()))


def _within_deadline(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a forked child; fails the test when no answer comes within DEADLINE_S."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args))
    proc.start()
    send.close()
    try:
        if not recv.poll(DEADLINE_S):
            pytest.fail(f"{fn.__name__}{args[1:]} gave no answer in {DEADLINE_S} s: the loader hangs")
        try:
            ok, value = recv.recv()
        except EOFError:
            pytest.fail(f"{fn.__name__}{args[1:]} died without an answer")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.join()
    if not ok:
        pytest.fail(value)
    return value


def _batches_per_epoch(total: int, case: dict[str, Any]) -> int:
    full, tail = divmod(total, case["batch"] * case["world"])
    return full + (1 if tail and not case["drop_last"] else 0)


def _run_ranks(uri: str, case: dict[str, Any], n: int) -> tuple[Batches, Batches]:
    """Each rank's first `n` batches of an infinite run with the case's workers, and the same
    rank's finite epochs in-process (the reference)."""
    got, reference = [], []
    for rank in range(case["world"]):
        got.append(_take(_loader(uri, case, rank, case["workers"]), n))
        finite = _loader(uri, case, rank, 0, infinite=False)
        reference.append([b for _ in range(EPOCHS) for b in finite])
    return got, reference


cases = st.fixed_dictionaries(
    {
        "records": st.integers(1, 60),
        "shards": st.integers(1, 12),
        "batch": st.integers(1, 16),
        "workers": st.integers(0, 3),
        "world": st.integers(1, 3),
        "shuffle": st.booleans(),
        "drop_last": st.booleans(),
        "window": st.sampled_from([1, 4, 16]),
    }
)


def _case(**changes: Any) -> dict[str, Any]:
    """The issue's split (12 shards x 60 records, batch 8, 2 workers), with `changes`."""
    case = {"records": 60, "shards": 12, "batch": 8, "workers": 2, "world": 1, "shuffle": False, "drop_last": False}
    return {**case, "window": 16, **changes}


@settings(max_examples=20, deadline=None)
@example(_case())
@example(_case(shuffle=True))
# Fewer batches an epoch than workers x ranks; a padded tail; a drop_last tail.
@example(_case(records=2, shards=1, batch=4, workers=3, world=3, shuffle=True))
@example(_case(records=5, shards=3, batch=4, workers=3, world=2, drop_last=True, window=1))
# drop_last with less than one round: refused, not an endless search for a batch.
@example(_case(records=2, shards=2, batch=4, workers=0, world=2, drop_last=True))
@given(case=cases)
def test_infinite_iter_deals_every_record_once_an_epoch(
    tmp_path_factory: pytest.TempPathFactory, case: dict[str, Any]
) -> None:
    """Per epoch (each rank's next batches_per_epoch batches): with remainder policy pad,
    the ranks' records together are the whole split, repeating only the README's padding
    (world_size - tail records when a tail of fewer records than ranks is left); with drop,
    no record twice and exactly the last partial round missing. Every rank's infinite run
    is its finite epochs back to back, whatever num_workers."""
    total = case["records"] * case["shards"]
    uri = _save(tmp_path_factory.mktemp("infinite"), case["records"], case["shards"])
    round_ = case["batch"] * case["world"]
    if case["drop_last"] and total < round_:
        with pytest.raises(SelectionError, match="would never yield"):
            _loader(uri, case, 0, case["workers"])
        return
    n = _batches_per_epoch(total, case)
    got, reference = _within_deadline(_run_ranks, uri, case, EPOCHS * n)
    assert got == reference
    tail = total % round_
    for e in range(EPOCHS):
        seen = Counter(i for rank in got for b in rank[e * n : (e + 1) * n] for i in b)
        if case["drop_last"]:
            assert max(seen.values()) == 1 and set(seen) <= set(range(total))
            assert len(seen) == total - tail
        else:
            assert set(seen) == set(range(total))
            assert seen.total() - total == (case["world"] - tail if 0 < tail < case["world"] else 0)


def _resume_ranks(uri: str, case: dict[str, Any], cut: int, n: int) -> tuple[Batches, Batches]:
    """Per rank: `cut` batches with 2 workers, then the rest from a fresh 2-worker loader that
    loaded the state taken there; and the uninterrupted in-process run."""
    got, reference = [], []
    for rank in range(case["world"]):
        first = _loader(uri, case, rank, 2)
        it = iter(first)
        before = [next(it) for _ in range(cut)]
        state = first.state_dict()
        del it
        resumed = _loader(uri, case, rank, 2)
        resumed.load_state_dict(state)
        got.append(before + _take(resumed, n - cut))
        reference.append(_take(_loader(uri, case, rank, 0), n))
    return got, reference


@st.composite
def resume_cases(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    case = draw(cases.filter(lambda c: not c["drop_last"] or c["records"] * c["shards"] >= c["batch"] * c["world"]))
    n = _batches_per_epoch(case["records"] * case["shards"], case)
    return case, draw(st.integers(0, EPOCHS * n))


@settings(max_examples=12, deadline=None)
@example((_case(shuffle=True), 90))  # the end of epoch 0
@example((_case(), 137))
@example((_case(records=3, shards=2, batch=2, world=2, shuffle=True), 3))
@given(drawn=resume_cases())
def test_infinite_iter_resumes_anywhere_with_two_workers(
    tmp_path_factory: pytest.TempPathFactory, drawn: tuple[dict[str, Any], int]
) -> None:
    """A state taken after any batch of an infinite run (epoch ends included), loaded into a
    fresh two-worker loader, continues with what the uninterrupted run produces, on every rank."""
    case, cut = drawn
    uri = _save(tmp_path_factory.mktemp("resume"), case["records"], case["shards"])
    # On past the cut by more than an epoch, so the resumed run crosses an epoch boundary.
    n = cut + _batches_per_epoch(case["records"] * case["shards"], case) + 1
    got, reference = _within_deadline(_resume_ranks, uri, case, cut, n)
    assert got == reference
