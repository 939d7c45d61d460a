"""Columnar batches: a batch as a mapping field -> column, built without a record per row.

Asked for with ``batch_format="columns"``. A field of numbers is one tensor of the batch's
rows; a field of arrays is one ``(rows, ...)`` tensor when every row of the batch has the
same shape, else (ragged: tokens) one flat tensor of every row's values under the field's
name plus int64 offsets under ``"<field>.offsets"`` (rows + 1 of them; row i is
``values[offsets[i]:offsets[i + 1]]``) — the same rule by which the record collate stacks
or lists; any other field (strings, bytes, None) is a list. Parquet blocks become columns
straight from their Arrow table; msgpack.zst and jsonl.gz blocks are decoded to records
first and turned into columns per block. Imports torch: import it through the loader.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainvault.errors import ConfigurationError
from trainvault.formats.columns import ColumnBlock, Dense, Objects, Ragged, concat

#: The key suffix of a ragged field's offsets.
OFFSETS_SUFFIX = ".offsets"

ColumnBatch = dict[str, Any]


def _tensor(values: Any) -> torch.Tensor:
    """A tensor that owns its memory: a view (of a window the loader still reads from, or of a
    block's read-only bytes) is copied once, so a trainer writing into a batch changes nothing else."""
    array = np.ascontiguousarray(values)
    if not (array.flags.owndata and array.flags.writeable):
        array = array.copy()
    return torch.from_numpy(array)


def column_batch(pieces: list[ColumnBlock]) -> ColumnBatch:
    """The batch of the rows `pieces` hold, in order, as tensors and lists."""
    block = concat(pieces)
    out: ColumnBatch = {}
    for name, column in block.columns.items():
        if isinstance(column, Objects):
            out[name] = column.values
        elif isinstance(column, Dense):
            out[name] = _tensor(column.values)
        else:
            _put_ragged(out, name, column, block.columns.keys())
    if torch.utils.data.get_worker_info() is not None:
        _one_segment(out)
    return out


#: Alignment of each tensor inside a batch's one shared-memory segment (any dtype, cache lines).
_ALIGN = 64


def _one_segment(out: ColumnBatch) -> None:
    """In a DataLoader worker, put every tensor of the batch into one shared-memory segment.

    Torch passes each tensor's storage to the trainer as its own segment and file descriptor
    (one socket round trip each, ~0.6 ms on this 2-core machine: more than pickling 64 KiB);
    one segment per batch makes that one round trip, and the pickler finds it already shared.
    """
    names = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
    if len(names) < 2:
        return
    starts, total = [], 0
    for k in names:
        starts.append(total)
        total += -(-out[k].nbytes // _ALIGN) * _ALIGN
    segment = torch.empty(total, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
    for k, start in zip(names, starts, strict=True):
        t = out[k]
        view = segment[start : start + t.nbytes].view(t.dtype).view(t.shape)
        view.copy_(t)
        out[k] = view


def _put_ragged(out: ColumnBatch, name: str, column: Ragged, fields: Any) -> None:
    lengths = column.lengths()
    if len(lengths) and (lengths == lengths[0]).all():
        out[name] = _tensor(column.values).view(len(lengths), int(lengths[0]))
        return
    key = name + OFFSETS_SUFFIX
    if key in fields:
        raise ConfigurationError(
            f"field {name!r} is ragged, so its offsets go under {key!r}, which is also a field of these records; "
            "rename that field or use batch_format='records'"
        )
    out[name] = _tensor(column.values)
    out[key] = torch.from_numpy(np.ascontiguousarray(column.offsets, dtype=np.int64))
