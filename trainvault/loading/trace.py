"""Which records a training step saw: located from the run's history and the pure order.

Step N's batch is found by arithmetic on the history of re-dealing points (`step_batch`),
its records by the epoch order of that batch's windows (`EpochOrder.members`): the same
functions the iterator deals with, so the cost is that of the step's records, never a
replay of the steps before it. Reading the records (for their ``id``) goes through the
loader's own block fetcher, so each block's SHA-256 is checked before it is decoded:
`read_records` reads each block a step needs once, for this trace and a mixture's alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainvault.errors import ConfigurationError

if TYPE_CHECKING:
    from trainvault.loading.fetch import BlockFetcher
    from trainvault.loading.iterable import SplitIterableDataset
    from trainvault.loading.order import BlockPlan, Redeal


@dataclass(frozen=True)
class TracedRecord:
    """One record of a step's batch: its split, manifest shard key, index within the shard,
    and its ``id`` field (None when it has none, or when records were not read); under a
    mixture also its component and the mixture revision in force (else None)."""

    split: str
    shard: str
    record_index: int
    id: Any = None
    component: str | None = None
    revision: int | None = None


@dataclass(frozen=True)
class StepTrace:
    """A step of one rank: its epoch, the batch's records in batch order, and (when read) the records."""

    step: int
    rank: int
    epoch: int
    records: tuple[TracedRecord, ...]
    data: tuple[Any, ...] | None = None


def trace_batch(
    dataset: SplitIterableDataset, split: str, history: Sequence[Redeal], step: int, rank: int, *, read: bool = True
) -> StepTrace:
    """The records of `rank`'s batch at `step` of a run with `history` over `dataset`'s
    selection; with `read`, the records themselves (verified) fill ``id`` and ``data``."""
    from trainvault.loading.order import step_batch

    if dataset.plan.view is not None:
        raise ConfigurationError(
            "trace names stored records; this loader batches the logical records of a record view "
            "(materializer), which trace does not map back"
        )
    epoch, batch = step_batch(history, step, dataset.total, rank)
    order = dataset.order(epoch)
    plan_blocks: list[int] = []
    locals_: list[int] = []
    for k, lo, hi in order.pieces(batch.start, batch.count):
        blocks, local = order.members(k, lo, hi)
        plan_blocks += blocks.tolist()
        locals_ += local.tolist()
    plan, shards = order.plan, dataset.fetcher.shards
    where = [
        (shards[int(plan.shard[i])].key, plan.record_index(i, r)) for i, r in zip(plan_blocks, locals_, strict=False)
    ]
    if not read:
        return StepTrace(step, rank, epoch, tuple(TracedRecord(split, key, index) for key, index in where))
    data = read_records(dataset.fetcher, plan, plan_blocks, locals_)
    traced = tuple(TracedRecord(split, key, index, record_id(r)) for (key, index), r in zip(where, data, strict=False))
    return StepTrace(step, rank, epoch, traced, tuple(data))


def read_records(
    fetcher: BlockFetcher, plan: BlockPlan, plan_blocks: Sequence[int], locals_: Sequence[int]
) -> list[Any]:
    """Record `locals_[j]` (counting dealt records) of plan block `plan_blocks[j]`, for each j:
    every block read through `fetcher` (verified before it is decoded) once, however many of
    its records are asked for."""
    needed = list(dict.fromkeys(plan_blocks))
    wanted = ((int(plan.shard[i]), int(plan.block[i])) for i in needed)
    stream = fetcher.iter_blocks(wanted, lookahead=len(needed))
    try:
        decoded = {i: plan.keep(i, next(stream)) for i in needed}
    finally:
        stream.close()
    return [decoded[i][r] for i, r in zip(plan_blocks, locals_, strict=False)]


def record_id(record: Any) -> Any:
    """A record's ``id`` field (None when it has none)."""
    return record.get("id") if isinstance(record, Mapping) else None
