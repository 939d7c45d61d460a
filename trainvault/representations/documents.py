"""The representation publication's layout and documents.

```
<root>/representation-manifest-v1.json    final manifest, written last
<root>/representation-artifacts-v1.json   artifact manifest
<root>/indexes/<split>/<source>.json
<root>/artifacts/<split>/<source>/<part>/{tokens,layer-<L>.<state_kind>}.safetensors
```

Every URI inside these documents is relative to ``<root>`` (the final manifest's folder)
and may not leave it, so the same publication has the same bytes wherever it is written.
Custody: the final manifest (pinned by sha256) binds each index by uri, sha256, size and
etag; each index binds the artifact manifest by uri and sha256; the artifact manifest
binds each artifact by uri, sha256 and size.
"""

from __future__ import annotations

import itertools
import re
from typing import Final, Literal

from pydantic import Field, field_validator, model_validator

from trainvault.documents import Document, StrictModel
from trainvault.publication.manifest import validate_name
from trainvault.refs import Sha256

MANIFEST_NAME = "representation-manifest-v1.json"
ARTIFACT_MANIFEST_NAME = "representation-artifacts-v1.json"
#: A safetensors header above this is refused before it is parsed (safetensors' own cap is ~100 MB).
HEADER_LIMIT = 100 * 1024 * 1024
RowDtype = Literal["bfloat16", "float16", "float32"]
ROW_DTYPES: tuple[RowDtype, ...] = ("bfloat16", "float16", "float32")
TOKEN_DTYPE: Final = "int32"
#: Block ids are stored as int64.
MAX_BLOCK_ID = 2**63 - 1

_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")


def index_path(split: str, source: str) -> str:
    return f"indexes/{split}/{source}.json"


def artifact_id(split: str, source: str, part: str, layer: int | None = None, state_kind: str | None = None) -> str:
    """``<split>/<source>/<part>/tokens`` or ``<split>/<source>/<part>/layer-<L>.<state_kind>``."""
    name = "tokens" if layer is None else f"layer-{layer}.{state_kind}"
    return f"{split}/{source}/{part}/{name}"


def artifact_path(split: str, source: str, part: str, layer: int | None = None, state_kind: str | None = None) -> str:
    return f"artifacts/{artifact_id(split, source, part, layer, state_kind)}.safetensors"


def part_name(number: int) -> str:
    return f"part-{number:05d}"


def check_relative_uri(value: str) -> str:
    """A path inside the publication root: plain segments, no scheme, no leading '/', no '.' or '..'."""
    segments = value.split("/")
    if "://" in value or any(s in (".", "..") or not _SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(
            f"URI {value!r} escapes the publication root: URIs in a representation publication are "
            "relative paths of [A-Za-z0-9._-] segments inside the final manifest's folder"
        )
    return value


class Teacher(StrictModel):
    name: str = Field(min_length=1)
    revision: str = Field(min_length=1)
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)


class Projection(StrictModel):
    method: str = Field(min_length=1)
    dim: int = Field(ge=1)
    seed: int


class IndexRef(StrictModel):
    """An index, bound by content and by the version the store holds (etag)."""

    uri: str
    sha256: Sha256
    etag: str = Field(min_length=1)
    size_bytes: int = Field(ge=0)

    check_uri = field_validator("uri")(check_relative_uri)


class SourceEntry(StrictModel):
    index: IndexRef
    block_count: int = Field(ge=1)


class SplitEntry(StrictModel):
    sources: dict[str, SourceEntry] = Field(min_length=1)

    @field_validator("sources")
    @classmethod
    def _names(cls, value: dict[str, SourceEntry]) -> dict[str, SourceEntry]:
        for name in value:
            validate_name("source", name)
        return value


