"""Which steps of a run read records that amendments later removed, from its saved state alone.

A loader state names the run's selection, order, exclusions digest and re-dealing history, so
every step's batch on every rank is located by arithmetic (`trainvault.loading.trace`). Each
segment of the history names the view of the approval it read (the approval alone, or after
amendment k; a state without that names it by its exclusions digest) and, after a resume across
an amendment, the earlier view whose order its epoch followed; each step's records, by shard
key and index (no record is read), are then matched against what the amendments after k removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainvault.approval.resume import ViewOrders, segment_view
from trainvault.errors import AmendmentError, ResumeStateError
from trainvault.loading.state import LoaderState
from trainvault.loading.trace import trace_batch

if TYPE_CHECKING:
    from trainvault.approval.amendment import AmendmentChain
    from trainvault.approval.approved_loader import ApprovedLoaderFactory
    from trainvault.loading.iterable import SplitIterableDataset
    from trainvault.loading.order import Redeal


@dataclass(frozen=True)
class RemovedRead:
    """A record a step read that an amendment removed later."""

    step: int
    rank: int
    epoch: int
    split: str
    shard: str
    record_index: int
    reason: str
    note: str
    amendment: int


def removed_reads(
    loader_factory: Callable[..., ApprovedLoaderFactory], chain: AmendmentChain | None, state: Mapping[str, Any]
) -> list[RemovedRead]:
    """Every record that the run which saved `state` read at its steps so far (on every rank) and
    that an amendment in `chain` removed after the view the run read, in step and rank order;
    `loader_factory` is the approved dataset's (`ApprovedDataset.removed_reads` calls this).
    `ResumeStateError` for a state of no view of this approval; `AmendmentError` without amendments."""
    if chain is None:
        raise AmendmentError(
            "this approval was opened without amendments: open it with amendments=PREFIX to say what they removed"
        )
    parsed = LoaderState.from_dict(state)
    ident = parsed.identity
    factory = loader_factory(
        collate_fn=list,
        dataloader_args={"batch_size": parsed.batch_size, "drop_last": parsed.remainder == "drop"},
        shuffle=ident.shuffle,
        seed=ident.seed,
        shuffle_window_blocks=ident.shuffle_window_blocks,
        rank=0,
        world_size=1,
    )
    stages = list(ident.curriculum_stages) if ident.curriculum_stages else None
    views = ViewOrders(factory, chain, ident.split, stages)
    level = views.level_of(parsed)
    if level is None:
        raise ResumeStateError(
            f"this state skips the records of digest {ident.exclude_sha256}, which is no view of this approval or "
            "its amendments; pass a state saved by a run of this approval"
        )
    # The view the state counts, located only (read=False below), never dealt from.
    factory._factory_at(ident.split, level).load(ident.split, curriculum_stages=stages).load_state_dict(state)
    step, history = parsed.run_history()
    datasets: dict[tuple[int, ...], SplitIterableDataset] = {}
    out: list[RemovedRead] = []
    for s in range(step):
        v, seg = segment_view(history, s, level)
        ds = _dataset(views, datasets, v, seg)
        later = {r.key: r for r in chain.removed if r.amendment > v}
        for rank in range(seg.world_size):
            traced = trace_batch(ds, ident.split, history, s, rank, read=False)
            for rec in traced.records:
                r = later.get((rec.split, rec.shard, rec.record_index))
                if r is not None:
                    out.append(
                        RemovedRead(
                            s, rank, traced.epoch, r.split, r.shard, r.record_index, r.reason, r.note, r.amendment
                        )
                    )
    return out


def _dataset(
    views: ViewOrders, cache: dict[tuple[int, ...], SplitIterableDataset], level: int, seg: Redeal
) -> SplitIterableDataset:
    """The dataset of view `level` as segment `seg` dealt it (its bridged first epoch included)."""
    key = (level,) if seg.bridged_from is None else (level, seg.bridged_from, seg.epoch)
    if key not in cache:
        at = views.factory._factory_at(views.split, level)
        ds = at.load(views.split, curriculum_stages=views.stages).split_dataset
        if seg.bridged_from is not None:
            ds.bridge = views.bridge(seg.bridged_from, level, seg.epoch)
        cache[key] = ds
    return cache[key]
