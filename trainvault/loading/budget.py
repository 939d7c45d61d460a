"""PositionBudget: consumed positions (tokens) counted against checkpoint and stage boundaries.

Rules:

- Positions only grow: `consume(n)` takes ``n >= 0`` and refuses to pass `total`
  (`BudgetError`, nothing changes).
- A boundary at position p is emitted by the first `consume` that brings the count to
  p or beyond, exactly once, in position order (ties: checkpoints before stages, then by
  name).
- `snapshot()` records the configuration digest, the consumed count and the emitted
  boundaries. `restore(state)` accepts only a state of the same configuration whose
  count is not behind this budget's, and whose emitted set is exactly the boundaries at
  or before its count (a boundary reached but not recorded, or recorded but not
  reached, is incomplete state). After a restore no emitted boundary fires again.

What a position is, is the trainer's choice, kept for the whole run. With a component
range materializer, count what the loader's positions count: logical records (ranges in
``unpack`` mode, packed records with ranges in ``group`` mode). Size the budget with
``materializer.logical_records`` and consume each batch's ``logical_records`` (from
``collate_sequences``); `consumed` then equals the loader's ``state_dict()["position"]``,
and a boundary may fall inside a packed record: a resume there continues with its next range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import BudgetError, ResumeStateError

STATE_FORMAT = "trainvault.position-budget"
STATE_VERSION = 1


@dataclass(frozen=True, order=True)
class Boundary:
    """A position at which the trainer must act: save a checkpoint, or end a stage."""

    position: int
    kind: Literal["checkpoint", "stage"]
    name: str

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.name}@{self.position}"


def _count(value: Any, what: str, *, positive: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (1 if positive else 0):
        raise BudgetError(f"{what} must be a {'positive' if positive else 'non-negative'} int, got {value!r}")
    return value


class PositionBudget:
    """Counts consumed positions up to `total`, emitting boundaries as they are reached.

    - `total`: positions in the budget (e.g. tokens of an approved dataset's epoch).
    - `checkpoint_every`: a checkpoint boundary at every multiple of it up to `total`.
    - `checkpoints`: further explicit checkpoint positions (1..total).
    - `stage_ends`: stage name -> the position where that stage ends (1..total).
    """

    def __init__(
        self,
        total: int,
        *,
        checkpoint_every: int | None = None,
        checkpoints: Sequence[int] = (),
        stage_ends: Mapping[str, int] | None = None,
    ):
        self.total = _count(total, "total")
        bounds: set[Boundary] = set()
        if checkpoint_every is not None:
            step = _count(checkpoint_every, "checkpoint_every", positive=True)
            bounds.update(Boundary(p, "checkpoint", str(p)) for p in range(step, total + 1, step))
        for p in checkpoints:
            if _count(p, "a checkpoint position", positive=True) > total:
                raise BudgetError(f"checkpoint position {p} is past the budget's total {total}")
            bounds.add(Boundary(p, "checkpoint", str(p)))
        if stage_ends is not None and not isinstance(stage_ends, Mapping):
            raise TypeError(
                f"stage_ends must be a mapping of stage name to end position, got {type(stage_ends).__name__}"
            )
        for name, p in (stage_ends or {}).items():
            if not isinstance(name, str) or not name:
                raise BudgetError(f"stage names must be non-empty strings, got {name!r}")
            if _count(p, f"stage {name!r} end", positive=True) > total:
                raise BudgetError(f"stage {name!r} ends at {p}, past the budget's total {total}")
            bounds.add(Boundary(p, "stage", name))
        self.boundaries: tuple[Boundary, ...] = tuple(sorted(bounds))
        self.config_sha256 = sha256_hex(canonical_json({"total": total, "boundaries": [b.id for b in self.boundaries]}))
        self._consumed = 0
        self._next = 0  # index of the first boundary not yet emitted

    @property
    def consumed(self) -> int:
        return self._consumed

    @property
    def remaining(self) -> int:
        return self.total - self._consumed

    @property
    def exhausted(self) -> bool:
        return self._consumed == self.total

    @property
    def emitted(self) -> tuple[Boundary, ...]:
        return self.boundaries[: self._next]

    @property
    def pending(self) -> tuple[Boundary, ...]:
        return self.boundaries[self._next :]

    def consume(self, n: int) -> tuple[Boundary, ...]:
        """Count `n` more positions; return the boundaries reached now, in order (each once)."""
        _count(n, "consumed positions")
        if self._consumed + n > self.total:
            raise BudgetError(
                f"consuming {n} positions would reach {self._consumed + n}, past the budget's total {self.total} "
                f"({self.remaining} left); stop at the budget's end"
            )
        self._consumed += n
        start = self._next
        while self._next < len(self.boundaries) and self.boundaries[self._next].position <= self._consumed:
            self._next += 1
        return self.boundaries[start : self._next]

    def snapshot(self) -> dict[str, Any]:
        """State to persist with a checkpoint: consumed positions and emitted boundaries."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "config_sha256": self.config_sha256,
            "total": self.total,
            "consumed": self._consumed,
            "emitted": [b.id for b in self.emitted],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Resume from `snapshot()` output; `ResumeStateError` (nothing changes) when it is
        another budget's, behind this one, or its emitted boundaries are incomplete."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ResumeStateError("not a position budget state (use PositionBudget.snapshot())")
        if state.get("version") != STATE_VERSION:
            raise ResumeStateError(f"position budget state version {state.get('version')!r} is not supported")
        if state.get("config_sha256") != self.config_sha256:
            raise ResumeStateError(
                "this state belongs to a budget with another total or other boundaries; restore it into the same budget"
            )
        consumed, emitted = state.get("consumed"), state.get("emitted")
        if not isinstance(consumed, int) or isinstance(consumed, bool) or not 0 <= consumed <= self.total:
            raise ResumeStateError(f"consumed must be an int in 0..{self.total}, got {consumed!r}")
        if consumed < self._consumed:
            raise ResumeStateError(
                f"the state has {consumed} positions consumed, this budget already {self._consumed}: progress never "
                "goes backward; restore the latest snapshot"
            )
        if not isinstance(emitted, list) or not all(isinstance(e, str) for e in emitted):
            raise ResumeStateError("emitted must be a list of boundary ids")
        reached = [b.id for b in self.boundaries if b.position <= consumed]
        if emitted != reached:
            missing = sorted(set(reached) - set(emitted))
            extra = sorted(set(emitted) - set(reached))
            raise ResumeStateError(
                f"incomplete boundary state at {consumed} positions: not recorded as emitted {missing}, recorded but "
                f"not reached or unknown {extra}; restore a snapshot taken by PositionBudget.snapshot()"
            )
        self._consumed = consumed
        self._next = len(reached)

    def __repr__(self) -> str:
        return f"PositionBudget({self._consumed}/{self.total}, {len(self.pending)} boundaries pending)"
