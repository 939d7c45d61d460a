"""The publication's documents and layout: data manifest and completion descriptors.

```
<root>/data-manifest-v1.json                                  publication marker, written last
<root>/shards/<split>/<stage or _>/<shard_id>.<ext>           data object
<root>/shards/<split>/<stage or _>/<shard_id>.complete.json   completion descriptor
<root>/descriptor-packs/<sha256>.json                         every descriptor in one object
```

The manifest holds no timestamps: it is a pure function of the shards and the curriculum
registrations, so committing the same publication twice gives the same bytes.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from trainvault.documents import Document, StrictModel
from trainvault.errors import InvalidNameError, SelectionError
from trainvault.formats import FORMATS
from trainvault.formats.blocks import BlockRef, ByteRange
from trainvault.refs import ObjectRef, Sha256
from trainvault.uris import join_uri, parse_uri

MANIFEST_NAME = "data-manifest-v1.json"
DESCRIPTOR_SUFFIX = ".complete.json"
NO_STAGE = "_"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


def validate_name(kind: str, value: Any) -> str:
    """Check a split, stage or shard id: ``[A-Za-z0-9._-]{1,128}``, never ``.`` or ``..``."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or value in (".", ".."):
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise InvalidNameError(
            f"invalid {kind} {shown!r}: use 1-128 characters from A-Z a-z 0-9 . _ - (not '.' or '..')"
        )
    return value


def validate_stage(value: Any) -> str | None:
    if value is None:
        return None
    stage = validate_name("curriculum stage", value)
    if stage == NO_STAGE:
        raise InvalidNameError(f"curriculum stage {NO_STAGE!r} is reserved for 'no stage'; pass None instead")
    return stage


def check_uri(uri: Any) -> None:
    """`parse_uri`'s checks of a URI, without a parse for the common spellings: ``file:///``
    with no escapes, and ``s3://`` and ``memory://``, where what `parse_uri` refuses depends on
    the scheme and the store name only, so one check per store serves every shard of a manifest."""
    if not isinstance(uri, str) or "\x00" in uri:
        parse_uri(uri)
        return
    if uri.startswith("file:///") and "%" not in uri:
        return  # such a file URI names a path parse_uri accepts (its refusals need a host or a %00)
    head = _STORE_HEAD.match(uri)
    if head is None:
        parse_uri(uri)
        return
    store = head.group()
    if store not in _CHECKED_STORES:
        parse_uri(uri)  # once it parses, every URI of this store does
        if len(_CHECKED_STORES) > 1024:
            _CHECKED_STORES.clear()
        _CHECKED_STORES.add(store)


_STORE_HEAD = re.compile(r"(?:s3|memory)://[^/]*")
_CHECKED_STORES: set[str] = set()


def shard_key(curriculum_stage: str | None, shard_id: str) -> str:
    """A shard's key within its split: ``<stage or _>/<shard_id>``."""
    return f"{curriculum_stage or NO_STAGE}/{shard_id}"


def shard_data_uri(root: str, split: str, curriculum_stage: str | None, shard_id: str, data_format: str) -> str:
    ext = FORMATS[data_format].extension
    return join_uri(root, "shards", split, curriculum_stage or NO_STAGE, f"{shard_id}.{ext}")


def shard_descriptor_uri(root: str, split: str, curriculum_stage: str | None, shard_id: str) -> str:
    return join_uri(root, "shards", split, curriculum_stage or NO_STAGE, f"{shard_id}{DESCRIPTOR_SUFFIX}")


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders ``shard-2`` before ``shard-10``."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", text) if p)


class Producer(StrictModel):
    library: str
    version: str


class ShardDescriptor(Document):
    """Completion descriptor: written after the data object, proves the shard complete."""

    KIND = "trainvault.shard-descriptor"

    format: Literal["trainvault.shard-descriptor"] = "trainvault.shard-descriptor"
    version: Literal[1] = 1
    split: str
    curriculum_stage: str | None
    shard_id: str
    key: str
    data_format: str
    codec: dict[str, Any]
    size_bytes: int = Field(ge=0)
    sha256: Sha256
    record_count: int = Field(ge=0)
    blocks: list[BlockRef]
    trailer: ByteRange | None = None
    curriculum_metadata: dict[str, Any] | None = None
    producer: Producer

    @model_validator(mode="after")
    def _consistent(self) -> ShardDescriptor:
        validate_name("split", self.split)
        validate_stage(self.curriculum_stage)
        validate_name("shard id", self.shard_id)
        if self.key != shard_key(self.curriculum_stage, self.shard_id):
            raise ValueError(f"key {self.key!r} does not match stage and shard id")
        if self.data_format not in FORMATS:
            raise ValueError(f"unknown data format {self.data_format!r}")
        expected_first = 0
        end = 0
        for i, b in enumerate(self.blocks):
            if b.first_record != expected_first:
                raise ValueError(f"block {i} starts at record {b.first_record}, expected {expected_first}")
            if b.offset < end:
                raise ValueError(f"block {i} overlaps the block before it")
            expected_first += b.record_count
            end = b.offset + b.length
        if expected_first != self.record_count:
            raise ValueError(f"blocks hold {expected_first} records, record_count says {self.record_count}")
        limit = self.trailer.offset if self.trailer else self.size_bytes
        if end > limit or (self.trailer and self.trailer.offset + self.trailer.length != self.size_bytes):
            raise ValueError("block index reaches past the end of the data object")
        return self


