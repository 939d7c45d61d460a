"""A run resumed across an amendment: what it consumed stays consumed, the rest of its epoch is
re-dealt without the removed records, later epochs follow the amended view, every later state
names its amendment, and removed_reads stays exact for the whole run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ResumeStateError, SelectionError, TrainVault
from trainvault.approval import ApprovalPolicy, SigningKey, write_approval
from trainvault.approval.amend import amend

APPROVER = SigningKey.generate()
ROOM = (1, 5)
SHARDS = ("s0", "s1", "s2", "s3")

Steps = list[list[list[str]]]  # step -> rank -> record ids


@pytest.fixture
def approved(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    chain = build_chain(TrainVault(), str(tmp_path), shards=4, records_per_shard=20, block_bytes=256)
    gated = chain.vault.approve_dataset(chain.request())
    written = write_approval(chain.vault, f"{chain.root}/approval.json", gated, signing_keys=[APPROVER])
    return chain, written


def open_it(chain: Any, written: Any, amended: bool) -> Any:
    prefix = written.uri.rsplit("/", 1)[0] + "/amendments" if amended else None
    return chain.vault.open_approved(
        written.uri,
        written.sha256,
        trusted_keys=[APPROVER.public_key],
        amendments=prefix,
        policy=ApprovalPolicy(max_removed_fraction=ROOM),
    )


def loaders(opened: Any, batch: int, workers: int, state: Any = None) -> list[Any]:
    """Both ranks' loaders of one shuffled run, resumed at `state` when given."""
    out = []
    for rank in (0, 1):
        factory = opened.loader_factory(
            collate_fn=list,
            dataloader_args={"batch_size": batch, "num_workers": workers},
            shuffle=True,
            seed=3,
            rank=rank,
            world_size=2,
        )
        ld = factory.load("train")
        if state is not None:
            ld.load_state_dict(state)
        out.append(ld)
    return out


def run(lds: list[Any], steps: int | None = None) -> tuple[Steps, dict[str, Any]]:
    """`steps` steps in lockstep (None: to the end of the epoch); ids per step per rank, rank 0's state."""
    its = [iter(ld) for ld in lds]
    out: Steps = []
    while steps is None or len(out) < steps:
        try:
            out.append([[r["id"] for r in next(it)] for it in its])
        except StopIteration:
            break
    return out, lds[0].state_dict()


def ids(steps: Steps) -> list[str]:
    return [rid for step in steps for batch in step for rid in batch]


def position(chain: Any) -> dict[str, tuple[str, int]]:
    """Record id -> (shard key, index in the shard), from the records the chain saved."""
    return {
        r["id"]: (f"{'hard' if k == 's3' else 'easy'}/{k}", i) for k in SHARDS for i, r in enumerate(chain.records[k])
    }


def reads_of(steps: Steps, first_step: int, targets: set[str], where: dict[str, tuple[str, int]]) -> list[Any]:
    return [
        (first_step + s, rank, *where[rid])
        for s, step in enumerate(steps)
        for rank, batch in enumerate(step)
        for rid in batch
        if rid in targets
    ]


def take_down(chain: Any, opened: Any, targets: list[str]) -> Any:
    removals = [{"split": "train", "record_id": t, "reason": "opt-out", "note": t} for t in targets]
    return amend(chain.vault, opened, removals, signing_keys=APPROVER)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_resumes_across_amendments_exactly(approved: Any, workers: int) -> None:
    chain, written = approved
    where = position(chain)
    everything = set(where)
    before, state = run(loaders(open_it(chain, written, False), 4, workers), 3)  # steps 0-2: 24 records
    consumed = ids(before)
    unread = sorted(everything - set(consumed))
    first = [consumed[1], consumed[13], unread[0], unread[7]]  # two read already, two still to come
    one = take_down(chain, open_it(chain, written, False), first)
    amended = open_it(chain, written, True)

    # Resumed at another batch size: the epoch's rest, without what amendment 1 removed.
    lds = loaders(amended, 6, workers, state)
    middle, mid_state = run(lds, 2)
    assert mid_state["amendment"] == {"sequence": 1, "sha256": one.sha256}
    assert not set(ids(middle)) & set(first)
    # A second amendment while the run is in the re-dealt epoch: resume again, at batch size 4.
    later_unread = sorted(everything - set(consumed) - set(ids(middle)) - set(first))
    second_targets = [ids(middle)[5], later_unread[3]]
    two = take_down(chain, amended, second_targets)
    twice = open_it(chain, written, True)
    rest, end_state = run(loaders(twice, 4, workers, mid_state))
    removed = set(first) | set(second_targets)
    assert end_state["amendment"] == {"sequence": 2, "sha256": two.sha256}
    assert not set(ids(rest)) & removed

    # Against an independent count: the epoch dealt every record once, the removed ones only before removal.
    epoch = consumed + ids(middle) + ids(rest)
    assert len(epoch) == len(set(epoch))
    assert set(epoch) == everything - (set(unread) & set(first)) - {later_unread[3]}
    # The same resumes with no workers deal the same batches.
    if workers:
        again, again_state = run(loaders(amended, 6, 0, state), 2)
        assert again == middle and again_state == mid_state
        assert run(loaders(twice, 4, 0, mid_state))[0] == rest

    # removed_reads names exactly the steps that read what each amendment removed, across both resumes.
    expected = sorted(reads_of(before, 0, removed, where) + reads_of(middle, 3, set(second_targets), where))
    got = twice.removed_reads(end_state)
    assert sorted((r.step, r.rank, r.shard, r.record_index) for r in got) == expected and len(expected) == 3
    assert {r.amendment for r in got} == {1, 2}

    # The next epoch follows the amended view's own order: a fresh run of it deals the same.
    lds = loaders(twice, 4, workers, end_state)
    next_epoch, _ = run(lds)
    fresh = loaders(twice, 4, 0)
    run(fresh)
    assert run(fresh)[0] == next_epoch
    assert sorted(ids(next_epoch)) == sorted(everything - removed)


