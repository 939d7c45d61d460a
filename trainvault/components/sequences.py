"""A materialised range as rows: the lazy form the loader hands ``collate_sequences``
(written straight into its batch) and the owned records (fresh arrays) anything else gets.
See `trainvault.components.materializer` for what the rows of a range are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainvault.components.custody import CompiledRange


class LazyRanges:
    """Ranges of one packed record not yet copied out: an ``unpack`` record (one range) or a
    ``group`` record (all of them). Internal to the loader: ``collate_sequences`` writes them
    straight into its batch buffer; `owned` makes the records anything else gets."""

    __slots__ = ("group", "ids", "mask", "packed_record_id", "ranges")

    def __init__(self, packed_record_id: str, ids: Any, mask: Any, ranges: tuple[CompiledRange, ...], group: bool):
        self.packed_record_id = packed_record_id
        self.ids = ids
        self.mask = mask
        self.ranges = ranges
        self.group = group

    def owned(self) -> dict[str, Any]:
        """The logical record, its arrays fresh copies."""
        sequences = owned_sequences(self.packed_record_id, self.ids, self.mask, self.ranges)
        return group_sequences(sequences) if self.group else sequences[0]


#: Cached constants that outputs are copied from (never handed out): aranges for
#: positions and targets, all-true rows for masks and ``ce_valid``. Grown on demand.
_CACHE: dict[str, Any] = {}


def row_constants(rows: int) -> tuple[Any, Any, Any]:
    """int32 and int64 aranges and an all-true bool array of at least `rows` entries."""
    import numpy as np

    cached = _CACHE.get("constants")
    if cached is None or len(cached[0]) < rows:
        size = max(rows, 8192 + 1, 0 if cached is None else 2 * len(cached[0]))
        cached = _CACHE["constants"] = (
            np.arange(size, dtype=np.int32),
            np.arange(-1, size - 1, dtype=np.int64),
            np.ones(size, dtype=np.bool_),
        )
        for a in cached:
            a.flags.writeable = False
    return cached


def owned_sequences(pid: str, ids: Any, mask: Any, ranges: Sequence[CompiledRange]) -> list[dict[str, Any]]:
    """A record's ranges as unpack records whose arrays are fresh copies, never views of the record."""
    import numpy as np

    positions, shifted, true = row_constants(max(r.row_hi - r.row_lo for r in ranges))
    out = []
    for r in ranges:
        rid, cid, c, n, lo, hi = r.range_id, r.component_id, r.component_offset, r.length, r.row_lo, r.row_hi
        rows = ids[lo:hi].copy()
        m = hi - lo
        if mask is None:  # all true: every row after the first bears loss, row t's target is t - 1
            loss = true[:m].copy()
            loss[0] = False
            targets = shifted[1:m].copy()
            valid = true[: m - 1].copy()
        else:
            loss = mask[lo:hi].copy()
            loss[0] = False  # the predecessor, or the first token: context only
            targets = np.flatnonzero(loss).astype(np.int64, copy=False)
            targets -= 1
            valid = true[: len(targets)].copy()
        out.append(
            {
                "packed_record_id": pid,
                "component_id": cid,
                "range_id": rid,
                "component_range": (c, c + n),
                "record_range": (hi - n, hi),  # record positions of the range's own tokens
                "input_ids": rows,
                "position_ids": positions[:m].copy(),
                "loss_mask": loss,
                "target_row_indices": targets,
                "ce_valid": valid,
            }
        )
    return out


def group_sequences(sequences: list[dict[str, Any]]) -> dict[str, Any]:
    """One packed record's unpack records as a group record (``cu_seqlens`` from one cumsum)."""
    import numpy as np

    cu = np.zeros(len(sequences) + 1, dtype=np.int32)
    np.cumsum([len(s["input_ids"]) for s in sequences], out=cu[1:])
    return {
        "packed_record_id": sequences[0]["packed_record_id"],
        "component_sequences": sequences,
        "cu_seqlens": cu,
    }


__all__ = ["LazyRanges", "group_sequences", "owned_sequences", "row_constants"]
