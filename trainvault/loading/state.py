"""The resume state: a global position plus the digests that say which order it counts in.

Its size does not grow with the dataset, and it holds no worker, rank or shuffle-buffer
state, so a run resumes with any `num_workers`, world size or batch size (elastic).
Version 2 adds the step count, the run's re-dealing points (`Redeal`) and the manifest's
URI, so a state alone names the records of any step; version 1 states still load.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from trainvault.errors import ResumeStateError
from trainvault.loading.order import REMAINDER_DROP, REMAINDER_PAD, Redeal, steps_until

STATE_FORMAT = "trainvault.loader-state"
STATE_VERSION = 2
#: Versions `from_dict` reads; version 1 has no step, history or manifest URI.
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class OrderIdentity:
    """What fixes the record order; a state only resumes under the same identity."""

    manifest_sha256: str
    split: str
    curriculum_stages: tuple[str, ...] | None
    selection_sha256: str
    shuffle: bool
    seed: int
    shuffle_window_blocks: int
    #: The record view's digest when positions count logical records (None: stored records).
    view_sha256: str | None = None
    #: Digest of the records the loader skips (None: none).
    exclude_sha256: str | None = None


@dataclass(frozen=True)
class LoaderState:
    """Where a run is: epoch and records consumed of it (across all ranks)."""

    identity: OrderIdentity
    epoch: int
    position: int
    epoch_records: int
    remainder: str
    batch_size: int
    world_size: int
    #: Batches this rank received so far (the next step's number); None in a version 1 state.
    step: int | None = None
    #: Where the run (re)started dealing, oldest first; None in a version 1 state.
    history: tuple[Redeal, ...] | None = None
    manifest_uri: str | None = None

    def to_dict(self) -> dict[str, Any]:
        ident = asdict(self.identity)
        ident["curriculum_stages"] = list(self.identity.curriculum_stages) if self.identity.curriculum_stages else None
        for optional in ("view_sha256", "exclude_sha256"):
            if ident[optional] is None:
                del ident[optional]  # a state without a view or exclusions keeps the shape it had
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            **ident,
            "epoch": self.epoch,
            "position": self.position,
            "epoch_records": self.epoch_records,
            "remainder": self.remainder,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "manifest_uri": self.manifest_uri,
            "step": self.step,
            "history": None if self.history is None else [_redeal_dict(h) for h in self.history],
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> LoaderState:
        if not isinstance(state, Mapping):
            raise ResumeStateError(f"a loader state is a dict from state_dict(), got {type(state).__name__}")
        if state.get("format") != STATE_FORMAT:
            raise ResumeStateError(f"not a trainvault loader state (format {state.get('format')!r})")
        version = state.get("version")
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise ResumeStateError(
                f"loader state version {version!r} is not supported (this trainvault reads "
                f"{', '.join(map(str, READABLE_VERSIONS))}); resume with the trainvault version that wrote it"
            )
        try:
            stages = state["curriculum_stages"]
            if stages is not None and not (isinstance(stages, list) and all(isinstance(s, str) for s in stages)):
                raise ResumeStateError(
                    f"loader state field 'curriculum_stages' must be a list of stage names, got {stages!r}"
                )
            identity = OrderIdentity(
                manifest_sha256=_typed(state, "manifest_sha256", str),
                split=_typed(state, "split", str),
                curriculum_stages=tuple(stages) if stages else None,
                selection_sha256=_typed(state, "selection_sha256", str),
                shuffle=_typed(state, "shuffle", bool),
                seed=_typed(state, "seed", int),
                shuffle_window_blocks=_typed(state, "shuffle_window_blocks", int),
                view_sha256=_optional(state, "view_sha256", str),
                exclude_sha256=_optional(state, "exclude_sha256", str),
            )
            out = cls(
                identity=identity,
                epoch=_typed(state, "epoch", int),
                position=_typed(state, "position", int),
                epoch_records=_typed(state, "epoch_records", int),
                remainder=_typed(state, "remainder", str),
                batch_size=_typed(state, "batch_size", int),
                world_size=_typed(state, "world_size", int),
                **(_run_fields(state) if version >= 2 else {}),
            )
        except KeyError as exc:
            raise ResumeStateError(f"loader state lacks field {exc.args[0]!r}; it is damaged") from None
        if out.epoch < 0 or not 0 <= out.position <= out.epoch_records:
            raise ResumeStateError(
                f"loader state position {out.position} of epoch {out.epoch} is outside 0..{out.epoch_records}"
            )
        if min(out.batch_size, out.world_size) < 1 or out.remainder not in (REMAINDER_PAD, REMAINDER_DROP):
            raise ResumeStateError(
                f"loader state batch_size {out.batch_size}, world_size {out.world_size} and remainder "
                f"{out.remainder!r} must be >= 1, >= 1 and pad or drop; it is damaged"
            )
        _check_history(out)
        return out

    def run_history(self) -> tuple[int, tuple[Redeal, ...]]:
        """The next step's number and the re-dealing points of the run that saved this state.
        A version 1 state holds no history: it is taken as an uninterrupted run at its batch
        and world size, whose last point is where it stands (an earlier resume may have moved it)."""
        if self.history is not None and self.step is not None:
            return self.step, self.history
        drop = self.remainder == REMAINDER_DROP
        start = Redeal(0, 0, 0, self.batch_size, self.world_size, drop)
        step = steps_until(start, self.epoch, self.position, self.epoch_records)
        here = Redeal(step, self.epoch, self.position, self.batch_size, self.world_size, drop)
        return step, (here,) if step == 0 else (start, here)

    def check_identity(self, expected: OrderIdentity) -> None:
        """Refuse a state written for another manifest, selection or order."""
        got = self.identity
        if got.manifest_sha256 != expected.manifest_sha256:
            raise ResumeStateError(
                f"this state belongs to manifest sha256 {got.manifest_sha256[:16]}..., not the loaded manifest "
                f"{expected.manifest_sha256[:16]}...; resume against the manifest the run started with"
            )
        if (got.split, got.curriculum_stages, got.selection_sha256) != (
            expected.split,
            expected.curriculum_stages,
            expected.selection_sha256,
        ):
            raise ResumeStateError(
                f"this state belongs to selection split {got.split!r} stages {got.curriculum_stages}, not split "
                f"{expected.split!r} stages {expected.curriculum_stages}; load the same selection to resume"
            )
        if got.view_sha256 != expected.view_sha256:
            raise ResumeStateError(
                f"this state counts the logical records of record view {got.view_sha256}, the loader reads "
                f"{expected.view_sha256} (None: stored records); positions would mean other records, so resume with "
                "the same materializer (same ledger and mode)"
            )
        if got.exclude_sha256 != expected.exclude_sha256:
            raise ResumeStateError(
                f"this state skips the excluded records of digest {got.exclude_sha256}, the loader skips "
                f"{expected.exclude_sha256} (None: none); positions would mean other records, so resume with the "
                "same exclusions"
            )
        for name in ("shuffle", "seed", "shuffle_window_blocks"):
            a, b = getattr(got, name), getattr(expected, name)
            if a != b:
                raise ResumeStateError(
                    f"this state was written with {name}={a!r}, the loader has {name}={b!r}; the record order "
                    f"would differ, so resume with {name}={a!r}"
                )

    def describe(self) -> str:
        ident = self.identity
        stages = ", ".join(ident.curriculum_stages) if ident.curriculum_stages else "all shards"
        pct = 100.0 * self.position / self.epoch_records if self.epoch_records else 100.0
        order = (
            f"shuffled (seed {ident.seed}, window {ident.shuffle_window_blocks} blocks)"
            if ident.shuffle
            else "manifest order"
        )
        step = "" if self.step is None else f"step {self.step:,}, "
        return (
            f"epoch {self.epoch}, position {self.position:,}/{self.epoch_records:,} records ({pct:.1f}%), {step}"
            f"split {ident.split!r} ({stages}), {order}, batch {self.batch_size} x {self.world_size} rank(s), "
            f"remainder {self.remainder}, manifest sha256 {ident.manifest_sha256}, "
            f"selection sha256 {ident.selection_sha256}"
        )


def _redeal_dict(h: Redeal) -> dict[str, Any]:
    remainder = REMAINDER_DROP if h.drop_last else REMAINDER_PAD
    return {
        "step": h.step,
        "epoch": h.epoch,
        "position": h.position,
        "batch_size": h.batch_size,
        "world_size": h.world_size,
        "remainder": remainder,
    }


def _run_fields(state: Mapping[str, Any]) -> dict[str, Any]:
    """Step, history and manifest URI of a version 2 state, checked."""
    history = state["history"]
    if not isinstance(history, list) or not history:
        raise ResumeStateError(f"loader state field 'history' must be a non-empty list, got {history!r}")
    points = []
    for h in history:
        if not isinstance(h, Mapping):
            raise ResumeStateError(f"loader state history entries are dicts, got {h!r}")
        remainder = _typed(h, "remainder", str)
        if remainder not in (REMAINDER_PAD, REMAINDER_DROP):
            raise ResumeStateError(f"loader state history remainder must be pad or drop, got {remainder!r}")
        step, epoch, position, batch_size, world_size = (
            _typed(h, name, int) for name in ("step", "epoch", "position", "batch_size", "world_size")
        )
        point = Redeal(step, epoch, position, batch_size, world_size, drop_last=remainder == REMAINDER_DROP)
        if min(point.step, point.epoch, point.position) < 0 or min(point.batch_size, point.world_size) < 1:
            raise ResumeStateError(f"loader state history entry {h!r} is out of range")
        points.append(point)
    step = _typed(state, "step", int)
    if [p.step for p in points] != sorted(p.step for p in points) or step < points[-1].step:
        raise ResumeStateError(
            f"loader state history steps {[p.step for p in points]} and step {step} are out of order"
        )
    return {"step": step, "history": tuple(points), "manifest_uri": _typed(state, "manifest_uri", str)}


def _check_history(state: LoaderState) -> None:
    """Re-dealing points lie within an epoch, never go back, and none is past where the run stands."""
    if state.history is None:
        return
    points = [(h.epoch, h.position) for h in state.history]
    if (
        any(position > state.epoch_records for _, position in points)
        or points != sorted(points)
        or (points[-1] > (state.epoch, state.position))
    ):
        raise ResumeStateError(
            f"loader state history points (epoch, position) {points} must be in order, within 0..{state.epoch_records} "
            f"records and not past epoch {state.epoch} position {state.position}; it is damaged"
        )


def _optional(state: Mapping[str, Any], name: str, kind: type) -> Any:
    return _typed(state, name, kind) if state.get(name) is not None else None


def _typed(state: Mapping[str, Any], name: str, kind: type) -> Any:
    value = state[name]
    # bool is an int subclass; a flag and a count must not stand in for each other.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ResumeStateError(f"loader state field {name!r} must be {kind.__name__}, got {value!r}")
    return value
