"""The resume state of a mixture run: where it stands plus the whole mixture history.

Small: O(revisions + re-dealing points + components), never O(steps). It binds the
manifest, split and order settings, and each component's records (selection, exclusions,
count), so a resume under anything else is refused instead of dealing other records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from trainvault.documents import Document, StrictModel
from trainvault.errors import ConfigurationError, ManifestError, ResumeStateError
from trainvault.loading.order import REMAINDER_DROP, REMAINDER_PAD, Redeal
from trainvault.mixtures.spec import Mixture


class ComponentIdentity(StrictModel):
    """What a component's draws count over: its shards, its skipped records, its size."""

    selection_sha256: str
    exclude_sha256: str | None
    records: int = Field(ge=0)


class RevisionEntry(StrictModel):
    """A mixture in force from `at_step` (record slot `at_slot`) on; entry 0 is the start."""

    at_step: int = Field(ge=0)
    at_slot: int = Field(ge=0)
    mixture: dict[str, Any]


class RedealEntry(StrictModel):
    """From `step` on, batches of batch_size x world_size were dealt from record slot `slot`."""

    step: int = Field(ge=0)
    slot: int = Field(ge=0)
    batch_size: int = Field(ge=1)
    world_size: int = Field(ge=1)
    remainder: Literal["pad", "drop"]

    def redeal(self) -> Redeal:
        return Redeal(self.step, 0, self.slot, self.batch_size, self.world_size, self.remainder == REMAINDER_DROP)

    @classmethod
    def of(cls, point: Redeal) -> RedealEntry:
        remainder: Literal["pad", "drop"] = REMAINDER_DROP if point.drop_last else REMAINDER_PAD
        return cls(
            step=point.step,
            slot=point.position,
            batch_size=point.batch_size,
            world_size=point.world_size,
            remainder=remainder,
        )


class MixtureState(Document):
    """`MixtureDataLoader.state_dict()`: identity, mixture history, step and slot, re-dealing points."""

    KIND: ClassVar[str] = "trainvault.mixture-state"
    format: Literal["trainvault.mixture-state"] = "trainvault.mixture-state"
    version: Literal[1] = 1
    manifest_sha256: str
    manifest_uri: str
    split: str
    shuffle: bool
    seed: int
    shuffle_window_blocks: int = Field(ge=1)
    components: dict[str, ComponentIdentity]
    revisions: list[RevisionEntry] = Field(min_length=1)
    step: int = Field(ge=0)
    position: int = Field(ge=0)
    history: list[RedealEntry] = Field(min_length=1)

    @classmethod
    def parse(cls, state: Any) -> MixtureState:
        """A state dict, checked; `ResumeStateError` says what is wrong with it."""
        if isinstance(state, Mapping) and state.get("format") == "trainvault.loader-state":
            raise ResumeStateError(
                "this is the state of a split loader (load()), not of a mixture loader (load_mixture()); "
                "resume it with the loader kind that wrote it"
            )
        try:
            parsed = cls.from_obj(dict(state) if isinstance(state, Mapping) else state, source="mixture state")
            mixtures = [Mixture.from_dict(r.mixture) for r in parsed.revisions]
        except (ManifestError, ConfigurationError) as exc:
            raise ResumeStateError(f"{exc}; resume from a state_dict() of a mixture loader") from None
        parsed._check_order(mixtures)
        return parsed

    def mixtures(self) -> list[Mixture]:
        return [Mixture.from_dict(r.mixture) for r in self.revisions]

    def _check_order(self, mixtures: list[Mixture]) -> None:
        revs, hist = self.revisions, self.history
        if (revs[0].at_step, revs[0].at_slot) != (0, 0) or hist[0].step != 0 or hist[0].slot != 0:
            raise ResumeStateError(
                "mixture state: its first revision and re-dealing point must be at step 0, slot 0; it is damaged"
            )
        # A revision keeps the record slot it was set for; its step is the one asked for
        # under the batch geometry of that time, so only the slots must grow.
        slots = [r.at_slot for r in revs]
        if slots != sorted(set(slots)):
            raise ResumeStateError(f"mixture state: revision record slots {slots} are out of order; it is damaged")
        points = [(h.step, h.slot) for h in hist]
        if points != sorted(points) or hist[-1].step > self.step or hist[-1].slot > self.position:
            raise ResumeStateError(
                f"mixture state: re-dealing points {points} are out of order or past step {self.step}; it is damaged"
            )
        names = {c.name for m in mixtures for c in m.components}
        if names != set(self.components) or any(m.split != self.split for m in mixtures):
            raise ResumeStateError(
                f"mixture state: its components {sorted(self.components)} are not those its revisions name "
                f"({sorted(names)}), or a revision is over another split; it is damaged"
            )
