"""Documents read and written by (uri, sha256): the unit a report cites and a gate binds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from trainvault.canonical import is_sha256_hex, sha256_hex
from trainvault.documents import Document
from trainvault.errors import IntegrityError, ManifestError
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri

D = TypeVar("D", bound=Document)


@dataclass(frozen=True)
class Bound(Referenced, Generic[D]):
    """A document together with the reference (uri, sha256 of its stored bytes) it was read
    from or written to."""

    document: D


def write_document(storage: StorageSource, uri: str, document: D) -> Bound[D]:
    """Write `document` as canonical JSON at `uri`, create-only; same bytes again is a no-op."""
    storage = storage_of(storage)
    uri = normalize_uri(uri)
    data = document.to_json_bytes()
    storage.put_create(uri, data)
    return Bound(ObjectRef(uri=uri, sha256=sha256_hex(data), size=len(data)), document)


def read_document(storage: StorageSource, cls: type[D], uri: str, *, sha256: str | None = None) -> Bound[D]:
    """Read and parse a document; with `sha256`, refuse bytes that do not match it.

    The digest is of the bytes as stored, never of a re-serialisation.
    """
    storage = storage_of(storage)
    uri = normalize_uri(uri)
    if sha256 is not None and not is_sha256_hex(sha256):
        raise ManifestError(f"{uri}: expected sha256 {sha256!r} is not a 64-character lowercase hex digest")
    data = storage.get_document(uri)
    digest = sha256_hex(data)
    if sha256 is not None and digest != sha256:
        raise IntegrityError(
            f"{uri}: sha256 is {digest}, expected {sha256}; the {cls.KIND} was replaced or altered: "
            "bind the document you mean to use"
        )
    return Bound(ObjectRef(uri=uri, sha256=digest, size=len(data)), cls.from_json_bytes(data, source=uri))
