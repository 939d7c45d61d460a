"""The resume state: a global position plus the digests that say which order it counts in.

Its size does not grow with the dataset, and it holds no worker, rank or shuffle-buffer
state, so a run resumes with any `num_workers`, world size or batch size (elastic).
Version 2 adds the step count, the run's re-dealing points (`Redeal`) and the manifest's
URI, so a state alone names the records of any step; version 1 states still load. Under an
approval's amendments (set by the approved loader) a state also names the amendment it runs
under, and each re-dealing point the view it dealt from (an older trainvault refuses such a
state rather than misread it).
The state is a strict pydantic model like every other document; its dict form is flat
(the order identity's fields beside the position), as ``state_dict()`` has always given it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from pydantic import ValidationError, field_validator, model_validator

from trainvault.canonical import is_sha256_hex
from trainvault.documents import StrictModel, describe_validation_error
from trainvault.errors import ResumeStateError
from trainvault.loading.order import REMAINDER_DROP, REMAINDER_PAD, Redeal, steps_until

STATE_FORMAT: Final = "trainvault.loader-state"
STATE_VERSION = 2
#: Versions `from_dict` reads; version 1 has no step, history or manifest URI.
READABLE_VERSIONS = (1, 2)
_RUN_FIELDS = ("step", "history", "manifest_uri")
_KINDS = {"int_type": "int", "string_type": "str", "bool_type": "bool", "list_type": "list"}


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


class RedealPoint(StrictModel):
    """A `Redeal` as a state holds it (``remainder`` names the policy instead of a flag)."""

    step: int
    epoch: int
    position: int
    batch_size: int
    world_size: int
    remainder: str
    amendment: int | None = None
    bridged_from: int | None = None

    @model_validator(mode="after")
    def _in_range(self) -> RedealPoint:
        if self.remainder not in (REMAINDER_PAD, REMAINDER_DROP):
            raise ValueError(f"loader state history remainder must be pad or drop, got {self.remainder!r}")
        levels = [v for v in (self.amendment, self.bridged_from) if v is not None]
        if min(self.step, self.epoch, self.position, *levels) < 0 or min(self.batch_size, self.world_size) < 1:
            raise ValueError(f"loader state history entry {self.model_dump()!r} is out of range")
        return self

    @classmethod
    def of(cls, h: Redeal) -> RedealPoint:
        remainder = REMAINDER_DROP if h.drop_last else REMAINDER_PAD
        return cls(
            step=h.step,
            epoch=h.epoch,
            position=h.position,
            batch_size=h.batch_size,
            world_size=h.world_size,
            remainder=remainder,
            amendment=h.amendment,
            bridged_from=h.bridged_from,
        )

    def redeal(self) -> Redeal:
        drop = self.remainder == REMAINDER_DROP
        return Redeal(
            self.step,
            self.epoch,
            self.position,
            self.batch_size,
            self.world_size,
            drop,
            self.amendment,
            self.bridged_from,
        )


class AmendmentMark(StrictModel):
    """The amendment of an approval whose view a loader deals: its sequence and envelope sha256."""

    sequence: int
    sha256: str

    @model_validator(mode="after")
    def _named(self) -> AmendmentMark:
        if self.sequence < 1 or not is_sha256_hex(self.sha256):
            raise ValueError(f"loader state amendment {self.model_dump()!r} must have sequence >= 1 and a sha256")
        return self


class LoaderState(StrictModel):
    """Where a run is: epoch and records consumed of it (across all ranks), in the order of
    the identity its flat fields spell out. Parse with `from_dict`, build with `at`."""

    format: Literal["trainvault.loader-state"] = STATE_FORMAT
    version: int = STATE_VERSION
    manifest_sha256: str
    split: str
    curriculum_stages: list[str] | None
    selection_sha256: str
    shuffle: bool
    seed: int
    shuffle_window_blocks: int
    view_sha256: str | None = None
    exclude_sha256: str | None = None
    epoch: int
    position: int
    epoch_records: int
    remainder: str
    batch_size: int
    world_size: int
    manifest_uri: str | None = None
    #: Batches this rank received so far (the next step's number); None in a version 1 state.
    step: int | None = None
    #: Where the run (re)started dealing, oldest first; None in a version 1 state.
    history: list[RedealPoint] | None = None
    #: The amendment whose view of an approval the run deals now (None: no amendment).
    amendment: AmendmentMark | None = None

    @classmethod
    def at(
        cls,
        identity: OrderIdentity,
        *,
        epoch: int,
        position: int,
        epoch_records: int,
        remainder: str,
        batch_size: int,
        world_size: int,
        step: int,
        history: tuple[Redeal, ...],
        manifest_uri: str | None,
        amendment: AmendmentMark | None = None,
    ) -> LoaderState:
        """The state of a run under `identity` (the loader's own; not validated again)."""
        return cls.model_construct(
            **{**asdict(identity), "curriculum_stages": list(identity.curriculum_stages or []) or None},
            epoch=epoch,
            position=position,
            epoch_records=epoch_records,
            remainder=remainder,
            batch_size=batch_size,
            world_size=world_size,
            step=step,
            history=[RedealPoint.of(h) for h in history],
            manifest_uri=manifest_uri,
            amendment=amendment,
        )

    @property
    def identity(self) -> OrderIdentity:
        return OrderIdentity(
            manifest_sha256=self.manifest_sha256,
            split=self.split,
            curriculum_stages=tuple(self.curriculum_stages) if self.curriculum_stages else None,
            selection_sha256=self.selection_sha256,
            shuffle=self.shuffle,
            seed=self.seed,
            shuffle_window_blocks=self.shuffle_window_blocks,
            view_sha256=self.view_sha256,
            exclude_sha256=self.exclude_sha256,
        )

    @property
    def redeals(self) -> tuple[Redeal, ...] | None:
        return None if self.history is None else tuple(h.redeal() for h in self.history)

    def to_dict(self) -> dict[str, Any]:
        """The dict ``state_dict()`` returns (plain JSON types; always the current version)."""
        out = self.model_dump(mode="json")
        out["version"] = STATE_VERSION
        for optional in ("view_sha256", "exclude_sha256", "amendment"):
            if out[optional] is None:
                del out[optional]  # a state without a view, exclusions or amendment keeps the shape it had
        for point in out["history"] or ():
            for optional in ("amendment", "bridged_from"):
                if point[optional] is None:
                    del point[optional]
        return out

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> LoaderState:
        """Parse a ``state_dict()``; a foreign, newer or damaged one is a `ResumeStateError`."""
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
        fields = dict(state)
        for name in _RUN_FIELDS:
            if version == 1:
                fields.pop(name, None)  # version 1 has none; its run is rebuilt by run_history
            elif name not in fields:
                raise ResumeStateError(f"loader state lacks field {name!r}; it is damaged")
        try:
            return cls.model_validate(fields)
        except ValidationError as exc:
            raise _resume_error(exc) from None

    @field_validator("curriculum_stages", mode="before")
    @classmethod
    def _stage_names(cls, value: Any) -> Any:
        if value is not None and not (isinstance(value, list) and all(isinstance(s, str) for s in value)):
            raise ValueError(f"loader state field 'curriculum_stages' must be a list of stage names, got {value!r}")
        return value

    @field_validator("history", mode="before")
    @classmethod
    def _history_entries(cls, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, list) or not value:
            raise ValueError(f"loader state field 'history' must be a non-empty list, got {value!r}")
        for h in value:
            if not isinstance(h, Mapping):
                raise ValueError(f"loader state history entries are dicts, got {h!r}")
        return [dict(h) for h in value]

    @model_validator(mode="after")
    def _consistent(self) -> LoaderState:
        if self.version >= 2:
            _check_run_fields(self)
        if self.epoch < 0 or not 0 <= self.position <= self.epoch_records:
            raise ValueError(
                f"loader state position {self.position} of epoch {self.epoch} is outside 0..{self.epoch_records}"
            )
        if min(self.batch_size, self.world_size) < 1 or self.remainder not in (REMAINDER_PAD, REMAINDER_DROP):
            raise ValueError(
                f"loader state batch_size {self.batch_size}, world_size {self.world_size} and remainder "
                f"{self.remainder!r} must be >= 1, >= 1 and pad or drop; it is damaged"
            )
        _check_history(self)
        return self

    def run_history(self) -> tuple[int, tuple[Redeal, ...]]:
        """The next step's number and the re-dealing points of the run that saved this state.
        A version 1 state holds no history: it is taken as an uninterrupted run at its batch
        and world size, whose last point is where it stands (an earlier resume may have moved it)."""
        redeals = self.redeals
        if redeals is not None and self.step is not None:
            return self.step, redeals
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


def _check_run_fields(state: LoaderState) -> None:
    """Step, history and manifest URI of a version 2 state: present, and steps in order."""
    for name, kind in (("manifest_uri", "str"), ("step", "int"), ("history", "list")):
        if getattr(state, name) is None:
            raise ValueError(f"loader state field {name!r} must be {kind}, got None")
    if state.history is None or state.step is None:
        return  # refused just above; this tells the type checker
    steps = [p.step for p in state.history]
    if steps != sorted(steps) or state.step < steps[-1]:
        raise ValueError(f"loader state history steps {steps} and step {state.step} are out of order")


def _check_history(state: LoaderState) -> None:
    """Re-dealing points lie within an epoch, never go back, and none is past where the run stands.
    Positions count the records of one view: points dealt under an earlier amendment's view are
    compared by epoch only."""
    if state.history is None:
        return
    level = None if state.amendment is None else state.amendment.sequence
    epochs = [h.epoch for h in state.history]
    if epochs != sorted(epochs) or epochs[-1] > state.epoch:
        raise ValueError(
            f"loader state history epochs {epochs} must be in order and not past epoch {state.epoch}; it is damaged"
        )
    points = [(h.epoch, h.position) for h in state.history if h.amendment in (None, level)]
    if not points:
        return
    if (
        any(position > state.epoch_records for _, position in points)
        or points != sorted(points)
        or (points[-1] > (state.epoch, state.position))
    ):
        raise ValueError(
            f"loader state history points (epoch, position) {points} must be in order, within 0..{state.epoch_records} "
            f"records and not past epoch {state.epoch} position {state.position}; it is damaged"
        )


def _resume_error(exc: ValidationError) -> ResumeStateError:
    """The first problem of a state pydantic refused, worded for a trainer."""
    err = exc.errors()[0]
    loc = err["loc"]
    # A field of the amendment mark is named with it; history entries keep their short names.
    name = ".".join(map(str, loc)) if loc and loc[0] == "amendment" else str(loc[-1]) if loc else "(state)"
    if err["type"] == "missing":
        return ResumeStateError(f"loader state lacks field {name!r}; it is damaged")
    if err["type"] == "extra_forbidden":
        return ResumeStateError(
            f"loader state has a field {name!r} no trainvault loader state holds; it is damaged or not a loader state"
        )
    if err["type"] == "value_error":
        return ResumeStateError(str(err["ctx"]["error"]))
    if err["type"] in _KINDS:
        # Strict: bool is no int here, and a flag and a count must not stand in for each other.
        return ResumeStateError(f"loader state field {name!r} must be {_KINDS[err['type']]}, got {err['input']!r}")
    return ResumeStateError(f"loader state is damaged: {describe_validation_error(exc)}")
