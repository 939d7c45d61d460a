"""A block's records as columns: what a columnar batch is gathered from.

Three kinds of column, decided per block from the values: numbers (`Dense`: one NumPy
array, one row per record, any trailing shape), arrays and lists of numbers (`Ragged`: one
flat array of every record's values plus int64 offsets, ``offsets[i]:offsets[i + 1]`` being
record i's), and everything else (`Objects`: a list, e.g. strings). A loader gathers the rows
of a batch with `ColumnBlock.take` and `concat` and never builds a record. NumPy comes with
the ``torch`` extra; Parquet blocks are converted from their Arrow table (`from_arrow`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainvault.errors import ConfigurationError
from trainvault.extras import require

_NUMERIC = "biuf"


def _np() -> Any:
    return require("numpy", "torch")


@dataclass(frozen=True)
class Dense:
    """One array whose first axis is the record."""

    values: Any

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: Any) -> Dense:
        return Dense(self.values[rows])

    def slice(self, lo: int, hi: int) -> Dense:
        return Dense(self.values[lo:hi])


@dataclass(frozen=True)
class Ragged:
    """Every record's values back to back, and int64 offsets (one more than the records)."""

    values: Any
    offsets: Any

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> Any:
        return _np().diff(self.offsets)

    def take(self, rows: Any) -> Ragged:
        np = _np()
        starts = self.offsets[:-1][rows]
        lengths = self.offsets[1:][rows] - starts
        offsets = _offsets(lengths)
        # Each output value's source index: its row's start plus its place within the row.
        source = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return Ragged(self.values[source], offsets)

    def slice(self, lo: int, hi: int) -> Ragged:
        """Rows lo:hi; the values are a view, the offsets rebased to 0."""
        offsets = self.offsets[lo : hi + 1]
        return Ragged(self.values[offsets[0] : offsets[-1]], offsets - offsets[0])


def _offsets(lengths: Any) -> Any:
    """int64 offsets (a leading 0, then the running sum) of rows of `lengths`."""
    np = _np()
    offsets = np.empty(len(lengths) + 1, dtype=np.int64)
    offsets[0] = 0
    np.cumsum(lengths, out=offsets[1:])
    return offsets


@dataclass(frozen=True)
class Objects:
    """One Python value per record (strings, bytes, mappings, None...)."""

    values: list[Any]

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: Any) -> Objects:
        values = self.values
        return Objects([values[i] for i in rows.tolist()])

    def slice(self, lo: int, hi: int) -> Objects:
        return Objects(self.values[lo:hi])


Column = Dense | Ragged | Objects


@dataclass(frozen=True)
class ColumnBlock:
    """Records as columns: field -> `Column`, every column `length` rows long."""

    columns: Mapping[str, Column]
    length: int

    def __len__(self) -> int:
        return self.length

    def take(self, rows: Any) -> ColumnBlock:
        """The rows `rows` (an int64 index array), in that order."""
        return ColumnBlock({k: c.take(rows) for k, c in self.columns.items()}, len(rows))

    def slice(self, lo: int, hi: int) -> ColumnBlock:
        """Rows lo:hi (views where the columns allow)."""
        lo, hi = min(lo, self.length), max(min(lo, self.length), min(hi, self.length))
        return ColumnBlock({k: c.slice(lo, hi) for k, c in self.columns.items()}, hi - lo)


def concat(blocks: Sequence[ColumnBlock]) -> ColumnBlock:
    """The rows of `blocks` one after another; they must hold the same fields of the same kinds."""
    if len(blocks) == 1:
        return blocks[0]
    if not blocks:
        return ColumnBlock({}, 0)
    fields = blocks[0].columns.keys()
    for b in blocks:
        if b.columns.keys() != fields:
            raise ConfigurationError(
                f"blocks of one batch hold different fields ({sorted(fields)} and {sorted(b.columns.keys())}); "
                "a columnar batch needs one set of fields: use batch_format='records'"
            )
    return ColumnBlock({k: _concat_column(k, [b.columns[k] for b in blocks]) for k in fields}, sum(map(len, blocks)))


