"""Varlen batches of materialised ranges, as flash-attention style trainers take them.

``collate_sequences`` packs a batch of logical records (``unpack`` ranges, or ``group``
records flattened in ledger order) into flat tensors plus ``cu_seqlens``. From the
approved loader it gets lazy ranges and writes each range straight from its packed
record into the batch (no per-range arrays); it also takes the owned records
``iter_records`` yields. Every tensor is a view of one buffer written once; in a DataLoader worker that buffer is allocated in
shared memory, as torch's ``default_collate`` does, so the batch reaches the trainer
through one shared segment instead of one per tensor (a segment costs the receiving
process a descriptor, a mapping and an unmapping). Imports torch: extra ``torch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainvault.components.sequences import LazyRanges, row_constants

#: Output tensors in buffer order; each starts on an 8-byte boundary, so every view is aligned.
_LAYOUT = (
    ("target_row_indices", "int64", "targets"),
    ("input_ids", "int32", "rows"),
    ("position_ids", "int32", "rows"),
    ("cu_seqlens", "int32", "sequences"),
    ("loss_mask", "bool", "rows"),
    ("ce_valid", "bool", "targets"),
)

#: The order a batch lists them in.
_PUBLIC_ORDER = ("input_ids", "position_ids", "loss_mask", "target_row_indices", "ce_valid", "cu_seqlens")


def _buffer(nbytes: int) -> Any:
    """A fresh uint8 tensor of `nbytes`, in shared memory inside a DataLoader worker."""
    import torch
    import torch.utils.data

    if torch.utils.data.get_worker_info() is None:
        return torch.empty(nbytes, dtype=torch.uint8)
    # torch's own collate allocates worker batches this way (no copy); torch leaves _new_shared unannotated.
    shared = torch.UntypedStorage._new_shared(nbytes)  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=torch.uint8).set_(shared)


def allocate_varlen(rows: int, targets: int, sequences: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The output tensors of a varlen batch, uninitialised, as views of one fresh buffer, and
    numpy views of the same memory to write them through."""
    import numpy as np
    import torch

    counts = {"rows": rows, "targets": targets, "sequences": sequences + 1}
    spans = {}
    at = 0
    for name, dtype, count in _LAYOUT:
        size = np.dtype(dtype).itemsize * counts[count]
        spans[name] = (at, size, dtype)
        at += -(-size // 8) * 8
    buf = _buffer(at)
    raw = buf.numpy()
    tensors = {}
    views = {}
    for name in _PUBLIC_ORDER:
        lo, size, dtype = spans[name]
        tensors[name] = buf[lo : lo + size].view(getattr(torch, dtype))
        views[name] = raw[lo : lo + size].view(dtype)
    return tensors, views


def collate_sequences(batch: Sequence[dict[str, Any] | LazyRanges]) -> dict[str, Any]:
    """A batch of ``unpack`` or ``group`` records as one varlen batch.

    Returns ``input_ids`` and ``position_ids`` (int32), ``loss_mask`` (bool), all sequences'
    rows back to back; ``cu_seqlens`` (int32, sequence starts and the total) and
    ``max_seqlen``; ``target_row_indices`` (int64) as flat row indices into that batch, with
    ``ce_valid``; ``range_ids`` and ``packed_record_ids``, one per sequence; and
    ``logical_records``, the batch's records (ranges or group records): what the loader's
    position advances by and what a `PositionBudget` consumes. The loss is
    CE(``logits[target_row_indices]``, ``input_ids[target_row_indices + 1]``).
    """
    import numpy as np

    lazy = [r for r in batch if type(r) is LazyRanges]
    if batch and len(lazy) == len(batch):
        return _collate_lazy(lazy)
    records = [r.owned() if isinstance(r, LazyRanges) else r for r in batch]
    seqs = [s for r in records for s in r.get("component_sequences", (r,))]
    missing = next((s for s in seqs if "target_row_indices" not in s), None)
    if missing is not None:
        raise TypeError(
            "collate_sequences takes the records of a component range materializer (unpack or group), got one "
            f"with keys {sorted(missing)}; pass materializer=approved.component_range_materializer(split)"
        )
    lengths = np.fromiter((len(s["input_ids"]) for s in seqs), dtype=np.int64, count=len(seqs))
    starts = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    targets = [s["target_row_indices"] for s in seqs]
    out, views = allocate_varlen(int(starts[-1]), sum(len(t) for t in targets), len(seqs))

    for name in ("input_ids", "position_ids", "loss_mask", "ce_valid") if seqs else ():
        np.concatenate([s[name] for s in seqs], out=views[name])
    views["cu_seqlens"][:] = starts
    flat, k = views["target_row_indices"], 0
    for t, row in zip(targets, starts[:-1].tolist(), strict=False):
        np.add(t, row, out=flat[k : k + len(t)])  # the sequence's start plus its own row
        k += len(t)
    out["max_seqlen"] = int(lengths.max()) if seqs else 0
    out["range_ids"] = [s["range_id"] for s in seqs]
    out["packed_record_ids"] = [s["packed_record_id"] for s in seqs]
    out["logical_records"] = len(batch)
    return out


def _collate_lazy(batch: Sequence[LazyRanges]) -> dict[str, Any]:
    """`collate_sequences` of lazy ranges: each range's rows copied once, from its packed record
    into the batch buffer, the other outputs written from cached constants."""
    import numpy as np

    seqs = [(r.ids, r.mask, rng, r.packed_record_id) for r in batch for rng in r.ranges]
    spans = [(rng.row_lo, rng.row_hi) for _, _, rng, _ in seqs]
    lengths = np.fromiter((hi - lo for lo, hi in spans), dtype=np.int64, count=len(seqs))
    starts = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    # Targets: the row before each loss-bearing row; row 0 of a sequence never bears loss.
    counts = [
        hi - lo - 1 if mask is None else int(np.count_nonzero(mask[lo + 1 : hi]))
        for (_, mask, _, _), (lo, hi) in zip(seqs, spans, strict=False)
    ]
    out, v = allocate_varlen(int(starts[-1]), sum(counts), len(seqs))
    positions, shifted, true = row_constants(int(lengths.max()) if seqs else 0)
    np.concatenate([ids[lo:hi] for (ids, *_), (lo, hi) in zip(seqs, spans, strict=False)], out=v["input_ids"])
    np.concatenate([positions[: hi - lo] for lo, hi in spans], out=v["position_ids"])
    loss = v["loss_mask"]
    if all(mask is None for _, mask, _, _ in seqs):
        loss[:] = True
    else:
        np.concatenate(
            [true[: hi - lo] if s[1] is None else s[1][lo:hi] for s, (lo, hi) in zip(seqs, spans, strict=False)],
            out=loss,
        )
    loss[starts[:-1]] = False
    flat, k = v["target_row_indices"], 0
    for (_, mask, _, _), row, m, n in zip(seqs, starts[:-1].tolist(), lengths.tolist(), counts, strict=False):
        if mask is None:  # every row after the first bears loss
            np.add(shifted[1:m], row, out=flat[k : k + n])
        else:
            np.add(np.flatnonzero(loss[row : row + m]), row - 1, out=flat[k : k + n])
        k += n
    v["ce_valid"][:] = True
    v["cu_seqlens"][:] = starts
    out["max_seqlen"] = int(lengths.max()) if seqs else 0
    out["range_ids"] = [rng.range_id for _, _, rng, _ in seqs]
    out["packed_record_ids"] = [pid for *_, pid in seqs]
    out["logical_records"] = len(batch)
    return out


__all__ = ["allocate_varlen", "collate_sequences"]
