"""A run resumed across an amendment: the rest of its epoch re-dealt without the removed records.

A state counts positions in the view of the approval it was saved under (the approval alone,
or after amendment k; its exclusions digest, and from now on its ``amendment``, say which).
Resumed by a loader of the view after amendment n > k, it continues exactly: the records it
consumed stay consumed; the rest of its epoch follows view k's order with what amendments
k+1..n removed left out (`trainvault.loading.bridge`), a pure function of the state and the
chain, so every rank and worker count re-deals it alike; later epochs follow view n's own
order. The translated state counts view n's records and names amendment n, and its history
keeps the view and order of each earlier segment, so `removed_reads` locates every step.
What it rests on: the chain as the trainer's open checked it (keys, threshold, sha256 links).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from trainvault.errors import ResumeStateError

if TYPE_CHECKING:
    from trainvault.approval.amendment import AmendmentChain
    from trainvault.loading.bridge import Bridge
    from trainvault.loading.factory import SelectedBlocks, SplitLoaderFactory
    from trainvault.loading.loader import TrainVaultDataLoader
    from trainvault.loading.order import EpochOrder, Redeal
    from trainvault.loading.plan import LoaderPlan
    from trainvault.loading.state import AmendmentMark, LoaderState
    from trainvault.publication.pinned import Publication


class AmendedFactory(Protocol):
    """What this module asks of the approved loader factory (which imports this module)."""

    @property
    def plan(self) -> LoaderPlan: ...

    @property
    def publication(self) -> Publication: ...

    def _exclude(self, split: str, sequence: int | None = None) -> Mapping[str, frozenset[int]]: ...

    def _factory_at(self, split: str, sequence: int) -> SplitLoaderFactory: ...


class ViewOrders:
    """The views of one selection of an approval, one per amendment level (0: the approval alone)."""

    def __init__(self, factory: AmendedFactory, chain: AmendmentChain, split: str, stages: list[str] | None):
        self.factory, self.chain, self.split, self.stages = factory, chain, split, stages
        self._selected: dict[int, SelectedBlocks] = {}

    def know(self, level: int, loader: TrainVaultDataLoader) -> None:
        """Take view `level`'s blocks from `loader`, which already holds them (no second plan)."""
        from trainvault.loading.factory import SelectedBlocks
        from trainvault.loading.selection import select

        ds = loader.split_dataset
        selection = select(self.factory.publication.manifest, self.split, curriculum_stages=self.stages)
        digest = loader.identity.exclude_sha256
        self._selected[level] = SelectedBlocks(selection, ds.blocks, ds.fetcher, ds.order_key, digest)

    @property
    def latest(self) -> int:
        return self.chain.latest.amendment.sequence

    def selected(self, level: int) -> SelectedBlocks:
        if level not in self._selected:
            at = self.factory._factory_at(self.split, level)
            self._selected[level] = at.select_blocks(self.split, curriculum_stages=self.stages)
        return self._selected[level]

    def order(self, level: int, epoch: int) -> EpochOrder:
        from trainvault.loading.order import EpochOrder  # NumPy: only a resume across an amendment needs it

        chosen, plan = self.selected(level), self.factory.plan
        return EpochOrder(chosen.blocks, chosen.order_key, epoch, plan.shuffle, plan.shuffle_window_blocks)

    def bridge(self, source: int, target: int, epoch: int) -> Bridge:
        """Epoch `epoch` in view `source`'s order less what view `target` removed since."""
        from trainvault.loading.bridge import Bridge, BridgedOrder, removed_positions

        order = self.order(source, epoch)
        keys = self.selected(source).selection.keys
        bridged = BridgedOrder(order, removed_positions(order, keys, self.factory._exclude(self.split, target)))
        if bridged.total != self.selected(target).blocks.total_records:
            raise ResumeStateError(
                f"the view after amendment {target} is not the view after amendment {source} less removals "
                f"({bridged.total} records, not {self.selected(target).blocks.total_records}); this chain cannot resume it"
            )
        return Bridge(epoch, source, bridged)

    def level_of(self, state: LoaderState) -> int | None:
        """The amendment level whose view `state` counts (None: no view of this approval)."""
        mark = state.amendment
        if mark is not None:
            known = self.chain.amendments
            if mark.sequence > len(known) or known[mark.sequence - 1].sha256 != mark.sha256:
                raise ResumeStateError(
                    f"this state runs under amendment {mark.sequence} ({mark.sha256}), which is not in this "
                    f"approval's chain of {len(known)}; open the approval with the amendments the run read"
                )
            return mark.sequence if self.selected(mark.sequence).exclude_sha256 == state.exclude_sha256 else None
        digest = state.exclude_sha256
        return next((k for k in range(self.latest, -1, -1) if self.selected(k).exclude_sha256 == digest), None)


def resume_across_amendments(
    factory: AmendedFactory,
    chain: AmendmentChain,
    loader: TrainVaultDataLoader,
    split: str,
    stages: list[str] | None,
) -> None:
    """Make `loader` (of the latest view) name its amendment and resume states of earlier views."""
    from trainvault.loading.state import AmendmentMark

    views = ViewOrders(factory, chain, split, stages)
    latest = chain.latest
    views.know(latest.amendment.sequence, loader)
    mark = AmendmentMark(sequence=latest.amendment.sequence, sha256=latest.sha256)
    loader.deal_under(mark, lambda state: translate(views, mark, state))


def translate(views: ViewOrders, mark: AmendmentMark, state: LoaderState) -> tuple[LoaderState, Bridge | None]:
    """`state` as a state of the latest view, and the bridge that deals the rest of its epoch."""
    from trainvault.loading.state import RedealPoint

    level = views.level_of(state)
    if level is None:
        return state, None  # no view of this approval: the loader's identity check says what it is
    step, history = state.run_history()
    last, epoch, latest = history[-1], state.epoch, views.latest
    source = last.bridged_from if last.bridged_from is not None and last.epoch == epoch else level
    if level == latest:
        bridged = source != latest and state.position < state.epoch_records
        return state, views.bridge(source, latest, epoch) if bridged else None
    order = views.order(source, epoch)
    at = state.position if source == level else views.bridge(source, level, epoch).order.source_position(state.position)
    to = views.bridge(source, latest, epoch)
    total = views.selected(latest).blocks.total_records
    position = total if at >= order.total else to.order.kept_before(at)
    points = [h if h.amendment is not None else replace(h, amendment=level) for h in history]
    moved = state.model_copy(
        update={
            "exclude_sha256": views.selected(latest).exclude_sha256,
            "epoch_records": total,
            "position": position,
            "amendment": mark,
            "step": step,
            "history": [RedealPoint.of(h) for h in points],
        }
    )
    return moved, to if 0 < at < order.total else None


def segment_view(history: tuple[Redeal, ...], step: int, level: int) -> tuple[int, Redeal]:
    """The view level `step` was dealt under, and its segment, in a state of view `level`."""
    seg = max((h for h in history if h.step <= step), key=lambda h: h.step)
    return (level if seg.amendment is None else seg.amendment), seg
