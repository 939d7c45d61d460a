"""Which records a mixture step saw: the schedule names component and revision of each
slot, the component names its record; nothing before the step is replayed. With `read`,
only the blocks holding the step's records are read, each once and verified before decoding
(`trainvault.loading.trace.read_records`, per component)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainvault.loading.order import RankBatch
from trainvault.loading.trace import TracedRecord, read_records, record_id
from trainvault.mixtures.schedule import Timeline
from trainvault.mixtures.source import ComponentSource


def trace_mixture_batch(
    split: str,
    timeline: Timeline,
    sources: Sequence[ComponentSource],
    names: Sequence[str],
    batch: RankBatch,
    *,
    read: bool = True,
) -> list[TracedRecord]:
    comps, draws, revs = timeline.assign(batch.start, batch.count)
    located: list[tuple[int, int, int]] = [(0, 0, 0)] * batch.count  # (plan block, local, shard key index)
    where: list[tuple[str, int]] = [("", 0)] * batch.count
    for c in dict.fromkeys(comps.tolist()):
        at = (comps == c).nonzero()[0]
        source = sources[c]
        epochs, windows, members = source.locate(draws[at])
        for e, k in dict.fromkeys(zip(epochs.tolist(), windows.tolist(), strict=False)):
            sel = (epochs == e) & (windows == k)
            blocks, local = source.members_blocks(e, k, members[sel])
            for i, b, r in zip(at[sel].tolist(), blocks.tolist(), local.tolist(), strict=False):
                located[i] = (b, r, c)
                where[i] = (source.shards[int(source.plan.shard[b])].key, source.plan.record_index(b, r))
    ids: list[Any] = [None] * batch.count
    if read:
        ids = _read_ids(sources, located)
    return [
        TracedRecord(split, key, index, rid, component=names[c], revision=int(rev))
        for (key, index), rid, c, rev in zip(where, ids, comps.tolist(), revs.tolist(), strict=False)
    ]


def _read_ids(sources: Sequence[ComponentSource], located: Sequence[tuple[int, int, int]]) -> list[Any]:
    """The ``id`` of the record at each (plan block, local index, component)."""
    ids: list[Any] = [None] * len(located)
    for c in dict.fromkeys(loc[2] for loc in located):
        at = [i for i, loc in enumerate(located) if loc[2] == c]
        source = sources[c]
        records = read_records(source.fetcher, source.plan, [located[i][0] for i in at], [located[i][1] for i in at])
        for i, record in zip(at, records, strict=True):
            ids[i] = record_id(record)
    return ids
