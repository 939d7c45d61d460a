"""The DataLoader of a mixture run: one stream of batches whose mixture may change mid-run.

Each ``iter()`` continues where the last batch ended (a mixture run has no epochs of its
own; its components do). `set_mixture(new, at_step=...)` appends a revision: from that
step's first record slot on, the new weights (and components) apply; an iteration in
progress restarts its workers after the current batch, so no prefetched batch of the old
mixture is yielded past the revision. The state holds the whole mixture history, so a
resume under any workers, world size or batch size continues exactly. Imports torch.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch.utils.data
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from trainvault.errors import ConfigurationError, ResumeStateError, SelectionError
from trainvault.loading.factory import SplitLoaderFactory
from trainvault.loading.loader import passthrough
from trainvault.loading.order import RankBatch, Redeal
from trainvault.loading.trace import TracedRecord
from trainvault.mixtures.dataset import MixtureItem, MixtureIterableDataset
from trainvault.mixtures.schedule import Timeline
from trainvault.mixtures.source import ComponentSource, component_source
from trainvault.mixtures.spec import Mixture, MixtureComponent
from trainvault.mixtures.state import ComponentIdentity, MixtureState, RedealEntry, RevisionEntry
from trainvault.mixtures.trace import trace_mixture_batch


@dataclass(frozen=True)
class ComponentReport:
    """One component so far: records drawn, their share of all records dealt, the target
    share now in force, passes begun, records repeated (draws past one pass), dropped."""

    name: str
    draws: int
    share: float
    target: float
    records: int
    passes: int
    repeated: int
    dropped: bool


@dataclass(frozen=True)
class Revision:
    at_step: int
    at_slot: int
    mixture: Mixture


class MixtureDataLoader(torch.utils.data.DataLoader[MixtureItem]):
    """A `torch.utils.data.DataLoader` over a mixture, with `set_mixture()`, `state_dict()`,
    `load_state_dict()`, `trace()` and `mixture_report()`."""

    def __init__(self, factory: SplitLoaderFactory, mixture: Mixture, **dataloader_args: Any):
        self._factory = factory
        dataset = MixtureIterableDataset(factory.plan)
        try:
            super().__init__(dataset, batch_size=None, collate_fn=passthrough, **dataloader_args)
        except ValueError as exc:
            raise ConfigurationError(f"dataloader_args: {exc}") from None
        self._mixture_dataset = dataset
        self._names: list[str] = []
        self._specs: dict[str, MixtureComponent] = {}
        self._sources: list[ComponentSource] = []
        self._identities: dict[str, ComponentIdentity] = {}
        self._split = mixture.split
        self._add_components(mixture)
        self._revisions = [Revision(0, 0, mixture)]
        self._retime()
        self._step = 0
        self._position = 0
        self._history = [self._point(0, 0)]
        self._live = False
        self._resume_checks: list[Callable[[Mapping[str, Any]], object]] = []
        self._restart = False

    # -- components and revisions ----------------------------------------------------------

    def _point(self, step: int, slot: int) -> Redeal:
        ds = self._mixture_dataset
        return Redeal(step, 0, slot, ds.batch_size, ds.world_size, ds.drop_last)

    def _add_components(self, mixture: Mixture) -> None:
        if not isinstance(mixture, Mixture):
            raise ConfigurationError(f"a mixture loader takes a Mixture, got {type(mixture).__name__}")
        if mixture.split != self._split:
            raise SelectionError(
                f"this run mixes components of split {self._split!r}; a revision over split {mixture.split!r} "
                "belongs to another run"
            )
        for comp in mixture.components:
            known = self._specs.get(comp.name)
            if known is not None:
                if known.source() != comp.source():
                    raise ConfigurationError(
                        f"mixture component {comp.name!r} was {known.source()}, a revision makes it {comp.source()}; "
                        "a component keeps its stage, replacement and run_out for the whole run: give it a new name"
                    )
                continue
            source, identity = component_source(self._factory, mixture.split, comp)
            self._names.append(comp.name)
            self._specs[comp.name] = comp
            self._sources.append(source)
            self._identities[comp.name] = identity

    def _retime(self) -> None:
        """Rebuild the schedule from the revisions; the dataset deals by it from now on."""
        index = {name: i for i, name in enumerate(self._names)}
        revisions = [
            (r.at_slot, {index[c.name]: c.exact_weight for c in r.mixture.components}) for r in self._revisions
        ]
        self._timeline = Timeline(
            [s.size for s in self._sources], [self._specs[n].run_out == "drop" for n in self._names], revisions
        )
        ds = self._mixture_dataset
        ds.set_run(self._sources, self._timeline, ds.point)

    def _batch(self, step: int, rank: int, history: Sequence[Redeal] | None = None) -> RankBatch:
        """`rank`'s batch at `step`: dealt from the re-dealing point in force then, up to the
        next point's slot (where an earlier stream ended, its last round was partial)."""
        history = self._history if history is None else history
        i = bisect.bisect_right([h.step for h in history], step) - 1
        point = history[i]
        until = history[i + 1].position if i + 1 < len(history) else None
        try:
            return self._mixture_dataset.schedule(point, rank, until).batch(step - point.step)
        except IndexError:
            raise SelectionError(f"step {step} never happens: the mixture stream ends before it") from None

    def slot_of_step(self, step: int, history: Sequence[Redeal] | None = None) -> int:
        """The first record slot of `step` (all ranks together)."""
        history = self._history if history is None else history
        if step == 0:
            return 0
        return self._batch(step - 1, 0, history).after

    def _revision_slot(self, step: int, history: Sequence[Redeal]) -> int:
        """The slot a revision at `step` starts at: whole rounds from the last re-dealing point
        (a revision that extends a finite stream turns its last partial round into a whole one)."""
        point = history[bisect.bisect_right([h.step for h in history], step) - 1]
        slot = point.position + (step - point.step) * point.batch_size * point.world_size
        end = self._timeline.end
        if end is not None and slot > end:
            raise SelectionError(
                f"a revision at step {step} (record slot {slot:,}) comes after the mixture stream's end at record "
                f"slot {end:,}; revise at a step before the stream ends"
            )
        return slot

    def set_mixture(self, mixture: Mixture, *, at_step: int) -> None:
        """From step `at_step` on, draw by `mixture` (new weights, added or removed components).

        Refuses (`SelectionError`) a step already yielded, one at or before the last
        revision, a stage the split (or approval) does not have, another split."""
        if not isinstance(at_step, int) or isinstance(at_step, bool):
            raise ConfigurationError(f"at_step must be an int, got {at_step!r}")
        if at_step < self._step:
            raise SelectionError(
                f"a revision at step {at_step} is in the past: this run has yielded {self._step} steps; revise from "
                f"step {self._step} on"
            )
        slot = self._revision_slot(at_step, self._history)
        last = self._revisions[-1]
        if slot <= last.at_slot:
            raise SelectionError(
                f"a revision at step {at_step} (record slot {slot:,}) is not after the last revision (set for step "
                f"{last.at_step}, record slot {last.at_slot:,}); revisions go forward"
            )
        self._add_components(mixture)
        self._revisions.append(Revision(at_step, slot, mixture))
        self._retime()
        self._restart = self._live  # prefetched batches past the revision are stale

    # -- iteration -------------------------------------------------------------------------

    # torch types DataLoader.__iter__ as its private _BaseDataLoaderIter; this one yields the same batches.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return self._stream()

    def _start(self) -> Iterator[Any]:
        ds = self._mixture_dataset
        ds.set_run(self._sources, self._timeline, self._point(self._step, self._position))
        if self._iterator is not None:  # persistent workers hold an older copy of the dataset
            if isinstance(self._iterator, _MultiProcessingDataLoaderIter):
                self._iterator._shutdown_workers()
            self._iterator = None
        if self.num_workers == 0 and not self.pin_memory:
            return iter(ds)
        return super().__iter__()

    def _stream(self) -> Iterator[Any]:
        while True:
            self._restart = False
            items = self._start()
            self._live = True
            try:
                waiting: dict[int, Any] = {}
                expected = 0
                for item in items:
                    waiting[item[0]] = item
                    while expected in waiting:
                        _, _, after, batch = waiting.pop(expected)
                        expected += 1
                        self._step += 1
                        self._position = after
                        yield batch
                        if self._restart:
                            break
                    if self._restart:
                        break
                else:
                    if waiting:
                        raise RuntimeError(
                            f"trainvault mixture loader: batch {expected} never arrived; a worker stopped early"
                        )
                    return
            finally:
                self._live = False
                shutdown = getattr(items, "_shutdown_workers", None)
                if shutdown is not None:
                    shutdown()
                    if self._iterator is items:
                        self._iterator = None

    # -- state -----------------------------------------------------------------------------

    def _state(self) -> MixtureState:
        f, p = self._factory, self._factory.plan
        return MixtureState(
            manifest_sha256=f.manifest_sha256,
            manifest_uri=f.manifest_uri,
            split=self._split,
            shuffle=p.shuffle,
            seed=p.seed,
            shuffle_window_blocks=p.shuffle_window_blocks,
            components=dict(self._identities),
            revisions=[
                RevisionEntry(at_step=r.at_step, at_slot=r.at_slot, mixture=r.mixture.to_dict())
                for r in self._revisions
            ],
            step=self._step,
            position=self._position,
            history=[RedealEntry.of(h) for h in self._history],
        )

    def state_dict(self) -> dict[str, Any]:
        """The run's position, its mixture history and re-dealing points (take it between steps)."""
        return self._state().model_dump(mode="json")

    def check_before_resume(self, check: Callable[[Mapping[str, Any]], object]) -> None:
        """Run `check(state)` at every `load_state_dict`, before the state is parsed (the approved factory's
        revocation check)."""
        self._resume_checks.append(check)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the run `state` saved: its revisions are adopted, the next batches are
        those the uninterrupted run would have dealt (with another world size or batch size,
        the same records re-dealt). Refuses (`ResumeStateError`) a state of another manifest,
        split, order setting, mixture history or component data, and a loader that has
        already iterated."""
        for check in self._resume_checks:
            check(state)
        if self._step or self._live:
            raise ResumeStateError(
                f"this mixture loader has already yielded {self._step} step(s); load the state into a fresh loader "
                "before its first iter()"
            )
        parsed = MixtureState.parse(state)
        self._check_identity(parsed)
        kept = (list(self._names), dict(self._specs), list(self._sources), dict(self._identities))
        try:
            self._adopt(parsed)
        except BaseException as exc:
            # Nothing of a refused state stays: the loader deals what it dealt before.
            self._names, self._specs, self._sources, self._identities = kept
            self._retime()
            if isinstance(exc, (ConfigurationError, SelectionError)):
                # A component the state's history names cannot be one of this loader's (a stage it
                # does not hold, another stage or replacement under an old name): the state is refused.
                raise ResumeStateError(
                    f"this mixture state does not resume here: {exc}; resume from a state_dict() of this run"
                ) from exc
            raise

    def _adopt(self, parsed: MixtureState) -> None:
        mixtures = parsed.mixtures()
        for m in mixtures:
            self._add_components(m)
        for name, identity in parsed.components.items():
            mine = self._identities[name]
            if mine != identity:
                raise ResumeStateError(
                    f"mixture component {name!r} of this state counts {identity.records} records (selection "
                    f"{identity.selection_sha256[:12]}..., exclusions {identity.exclude_sha256}); here it holds "
                    f"{mine.records} (selection {mine.selection_sha256[:12]}..., exclusions {mine.exclude_sha256}): "
                    "resume over the same data and exclusions"
                )
        history = [h.redeal() for h in parsed.history]
        revisions, self._revisions = (
            self._revisions,
            [Revision(r.at_step, r.at_slot, m) for r, m in zip(parsed.revisions, mixtures, strict=False)],
        )
        try:
            self._retime()
            self._check_position(parsed, history)
        except BaseException:
            self._revisions = revisions
            raise
        self._step, self._position = parsed.step, parsed.position
        here = self._point(parsed.step, parsed.position)
        last = history[-1]
        if (last.batch_size, last.world_size, last.drop_last) != (here.batch_size, here.world_size, here.drop_last):
            history = [*history[:-1], here] if last.step == here.step else [*history, here]
        self._history = history

    def _check_identity(self, state: MixtureState) -> None:
        f, p = self._factory, self._factory.plan
        if state.manifest_sha256 != f.manifest_sha256:
            raise ResumeStateError(
                f"this mixture state belongs to manifest sha256 {state.manifest_sha256[:16]}..., not the loaded "
                f"{f.manifest_sha256[:16]}...; resume against the manifest the run started with"
            )
        for name, mine in (
            ("split", self._split),
            ("shuffle", p.shuffle),
            ("seed", p.seed),
            ("shuffle_window_blocks", p.shuffle_window_blocks),
        ):
            if getattr(state, name) != mine:
                raise ResumeStateError(
                    f"this mixture state was written with {name}={getattr(state, name)!r}, the loader has "
                    f"{name}={mine!r}; the records would differ, so resume with {name}={getattr(state, name)!r}"
                )
        theirs = [(r.at_step, r.mixture) for r in state.revisions]
        mine_revs = [(r.at_step, r.mixture.to_dict()) for r in self._revisions]
        if theirs[: len(mine_revs)] != mine_revs:
            which = next(
                i for i, (a, b) in enumerate(zip(theirs + [None] * len(mine_revs), mine_revs, strict=False)) if a != b
            )
            raise ResumeStateError(
                f"this mixture state has another mixture history: its revision {which} differs from this loader's "
                f"(the loader's revisions must be the state's first ones; build the loader with the run's first "
                "mixture and set no revision before load_state_dict)"
            )

    def _check_position(self, state: MixtureState, history: list[Redeal]) -> None:
        last = history[-1]
        try:
            expected = self.slot_of_step(state.step, history)
        except SelectionError:
            expected = None
        if expected != state.position:
            raise ResumeStateError(
                f"mixture state: step {state.step} at record slot {state.position} does not follow from its "
                f"re-dealing points (last: step {last.step} slot {last.position}, batch {last.batch_size} x "
                f"{last.world_size}); it is damaged"
            )

    # -- provenance ------------------------------------------------------------------------

    def trace(self, step: int, rank: int | None = None, *, read: bool = True) -> list[TracedRecord]:
        """The records of `step`'s batch for this rank (or `rank`), in batch order, each with
        its component and the revision in force (0: the first mixture)."""
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ConfigurationError(f"step must be an int >= 0, got {step!r}")
        point = self._history[bisect.bisect_right([h.step for h in self._history], step) - 1]
        rank = self._mixture_dataset.rank if rank is None else rank
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < point.world_size:
            raise ConfigurationError(f"step {step} ran on {point.world_size} rank(s); rank {rank!r} is not one of them")
        batch = self._batch(step, rank)
        return trace_mixture_batch(self._split, self._timeline, self._sources, self._names, batch, read=read)

    def mixture_report(self) -> list[ComponentReport]:
        """Per component, so far: draws, achieved share of all records dealt, target share in
        force now, passes begun, repeated records and whether it was dropped."""
        seg = self._timeline.segment(self._position)
        counts = seg.counts_at(self._position)
        weights = {c.name: c.exact_weight for c in self._revisions[seg.revision].mixture.components}
        live = {n: w for n, w in weights.items() if not self._dropped(n, counts)}
        total = sum(live.values(), Fraction(0))
        out = []
        for i, name in enumerate(self._names):
            n, size = counts[i], self._sources[i].size
            out.append(
                ComponentReport(
                    name=name,
                    draws=n,
                    share=n / self._position if self._position else 0.0,
                    target=float(live[name] / total) if name in live else 0.0,
                    records=size,
                    passes=-(-n // size) if size else 0,
                    repeated=max(0, n - size),
                    dropped=self._dropped(name, counts),
                )
            )
        return out

    def _dropped(self, name: str, counts: Sequence[int]) -> bool:
        i = self._names.index(name)
        return self._specs[name].run_out == "drop" and counts[i] >= self._sources[i].size

    def describe_state(self) -> str:
        shares = ", ".join(f"{r.name} {r.share:.3f} (target {r.target:.3f})" for r in self.mixture_report())
        return (
            f"mixture over split {self._split!r}: step {self._step:,}, record slot {self._position:,}, "
            f"{len(self._revisions)} revision(s); shares so far: {shares}"
        )


def load_mixture(factory: SplitLoaderFactory, mixture: Mixture) -> MixtureDataLoader:
    """A `MixtureDataLoader` drawing batches from `mixture`'s components (stages of its split)
    through `factory`, under the factory's plan. For an approved dataset, use its loader
    factory's ``load_mixture(mixture)``: it passes an approved factory of the split here."""
    if not isinstance(factory, SplitLoaderFactory):
        raise ConfigurationError(
            f"load_mixture takes a SplitLoaderFactory (TrainVault.ungated_loader_factory), got "
            f"{type(factory).__name__}; for an approved dataset call loader_factory().load_mixture(mixture)"
        )
    args = factory.dataloader_args([e.uri for _, e in factory.publication.entries()])
    return MixtureDataLoader(factory, mixture, **args)
