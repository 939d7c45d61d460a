"""Versioned on-storage documents: strict pydantic models written as canonical JSON.

Every document carries ``format`` (what it is) and ``version`` (its major version).
Parsing checks both before the fields, so a document from a newer trainvault fails with
"upgrade" advice instead of a wall of field errors.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from trainvault.canonical import canonical_json, check_depth, loads_strict, sha256_hex
from trainvault.errors import ManifestError

D = TypeVar("D", bound="Document")


class StrictModel(BaseModel):
    """Base of every model inside a document: unknown fields refused, no coercion, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Document(StrictModel):
    """Base of every published JSON document."""

    KIND: ClassVar[str]
    VERSION: ClassVar[int] = 1

    def to_json_bytes(self) -> bytes:
        """The canonical JSON bytes: what is written and what is hashed."""
        return canonical_json(self.model_dump(mode="json"))

    def document_sha256(self) -> str:
        """SHA-256 of the canonical bytes."""
        return sha256_hex(self.to_json_bytes())

    @classmethod
    def from_json_bytes(cls: type[D], data: bytes | str, *, source: str = "document") -> D:
        """Parse and validate; raise `ManifestError` naming `source` and the bad field."""
        return cls.from_parsed(parse_json(data, source=source, kind=cls.KIND, walk=not cls._bounds_depth()), source)

    @classmethod
    def from_parsed(cls: type[D], obj: Any, source: str) -> D:
        """Validate a value `parse_json` returned (walked for depth or not, as `_bounds_depth` says)."""
        if not cls._bounds_depth():
            return cls.from_obj(obj, source=source)
        try:
            doc = cls.from_obj(obj, source=source)
        except ManifestError:
            check_depth(obj, source)  # a document too deep to fit its schema says so first
            raise
        for above, value in doc.open_values():
            check_depth(value, source, above)
        return doc

    @classmethod
    def _bounds_depth(cls) -> bool:
        return cls.open_values is not Document.open_values

    def open_values(self) -> list[tuple[int, Any]]:
        """(levels above it, value) for each part of this document whose nesting its schema leaves
        open. A kind that lists them is parsed without walking every value for depth (its schema
        bounds the rest); the default walks the whole document, so it lists none."""
        return []

    @classmethod
    def from_obj(cls: type[D], obj: Any, *, source: str = "document") -> D:
        if not isinstance(obj, dict):
            raise ManifestError(f"{source}: expected a JSON object for {cls.KIND}, got {type(obj).__name__}")
        kind, version = obj.get("format"), obj.get("version")
        if kind != cls.KIND:
            raise ManifestError(f"{source}: field 'format' is {kind!r}, expected {cls.KIND!r}")
        if type(version) is not int:
            raise ManifestError(f"{source}: field 'version' must be an integer, got {version!r}")
        if version != cls.VERSION:
            raise ManifestError(
                f"{source}: {cls.KIND} version {version} is not supported (this trainvault reads version "
                f"{cls.VERSION}); upgrade trainvault to read it"
            )
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            raise ManifestError(f"{source}: invalid {cls.KIND}: {describe_validation_error(exc)}") from None


def parse_json(data: bytes | str, *, source: str, kind: str, walk: bool = True) -> Any:
    """The strict parse of a document's bytes (`loads_strict`); invalid JSON raises `ManifestError`
    naming `source` and the `kind` expected."""
    try:
        return loads_strict(data, source=source, walk=walk)
    except ManifestError:
        raise
    except ValueError as exc:  # UnicodeDecodeError too
        raise ManifestError(f"{source}: not valid JSON ({exc}); the object is damaged or not a {kind}") from None


def describe_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """One line per bad field: ``field a.b.0.c: message``."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "(document)"
        parts.append(f"field {loc}: {err['msg']}")
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)
