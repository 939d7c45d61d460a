"""The fields of a split's records as a Croissant card declares them.

trainvault records are schemaless mappings, so a card's fields come from the records
themselves: every record of the split is read (each block verified) and every top-level
key's values are classified. A key whose values all have one Croissant type (integers and
floats together count as floats) gets that type; arrays get ``isArray`` and their element
type; a key whose values are all mappings gets a sub-field per key of theirs (one level:
what mlcroissant nests correctly). Values of several types, nested arrays, or mappings
below the first level have no type Croissant can state: their field carries no source
and says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Croissant data types by the kind of a scalar value.
_SCALAR_TYPES = {
    "text": "sc:Text",
    # Bytes that decode as UTF-8 are text a reader can decode; other bytes have no Croissant type.
    "utf-8 bytes": "sc:Text",
    "integer": "sc:Integer",
    "float": "sc:Float",
    "boolean": "sc:Boolean",
}
#: Croissant data types of NumPy dtypes (msgpack and Parquet carry arrays).
_DTYPE_TYPES = {
    "int8": "cr:Int8",
    "int16": "cr:Int16",
    "int32": "cr:Int32",
    "int64": "cr:Int64",
    "uint8": "cr:UInt8",
    "uint16": "cr:UInt16",
    "uint32": "cr:UInt32",
    "uint64": "cr:UInt64",
    "float16": "cr:Float16",
    "float32": "cr:Float32",
    "float64": "cr:Float64",
    "bool": "sc:Boolean",
}


def _kind(value: Any) -> str:
    """The kind of one value: null, boolean, integer, float, text, utf-8 bytes (that decode as UTF-8,
    strictly), bytes, array, mapping or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return "bytes"
        return "utf-8 bytes"
    if isinstance(value, (list, tuple)) or (hasattr(value, "dtype") and getattr(value, "ndim", 0) > 0):
        return "array"
    if isinstance(value, Mapping):
        return "mapping"
    if hasattr(value, "dtype"):  # a NumPy scalar
        return {"b": "boolean", "i": "integer", "u": "integer", "f": "float"}.get(value.dtype.kind, "object")
    return "object"


def _scalar_type(kinds: set[str]) -> str | None:
    """The one Croissant type of values of these kinds (nulls aside), or None."""
    kinds = kinds - {"null"}
    if kinds == {"integer", "float"}:
        return "sc:Float"
    if kinds == {"text", "utf-8 bytes"}:
        return "sc:Text"
    if len(kinds) == 1:
        return _SCALAR_TYPES.get(next(iter(kinds)))
    return None


