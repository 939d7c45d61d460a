"""The component ledger on storage: ``component-ledger-v1.json`` (top) and one part per shard.

The top is an authoritative approval sidecar: it binds the data manifest, names the split
and the token dtype, and binds each shard's part by sha256 in shard order. A part lists,
per record of its shard, the record's frames (one per component piece, record
coordinates) and the ranges to train on (component coordinates), each range with the
sha256 of exactly the tokens the materializer emits for it.

Layout, beside the data manifest::

    <root>/component-ledger/<split>/component-ledger-v1.json
    <root>/component-ledger/<split>/<stage or _>/<shard_id>.json     part URIs are relative to the top's folder
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, Literal

from pydantic import Field, field_validator

from trainvault.documents import Document, StrictModel
from trainvault.publication.manifest import validate_name
from trainvault.refs import Sha256
from trainvault.uris import join_uri, normalize_uri, parent_uri

LEDGER_NAME = "component-ledger-v1.json"
LEDGER_FOLDER = "component-ledger"
#: v1 ledgers declare int32 tokens (``input_ids`` as stored and emitted).
TOKEN_DTYPE: Final = "int32"


class LedgerRange(StrictModel):
    """One range to train on: `length` tokens from `component_offset` of its frame's component."""

    range_id: str = Field(min_length=1)
    component_offset: int = Field(ge=0)
    length: int = Field(ge=1)
    sha256: Sha256


class LedgerFrame(StrictModel):
    """A component's piece in a record: record tokens ``[start, end)`` are component tokens
    ``[component_start, component_start + end - start)``."""

    component_id: str = Field(min_length=1)
    start: int = Field(ge=0)
    end: int = Field(ge=1)
    component_start: int = Field(ge=0)
    ranges: list[LedgerRange]


class LedgerRecord(StrictModel):
    record_index: int = Field(ge=0)
    packed_record_id: str = Field(min_length=1)
    token_count: int = Field(ge=0)
    frames: list[LedgerFrame]


class ComponentLedgerPart(Document):
    """component-ledger-part-v1: the frames and ranges of one shard's records."""

    KIND = "trainvault.component-ledger-part"

    format: Literal["trainvault.component-ledger-part"] = "trainvault.component-ledger-part"
    version: Literal[1] = 1
    split: str
    shard_key: str
    records: list[LedgerRecord]

    def range_count(self) -> int:
        return sum(len(f.ranges) for r in self.records for f in r.frames)


class LedgerPartRef(StrictModel):
    shard_key: str
    uri: str = Field(min_length=1)
    sha256: Sha256
    record_count: int = Field(ge=0)
    range_count: int = Field(ge=0)


class ComponentLedger(Document):
    """component-ledger-v1: one split's ledger, bound to its data manifest; parts in shard order."""

    KIND = "trainvault.component-ledger"

    format: Literal["trainvault.component-ledger"] = "trainvault.component-ledger"
    version: Literal[1] = 1
    data_manifest_sha256: Sha256
    split: str
    token_dtype: Literal["int32"] = TOKEN_DTYPE
    parts: list[LedgerPartRef]

    @field_validator("split")
    @classmethod
    def _split(cls, value: str) -> str:
        return validate_name("split", value)


def ledger_uri(manifest_uri: str, split: str) -> str:
    """Where `split`'s ledger top lives for the manifest at `manifest_uri`."""
    validate_name("split", split)
    return join_uri(parent_uri(normalize_uri(manifest_uri)), LEDGER_FOLDER, split, LEDGER_NAME)


def part_relative_uri(shard_key: str) -> str:
    """A part's URI relative to the top's folder: ``<stage or _>/<shard_id>.json``."""
    return f"{shard_key}.json"


def ledger_sidecar_name(split: str) -> str:
    """The name a split's ledger has among an approval request's sidecars."""
    return f"{validate_name('split', split)}_component_ledger"


def range_id(packed_record_id: str, component_id: str, component_offset: int) -> str:
    """``<record>:<component>:<offset>``."""
    return f"{packed_record_id}:{component_id}:{component_offset}"


def token_digest(tokens: Any) -> str:
    """sha256 of int32 tokens as little-endian bytes (the digest a range binds)."""
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(tokens, dtype="<i4").data).hexdigest()


__all__ = [
    "LEDGER_NAME",
    "TOKEN_DTYPE",
    "ComponentLedger",
    "ComponentLedgerPart",
    "LedgerFrame",
    "LedgerPartRef",
    "LedgerRange",
    "LedgerRecord",
    "ledger_sidecar_name",
    "ledger_uri",
    "part_relative_uri",
    "range_id",
    "token_digest",
]
