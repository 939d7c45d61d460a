"""Which steps of a run read records that amendments later removed, from its saved state alone.

A loader state names the run's selection, order, exclusions digest and re-dealing history, so
every step's batch on every rank is located by arithmetic (`trainvault.loading.trace`). The
state's exclusions digest says which view of the approval the run read (the approval alone,
or after amendment k); each step's records, by shard key and index (no record is read), are
then matched against what the amendments after k removed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainvault.errors import AmendmentError, ResumeStateError
from trainvault.loading.state import LoaderState
from trainvault.loading.trace import trace_batch

if TYPE_CHECKING:
    from trainvault.approval.amendment import AmendmentChain
    from trainvault.approval.approved_loader import ApprovedLoaderFactory


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
    level, loader = None, None
    for k in range(chain.latest.amendment.sequence + 1):
        # The view after amendment k; located only (read=False below), never dealt from.
        candidate = factory._factory_at(ident.split, k).load(ident.split, curriculum_stages=stages)
        if candidate.state_dict().get("exclude_sha256") == ident.exclude_sha256:
            level, loader = k, candidate
            break
    if loader is None or level is None:
        raise ResumeStateError(
            f"this state skips the records of digest {ident.exclude_sha256}, which is no view of this approval or "
            "its amendments; pass a state saved by a run of this approval"
        )
    loader.load_state_dict(state)  # the selection, order and record count, checked
    later = {r.key: r for r in chain.removed if r.amendment > level}
    step, history = parsed.run_history()
    out: list[RemovedRead] = []
    for s in range(step):
        world = max((h for h in history if h.step <= s), key=lambda h: h.step).world_size
        for rank in range(world):
            traced = trace_batch(loader.split_dataset, ident.split, history, s, rank, read=False)
            for rec in traced.records:
                r = later.get((rec.split, rec.shard, rec.record_index))
                if r is not None:
                    out.append(
                        RemovedRead(
                            s, rank, traced.epoch, r.split, r.shard, r.record_index, r.reason, r.note, r.amendment
                        )
                    )
    return out