def test_states_name_the_amendment_and_a_foreign_one_is_refused(approved: Any) -> None:
    chain, written = approved
    opened = open_it(chain, written, False)
    _, plain = run(loaders(opened, 5, 0), 1)
    assert "amendment" not in plain  # a view without amendments keeps the state it had
    take_down(chain, opened, ["s1-1"])
    amended = open_it(chain, written, True)
    _, state = run(loaders(amended, 5, 0), 1)
    bogus = {**state, "amendment": {"sequence": 1, "sha256": "0" * 64}}
    with pytest.raises(ResumeStateError, match="not in this approval's chain"):
        loaders(amended, 5, 0, bogus)
    with pytest.raises(ResumeStateError, match="not in this approval's chain"):
        amended.removed_reads(bogus)
    # The approval opened without its amendments does not take a state of the amended view.
    with pytest.raises(ResumeStateError, match="same exclusions"):
        loaders(opened, 5, 0, state)
    # A state of a resumed run traces its own view's steps, and refuses those of the view before.
    _, before = run(loaders(opened, 5, 0), 2)
    lds = loaders(amended, 5, 0, before)
    run(lds, 1)
    assert len(lds[0].trace(2, read=False)) == 5
    with pytest.raises(SelectionError, match="removed_reads"):
        lds[0].trace(0)


def test_an_infinite_unshuffled_run_with_drop_last_resumes_across_an_amendment(approved: Any) -> None:
    chain, written = approved
    where = position(chain)

    def loader(opened: Any, state: Any = None) -> Any:
        args = {"batch_size": 7, "drop_last": True}
        ld = opened.loader_factory(collate_fn=list, dataloader_args=args).load("train", infinite_iter=True)
        if state is not None:
            ld.load_state_dict(state)
        return ld

    plain = loader(open_it(chain, written, False))
    it = iter(plain)
    before = [[r["id"] for r in next(it)] for _ in range(4)]  # 28 records of the manifest order
    state = plain.state_dict()
    order = [rid for k in SHARDS for rid in (r["id"] for r in chain.records[k])]
    gone = [order[3], order[40], order[41], order[70]]  # one consumed, three still to come
    take_down(chain, open_it(chain, written, False), gone)
    amended = open_it(chain, written, True)
    resumed = loader(amended, state)
    it = iter(resumed)
    left = len(order) - 28 - 3
    rest = [[r["id"] for r in next(it)] for _ in range(left // 7)]  # the epoch's full batches
    assert [rid for b in before + rest for rid in b] == [r for r in order if r not in gone[1:]][: 28 + 7 * (left // 7)]
    # The next epoch starts at the amended view's first record, in its own (manifest) order.
    assert [r["id"] for r in next(it)] == [r for r in order if r not in gone][:7]
    expected = sorted([(s, 0, *where[rid]) for s, b in enumerate(before) for rid in b if rid in gone])
    assert [(r.step, r.rank, r.shard, r.record_index) for r in amended.removed_reads(resumed.state_dict())] == expected


@pytest.mark.parametrize(
    "mark", [{"sequence": 0, "sha256": "ab" * 32}, {"sequence": 1, "sha256": "AB" * 32}, {"sequence": 1}]
)
def test_a_damaged_amendment_mark_is_refused(approved: Any, mark: dict[str, Any]) -> None:
    chain, written = approved
    opened = open_it(chain, written, False)
    take_down(chain, opened, ["s2-2"])
    amended = open_it(chain, written, True)
    _, state = run(loaders(amended, 5, 0), 1)
    with pytest.raises(ResumeStateError, match="amendment"):
        loaders(amended, 5, 0, {**state, "amendment": mark})