class ShardEntry(StrictModel):
    """One physical shard in a split: its data object and descriptor, bound by SHA-256."""

    key: str
    curriculum_stage: str | None
    shard_id: str
    uri: str
    size_bytes: int = Field(ge=0)
    sha256: Sha256
    record_count: int = Field(ge=0)
    descriptor_uri: str
    descriptor_sha256: Sha256

    @model_validator(mode="after")
    def _consistent(self) -> ShardEntry:
        stage, shard_id = self.curriculum_stage, self.shard_id
        if stage is not None:
            validate_stage(stage)
        if not _NAME.fullmatch(shard_id) or shard_id in (".", ".."):
            validate_name("shard id", shard_id)
        if self.key != f"{stage or NO_STAGE}/{shard_id}":
            raise ValueError(f"key {self.key!r} does not match stage and shard id")
        check_uri(self.uri)
        check_uri(self.descriptor_uri)
        return self


class Curriculum(StrictModel):
    """An ordered selection of a split's shards, by key."""

    shards: list[str]
    metadata: dict[str, Any] | None = None


class SplitManifest(StrictModel):
    shards: list[ShardEntry]
    curricula: dict[str, Curriculum] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> SplitManifest:
        keys = [s.key for s in self.shards]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise ValueError(f"shard {dup!r} is listed twice")
        known = set(keys)
        for name, cur in self.curricula.items():
            validate_stage(name)
            if len(set(cur.shards)) != len(cur.shards):
                raise ValueError(f"curriculum {name!r} lists a shard twice")
            missing = [k for k in cur.shards if k not in known]
            if missing:
                raise ValueError(f"curriculum {name!r} names shards not in the split: {missing[:3]}")
        return self

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.shards)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.shards)

    def shard(self, key: str) -> ShardEntry:
        for s in self.shards:
            if s.key == key:
                return s
        raise SelectionError(f"shard {key!r} is not in this split; a key is STAGE/SHARD_ID ('_' for no stage)")


class DataManifest(Document):
    """data-manifest-v1: every shard of every split, and the curricula over them."""

    KIND = "trainvault.data-manifest"

    format: Literal["trainvault.data-manifest"] = "trainvault.data-manifest"
    version: Literal[1] = 1
    data_format: str
    splits: dict[str, SplitManifest]
    #: Every shard's descriptor in one object, in manifest order (`trainvault.publication.pack`);
    #: None in a manifest written before packs existed, whose descriptors are read one by one.
    descriptor_pack: ObjectRef | None = None

    def open_values(self) -> list[tuple[int, Any]]:
        # Only curriculum metadata nests freely: manifest > splits > split > curricula > curriculum.
        return [(5, c.metadata) for split in self.splits.values() for c in split.curricula.values()]

    @model_serializer(mode="wrap")
    def _omit_missing_pack(self, handler: Any) -> dict[str, Any]:
        # A manifest without a pack keeps the bytes (and sha256) it was published with.
        out: dict[str, Any] = handler(self)
        if out.get("descriptor_pack") is None:
            out.pop("descriptor_pack", None)
        return out

    @field_validator("descriptor_pack")
    @classmethod
    def _pack_sized(cls, value: ObjectRef | None) -> ObjectRef | None:
        if value is not None and value.size is None:
            raise ValueError("descriptor_pack must bind the pack's size")
        return value

    @field_validator("data_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in FORMATS:
            raise ValueError(f"unknown data format {value!r}; known: {', '.join(FORMATS)}")
        return value

    @field_validator("splits")
    @classmethod
    def _split_names(cls, value: dict[str, SplitManifest]) -> dict[str, SplitManifest]:
        for name in value:
            validate_name("split", name)
        return value

    def split(self, name: str) -> SplitManifest:
        """The split named `name`, or `SelectionError` listing the published splits."""
        try:
            return self.splits[name]
        except KeyError:
            raise SelectionError(
                f"split {name!r} is not in this manifest; published splits: {', '.join(sorted(self.splits)) or '(none)'}"
            ) from None

    def summary(self) -> dict[str, Any]:
        """Counts per split and stage, for people and for UIs."""
        out: dict[str, Any] = {"data_format": self.data_format, "sha256": self.document_sha256(), "splits": {}}
        for name, split in self.splits.items():
            stages: dict[str, dict[str, int]] = {}
            for s in split.shards:
                st = stages.setdefault(s.curriculum_stage or NO_STAGE, {"shards": 0, "records": 0, "bytes": 0})
                st["shards"] += 1
                st["records"] += s.record_count
                st["bytes"] += s.size_bytes
            out["splits"][name] = {
                "shards": len(split.shards),
                "records": split.record_count,
                "bytes": split.size_bytes,
                "stages": stages,
                "curricula": {k: len(v.shards) for k, v in split.curricula.items()},
            }
        return out