@dataclass
class FieldSurvey:
    """What one key held across a split's records."""

    name: str
    present: int = 0
    kinds: set[str] = field(default_factory=set)
    element_kinds: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)
    shapes: set[tuple[int, ...]] = field(default_factory=set)
    #: Key -> survey of the values under it, for values that are mappings.
    children: dict[str, FieldSurvey] = field(default_factory=dict)

    def observe(self, value: Any) -> None:
        self.present += 1
        kind = _kind(value)
        self.kinds.add(kind)
        if kind == "mapping":
            for key, sub in value.items():
                child = self.children.get(key)
                if child is None:
                    child = self.children[key] = FieldSurvey(str(key))
                child.observe(sub)
        if kind != "array":
            return
        if hasattr(value, "dtype"):
            self.dtypes.add(str(value.dtype))
            self.shapes.add(tuple(int(n) for n in value.shape))
        else:
            self.element_kinds.update(_kind(v) for v in value)
            self.shapes.add((len(value),))

    def merge(self, other: FieldSurvey) -> FieldSurvey:
        """Fold the survey of the same key over later records into this one; returns self."""
        self.present += other.present
        self.kinds |= other.kinds
        self.element_kinds |= other.element_kinds
        self.dtypes |= other.dtypes
        self.shapes |= other.shapes
        for key, child in other.children.items():
            mine = self.children.get(key)
            if mine is None:
                mine = self.children[key] = FieldSurvey(key)
            mine.merge(child)
        return self

    def state(self) -> dict[str, Any]:
        """Everything the survey holds, as JSON-compatible data (`from_state` reads it back)."""
        return {
            "name": self.name,
            "present": self.present,
            "kinds": sorted(self.kinds),
            "element_kinds": sorted(self.element_kinds),
            "dtypes": sorted(self.dtypes),
            "shapes": sorted(list(s) for s in self.shapes),
            "children": [c.state() for c in self.children.values()],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FieldSurvey:
        return cls(
            name=state["name"],
            present=state["present"],
            kinds=set(state["kinds"]),
            element_kinds=set(state["element_kinds"]),
            dtypes=set(state["dtypes"]),
            shapes={tuple(s) for s in state["shapes"]},
            children={c["name"]: cls.from_state(c) for c in state["children"]},
        )

    @property
    def is_record(self) -> bool:
        """Every value present is a mapping: the field is declared by sub-fields."""
        return self.kinds - {"null"} == {"mapping"}

    def data_type(self) -> tuple[str | None, bool]:
        """(Croissant data type or None, is an array)."""
        kinds = self.kinds - {"null"}
        if kinds != {"array"}:
            return _scalar_type(kinds), False
        if self.dtypes and not self.element_kinds:
            return (_DTYPE_TYPES.get(next(iter(self.dtypes))) if len(self.dtypes) == 1 else None), True
        if self.dtypes:
            return None, True
        return (_scalar_type(self.element_kinds) if self.element_kinds - {"null"} else "sc:Text"), True

    def array_shape(self) -> str:
        """``cr:arrayShape``: each dimension's size when every value has it, else -1."""
        ranks = {len(s) for s in self.shapes}
        if len(ranks) != 1:
            return "-1"
        dims = [{s[i] for s in self.shapes} for i in range(next(iter(ranks)))]
        return ",".join(str(next(iter(d))) if len(d) == 1 else "-1" for d in dims) or "-1"

    def note(self, records: int, nested: bool = False) -> str:
        """What a reader should know beyond the type (mixed kinds, absent values, raw bytes);
        `nested`: a mapping here sits too deep for sub-fields."""
        parts = []
        data_type, _ = self.data_type()
        if self.is_record and not nested:
            parts.append("an object; its keys are sub-fields")
        elif data_type is None:
            shown = sorted(
                self.kinds | {f"{k} elements" for k in self.element_kinds} | {f"{d} arrays" for d in self.dtypes}
            )
            parts.append(
                f"holds {', '.join(shown)}; Croissant has no type for this, so the field has no source: "
                "read it with trainvault"
            )
        if "bytes" in self.kinds or "bytes" in self.element_kinds:
            parts.append("raw bytes, not UTF-8 text")
        elif "utf-8 bytes" in self.kinds or "utf-8 bytes" in self.element_kinds:
            parts.append("text stored as UTF-8 bytes")
        missing = records - self.present
        nulls = "null" in self.kinds
        if missing or nulls:
            parts.append(f"absent from {missing} of {records} records" + (", null in some" if nulls else ""))
        return "; ".join(parts)


def survey_fields(records: Iterable[Mapping[str, Any]]) -> tuple[list[FieldSurvey], int]:
    """Every top-level key of `records` (in the order first seen) and the record count."""
    fields: dict[str, FieldSurvey] = {}
    count = 0
    for record in records:
        count += 1
        for key, value in record.items():
            survey = fields.get(key)
            if survey is None:
                survey = fields[key] = FieldSurvey(key)
            survey.observe(value)
    return list(fields.values()), count


def merge_surveys(parts: Iterable[tuple[list[FieldSurvey], int]]) -> tuple[list[FieldSurvey], int]:
    """The survey of consecutive runs of records from each run's (surveys, record count), in order:
    what `survey_fields` makes of all the records at once (keys in the order first seen)."""
    fields: dict[str, FieldSurvey] = {}
    count = 0
    for surveys, records in parts:
        count += records
        for survey in surveys:
            mine = fields.get(survey.name)
            if mine is None:
                mine = fields[survey.name] = FieldSurvey(survey.name)
            mine.merge(survey)
    return list(fields.values()), count
