"""Task-data validation: each dataset's rows checked against its pydantic model.

Modes:

- ``off``: rows are not checked.
- ``warn``: every row is checked; offending rows are recorded in the profile by
  coordinates (split, shard key, record index) and the profile is still published.
- ``error``: as warn, and any offending row fails the profile with
  `TaskDataValidationError` (nothing is published).
- ``auto``: ``error`` when the dataset has a schema, ``off`` when it has none. A schema
  someone wrote is a contract; rows that break it should not reach a trainer silently.

``warn`` and ``error`` without a schema are refused: they would check nothing while
claiming to.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from trainvault.canonical import canonical_json
from trainvault.documents import describe_validation_error
from trainvault.errors import ProfileError, TaskDataValidationError

ValidationMode = Literal["off", "warn", "error", "auto"]
MODES: tuple[str, ...] = ("off", "warn", "error", "auto")
#: Offending rows recorded per split; the count is always exact.
MAX_RECORDED_OFFENDING_ROWS = 1000


@dataclass(frozen=True, order=True)
class OffendingRow:
    """A row its schema rejected, by coordinates: (split, shard key, record index within the shard)."""

    split: str
    shard_key: str
    record_index: int
    error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "shard_key": self.shard_key,
            "record_index": self.record_index,
            "error": self.error,
        }


def load_schema(ref: str) -> type[BaseModel]:
    """Import a schema named ``package.module:ClassName``."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise ProfileError(f"task-data schema {ref!r}: name it as 'package.module:ClassName'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ProfileError(f"task-data schema {ref!r} cannot be imported: {exc}") from None
    if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
        raise ProfileError(f"task-data schema {ref!r} is not a pydantic model class")
    return obj


def schema_name(schema: type[BaseModel]) -> str:
    return f"{schema.__module__}:{schema.__qualname__}"


def schema_sha256(schema: type[BaseModel]) -> str:
    """Digest of the model's JSON Schema: a changed schema changes the published profile."""
    try:
        data = canonical_json(schema.model_json_schema())
    except Exception:  # a model with types JSON Schema cannot express: fall back to its name
        data = json.dumps(schema_name(schema)).encode()
    return hashlib.sha256(data).hexdigest()


class TaskDataValidator:
    """Checks rows against one dataset's schema in one mode."""

    def __init__(
        self, schema: type[BaseModel] | str | None = None, mode: ValidationMode = "auto", *, dataset: str = "dataset"
    ):
        if mode not in MODES:
            raise ProfileError(f"task-data validation mode {mode!r} is not one of {', '.join(MODES)}")
        if isinstance(schema, str):
            schema = load_schema(schema)
        if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise ProfileError(f"{dataset}: the task-data schema must be a pydantic model class, got {schema!r}")
        if mode in ("warn", "error") and schema is None:
            raise ProfileError(
                f"{dataset}: task-data validation mode {mode!r} needs a schema; pass schema= (a pydantic model) "
                "or use mode 'auto' to validate only datasets that have one"
            )
        self.dataset = dataset
        self.schema = schema
        self.requested_mode = mode
        self.mode: str = ("error" if schema is not None else "off") if mode == "auto" else mode

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def check(self, row: Mapping[str, Any]) -> str | None:
        """None when the row is valid (or validation is off), else a one-line reason."""
        if self.schema is None or not self.active:
            return None
        try:
            self.schema.model_validate(row)
        except ValidationError as exc:
            return describe_validation_error(exc, limit=3)
        return None

    def describe(self) -> dict[str, Any]:
        """What the profile records about validation."""
        return {
            "mode": self.mode,
            "requested_mode": self.requested_mode,
            "schema": schema_name(self.schema) if self.schema is not None else None,
            "schema_sha256": schema_sha256(self.schema) if self.schema is not None else None,
        }

    def raise_for(self, offending: list[OffendingRow], count: int) -> None:
        """In ``error`` mode, raise `TaskDataValidationError` when any row offended."""
        # Mode "error" always has a schema (the constructor refuses one without).
        if self.mode != "error" or count == 0 or self.schema is None:
            return
        shown = "; ".join(f"{o.split}/{o.shard_key} record {o.record_index}: {o.error}" for o in offending[:5])
        more = f" and {count - 5} more" if count > 5 else ""
        raise TaskDataValidationError(
            f"{self.dataset}: {count} row(s) do not match task-data schema {schema_name(self.schema)}"
            f" ({shown}{more}). Fix the rows and publish again, or profile with validation 'warn' to record them"
        )