def _concat_column(name: str, parts: list[Column]) -> Column:
    np = _np()
    kind = type(parts[0])
    if any(type(p) is not kind for p in parts):
        kinds = sorted({type(p).__name__ for p in parts})
        raise ConfigurationError(
            f"field {name!r} is {' in some blocks and '.join(kinds)} in others; a columnar batch needs one kind "
            "per field: use batch_format='records'"
        )
    if kind is Objects:
        return Objects([v for p in parts if isinstance(p, Objects) for v in p.values])
    if kind is Dense:
        dense = [p for p in parts if isinstance(p, Dense)]
        shapes = {p.values.shape[1:] for p in dense}
        if len(shapes) > 1:
            raise ConfigurationError(f"field {name!r} has rows of shapes {sorted(shapes)}; one batch needs one shape")
        return Dense(np.concatenate([p.values for p in dense]))
    ragged = [p for p in parts if isinstance(p, Ragged)]
    offsets = _offsets(np.concatenate([p.lengths() for p in ragged]))
    return Ragged(np.concatenate([p.values[p.offsets[0] : p.offsets[-1]] for p in ragged]), offsets)


# -- from decoded records ---------------------------------------------------------


def from_records(records: list[dict[str, Any]]) -> ColumnBlock:
    """The columns of one block's decoded records (they must all hold the same fields)."""
    if not records:
        return ColumnBlock({}, 0)
    fields = records[0].keys()
    other = next((r for r in records if r.keys() != fields), None)
    if other is not None:
        raise ConfigurationError(
            f"records of one block hold different fields ({sorted(fields)} and {sorted(other.keys())}); "
            "a columnar batch needs one set of fields: use batch_format='records'"
        )
    return ColumnBlock({k: _column([r[k] for r in records]) for k in fields}, len(records))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) or (type(v).__module__ == "numpy" and getattr(v, "ndim", None) == 0)


def _column(values: list[Any]) -> Column:
    np = _np()
    first = values[0]
    if _is_number(first) and all(_is_number(v) for v in values):
        return Dense(np.asarray(values))
    ndarray = np.ndarray
    if isinstance(first, ndarray) and first.ndim >= 2:
        if all(isinstance(v, ndarray) and v.shape == first.shape for v in values):
            return Dense(np.stack(values))
        return Objects(values)
    if isinstance(first, ndarray) and all(type(v) is ndarray and v.ndim == 1 for v in values):
        if all(v.dtype.kind in _NUMERIC for v in values):
            return _ragged(values)
    elif all(isinstance(v, list) and all(_is_number(x) for x in v) for v in values):
        return _ragged(values)
    return Objects(values)


def _ragged(values: list[Any]) -> Column:
    np = _np()
    offsets = _offsets([len(v) for v in values])
    flat = np.concatenate(values) if type(values[0]) is np.ndarray else np.asarray([x for v in values for x in v])
    if flat.dtype.kind not in _NUMERIC:  # ints beyond int64 make an object array
        return Objects(values)
    return Ragged(flat, offsets)


# -- from an Arrow table (Parquet) ---------------------------------------------------


def from_arrow(table: Any) -> ColumnBlock:
    """The columns of one Arrow table: numbers and lists of numbers as views of Arrow's
    buffers where they have no nulls (no Python object per row), the rest as Python values."""
    return ColumnBlock({name: _arrow_column(table.column(name)) for name in table.column_names}, table.num_rows)


def _arrow_column(chunked: Any) -> Column:
    types = require("pyarrow", "parquet").types
    array = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
    t = array.type
    dense = _primitive(array)
    if dense is not None:
        return Dense(dense)
    if array.null_count == 0 and (types.is_list(t) or types.is_large_list(t)):
        offsets = _primitive(array.offsets)
        flat = _primitive(array.values)
        if offsets is not None and flat is not None and flat.dtype.kind != "b":
            offsets = offsets.astype(_np().int64)
            return Ragged(flat[offsets[0] : offsets[-1]], offsets - offsets[0])
    if array.null_count == 0 and types.is_fixed_size_list(t):
        flat = _primitive(array.flatten())
        if flat is not None and flat.dtype.kind != "b":
            return Dense(flat.reshape(len(array), t.list_size))
    return Objects(array.to_pylist())


def _primitive(array: Any) -> Any:
    """A NumPy view of a null-free Arrow array of numbers (a copy for booleans, which Arrow
    packs in bits), else None. Read from the buffers: pyarrow's own ``to_numpy`` imports pandas."""
    np = _np()
    types = require("pyarrow", "parquet").types
    t = array.type
    if array.null_count:
        return None
    lo, n = array.offset, len(array)
    if types.is_boolean(t):
        bits = np.frombuffer(array.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[lo : lo + n].astype(bool)
    if types.is_integer(t):
        kind = "i" if types.is_signed_integer(t) else "u"
    elif types.is_floating(t):
        kind = "f"
    else:
        return None
    dtype = np.dtype(f"<{kind}{t.bit_width // 8}")
    return np.frombuffer(array.buffers()[1], dtype=dtype)[lo : lo + n]
