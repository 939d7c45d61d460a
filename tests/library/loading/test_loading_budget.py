"""PositionBudget: every rule of its docstring."""

from __future__ import annotations

import pytest

from trainvault.errors import BudgetError, ResumeStateError
from trainvault.loading import PositionBudget
from trainvault.loading.budget import Boundary


def budget() -> PositionBudget:
    return PositionBudget(1000, checkpoint_every=250, stage_ends={"warmup": 250, "main": 900})


def test_boundaries_fire_once_in_order() -> None:
    b = budget()
    assert b.consume(100) == ()
    fired = b.consume(200)
    assert fired == (Boundary(250, "checkpoint", "250"), Boundary(250, "stage", "warmup"))
    assert b.consume(0) == ()
    assert [x.id for x in b.consume(650)] == ["checkpoint:500@500", "checkpoint:750@750", "stage:main@900"]
    assert b.consumed == 950 and b.remaining == 50 and not b.exhausted
    assert [x.id for x in b.consume(50)] == ["checkpoint:1000@1000"]
    assert b.exhausted and b.pending == ()


def test_consume_refuses_bad_counts_and_overflow() -> None:
    b = budget()
    b.consume(990)
    with pytest.raises(BudgetError, match="past the budget's total 1000"):
        b.consume(11)
    assert b.consumed == 990
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            b.consume(bad)


def test_configuration_is_validated() -> None:
    with pytest.raises(ValueError):
        PositionBudget(-1)
    with pytest.raises(ValueError, match="past the budget's total"):
        PositionBudget(10, stage_ends={"a": 11})
    with pytest.raises(ValueError, match="past the budget's total"):
        PositionBudget(10, checkpoints=[20])
    with pytest.raises(ValueError):
        PositionBudget(10, checkpoint_every=0)


def test_snapshot_and_restore_never_fire_a_boundary_again() -> None:
    b = budget()
    b.consume(600)
    state = b.snapshot()
    fresh = budget()
    fresh.restore(state)
    assert fresh.consumed == 600 and fresh.emitted == b.emitted
    assert [x.id for x in fresh.consume(200)] == ["checkpoint:750@750"]


def test_restore_rejects_backward_progress() -> None:
    b = budget()
    early = b.snapshot()
    b.consume(300)
    with pytest.raises(ResumeStateError, match="never goes backward"):
        b.restore(early)
    assert b.consumed == 300


def test_restore_rejects_incomplete_boundary_state() -> None:
    b = budget()
    b.consume(600)
    state = b.snapshot()
    missing = {**state, "emitted": state["emitted"][:-1]}
    with pytest.raises(ResumeStateError, match="incomplete boundary state"):
        budget().restore(missing)
    ahead = {**state, "emitted": [*state["emitted"], "checkpoint:750@750"]}
    with pytest.raises(ResumeStateError, match="incomplete boundary state"):
        budget().restore(ahead)
    with pytest.raises(ResumeStateError):
        budget().restore({**state, "consumed": 2000})


def test_restore_rejects_another_budget() -> None:
    state = budget().snapshot()
    with pytest.raises(ResumeStateError, match="another total or other boundaries"):
        PositionBudget(1000, checkpoint_every=100).restore(state)
    with pytest.raises(ResumeStateError):
        budget().restore({"format": "something-else"})
