"""One reference type: an object at a URI with the SHA-256 of its stored bytes.

`Sha256` is the one declaration of what a digest field accepts; `ObjectRef` is what an
approval binds, a report cites and a writer returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, field_validator, model_serializer

from trainvault.canonical import SHA256_PATTERN
from trainvault.documents import StrictModel
from trainvault.uris import parse_uri

#: A 64-character lowercase hex SHA-256 field.
Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN)]


class ObjectRef(StrictModel):
    """Where an object is stored, the SHA-256 of its bytes as stored and, when known, its size."""

    uri: str = Field(min_length=1)
    sha256: Sha256
    size: int | None = Field(default=None, ge=0)

    @field_validator("uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        parse_uri(value)
        return value

    @model_serializer(mode="wrap")
    def _omit_unknown_size(self, handler: Any) -> dict[str, Any]:
        # A reference written before sizes existed must serialise to the same bytes.
        out: dict[str, Any] = handler(self)
        if out.get("size") is None:
            out.pop("size", None)
        return out


@dataclass(frozen=True)
class Referenced:
    """Base of a result that holds an `ObjectRef` with more beside it (a written flag, signers):
    `uri` and `sha256` read through to the reference."""

    ref: ObjectRef

    @property
    def uri(self) -> str:
        return self.ref.uri

    @property
    def sha256(self) -> str:
        return self.ref.sha256