class RepresentationManifest(Document):
    """The final manifest: what the teacher, projection and layers are, and every index."""

    KIND = "trainvault.representation-manifest"

    format: Literal["trainvault.representation-manifest"] = "trainvault.representation-manifest"
    version: Literal[1] = 1
    teacher: Teacher
    projection: Projection
    layers: list[int] = Field(min_length=1)
    state_kinds: list[str] = Field(min_length=1)
    row_dtype: RowDtype
    token_dtype: Literal["int32"] = TOKEN_DTYPE
    splits: dict[str, SplitEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> RepresentationManifest:
        if self.layers != sorted(set(self.layers)):
            raise ValueError(f"layers must be ascending and distinct, got {self.layers}")
        bad = [layer for layer in self.layers if not 0 <= layer < self.teacher.num_layers]
        if bad:
            raise ValueError(f"layers {bad} are outside the teacher's {self.teacher.num_layers} layers")
        if self.state_kinds != sorted(set(self.state_kinds)):
            raise ValueError(f"state_kinds must be ascending and distinct, got {self.state_kinds}")
        for kind in self.state_kinds:
            validate_name("state kind", kind)
        for name in self.splits:
            validate_name("split", name)
        return self


class ArtifactManifestRef(StrictModel):
    uri: str
    sha256: Sha256

    check_uri = field_validator("uri")(check_relative_uri)


class IndexBlock(StrictModel):
    block_id: int = Field(ge=0, le=MAX_BLOCK_ID)
    part: str
    row_start: int = Field(ge=0)
    token_count: int = Field(ge=1)

    @field_validator("part")
    @classmethod
    def _part(cls, value: str) -> str:
        return validate_name("part", value)


class RepresentationIndex(Document):
    """One (split, source): its blocks in ascending id order, and where their rows are."""

    KIND = "trainvault.representation-index"

    format: Literal["trainvault.representation-index"] = "trainvault.representation-index"
    version: Literal[1] = 1
    artifact_manifest: ArtifactManifestRef
    blocks: list[IndexBlock] = Field(min_length=1)

    @field_validator("blocks")
    @classmethod
    def _ascending(cls, value: list[IndexBlock]) -> list[IndexBlock]:
        for prev, cur in itertools.pairwise(value):
            if cur.block_id <= prev.block_id:
                raise ValueError(
                    f"block ids must be strictly ascending: {cur.block_id} follows {prev.block_id}"
                    + (" (repeated)" if cur.block_id == prev.block_id else "")
                )
        return value


class ArtifactEntry(StrictModel):
    """One safetensors object: a part's tokens, or its states at one (layer, state kind)."""

    artifact_id: str
    kind: Literal["tokens", "states"]
    split: str
    source: str
    part: str
    layer: int | None
    state_kind: str | None
    uri: str
    sha256: Sha256
    size_bytes: int = Field(ge=0)
    dtype: Literal["int32", "bfloat16", "float16", "float32"]
    shape: list[int]

    check_uri = field_validator("uri")(check_relative_uri)

    @model_validator(mode="after")
    def _consistent(self) -> ArtifactEntry:
        validate_name("split", self.split)
        validate_name("source", self.source)
        validate_name("part", self.part)
        if self.kind == "tokens":
            if self.layer is not None or self.state_kind is not None:
                raise ValueError("a tokens artifact has no layer or state_kind")
            if self.dtype != TOKEN_DTYPE or len(self.shape) != 1:
                raise ValueError(f"a tokens artifact holds {TOKEN_DTYPE}[R], not {self.dtype}{self.shape}")
        else:
            if self.layer is None or self.layer < 0 or self.state_kind is None:
                raise ValueError("a states artifact needs a layer >= 0 and a state_kind")
            validate_name("state kind", self.state_kind)
            if self.dtype not in ROW_DTYPES or len(self.shape) != 2:
                raise ValueError(f"a states artifact holds rows [R, dim] of {ROW_DTYPES}, not {self.dtype}{self.shape}")
        if any(n < 1 for n in self.shape):
            raise ValueError(f"shape {self.shape} has an empty dimension")
        expected = artifact_id(self.split, self.source, self.part, self.layer, self.state_kind)
        if self.artifact_id != expected:
            raise ValueError(f"artifact_id {self.artifact_id!r} does not match its identity {expected!r}")
        return self

    def metadata(self) -> dict[str, str]:
        """The identity the artifact's safetensors ``__metadata__`` repeats."""
        meta = {
            "format": "trainvault.representation-artifact",
            "version": "1",
            "artifact_id": self.artifact_id,
            "kind": self.kind,
            "split": self.split,
            "source": self.source,
            "part": self.part,
        }
        if self.kind == "states":
            meta.update(layer=str(self.layer), state_kind=str(self.state_kind))
        return meta


class ArtifactManifest(Document):
    """Every artifact of the publication, sorted by artifact_id."""

    KIND = "trainvault.representation-artifacts"

    format: Literal["trainvault.representation-artifacts"] = "trainvault.representation-artifacts"
    version: Literal[1] = 1
    artifacts: list[ArtifactEntry] = Field(min_length=1)

    @field_validator("artifacts")
    @classmethod
    def _sorted(cls, value: list[ArtifactEntry]) -> list[ArtifactEntry]:
        ids = [a.artifact_id for a in value]
        if ids != sorted(set(ids)):
            raise ValueError("artifacts must be sorted by artifact_id with no id repeated")
        return value

    def lookup(self) -> dict[str, ArtifactEntry]:
        return {a.artifact_id: a for a in self.artifacts}
