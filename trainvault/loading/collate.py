"""The loader's default collate: torch's ``default_collate`` per field, except that a field
whose values are sequences of different lengths (token lists) stays a list of tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainvault.errors import ConfigurationError
from trainvault.extras import require


def collate_records(batch: list[Any]) -> Any:
    """A batch of records as torch's ``default_collate`` makes it (numbers and equal-shape arrays
    stacked, strings listed), with each ragged field (lists or arrays of unequal lengths) a list
    of one tensor per record instead of an error: pad or pack those in your own `collate_fn`."""
    data = require("torch", "torch").utils.data
    if not batch or not all(isinstance(r, Mapping) for r in batch):
        return data.default_collate(batch)
    fields = batch[0].keys()
    other = next((r for r in batch if r.keys() != fields), None)
    if other is not None:
        raise ConfigurationError(
            f"records of one batch hold different fields ({sorted(fields)} and {sorted(other.keys())}); the default "
            "collate batches records of one shape: pass a collate_fn (collate_fn=list keeps the records as they are)"
        )
    return {k: _column([r[k] for r in batch], data) for k in fields}


def _column(values: list[Any], data: Any) -> Any:
    if _ragged(values):
        return [_tensor(v, data) for v in values]
    return data.default_collate(values)


def _tensor(value: Any, data: Any) -> Any:
    torch = require("torch", "torch")
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):  # not numbers (strings, mixed): as default_convert leaves it
        return data.default_convert(value)


def _ragged(values: list[Any]) -> bool:
    lengths = {len(v) for v in values if _is_sequence(v)}
    return len(lengths) > 1 and all(_is_sequence(v) for v in values)


def _is_sequence(value: Any) -> bool:
    if isinstance(value, (str, bytes, Mapping)):
        return False
    return isinstance(value, Sequence) or getattr(value, "ndim", 0) >= 1
