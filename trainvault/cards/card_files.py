"""A Croissant card's files held against the digests the card states: the check, and the card step's reuse.

A Croissant reader does not protect a card's readers from its files: mlcroissant reads a split's
records through the card's file set (``includes``, local paths read as they are), so a shard or
clean copy swapped on storage after the card was written reaches it unchecked. `check_card`
hashes every ``cr:FileObject`` the card lists (its ``contentUrl`` resolved against the card's
folder) against the card's ``sha256`` and ``contentSize`` (``trainvault croissant-check``);
`reuse_croissant` checks a card's clean copies before the card already there is reused, and
writes a copy that differs again (named by its content, so the right bytes are known).
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass, replace
from typing import Any

from trainvault.approval.approved import ApprovedDataset
from trainvault.approval.hashing import hash_objects
from trainvault.canonical import loads_strict, sha256_hex
from trainvault.cards.approved_view import VIEW_FOLDER, view_shards
from trainvault.cards.croissant import WrittenCard, write_croissant
from trainvault.errors import IntegrityError, ManifestError, ObjectNotFoundError
from trainvault.refs import ObjectRef
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri, parent_uri, parse_uri

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CardFile:
    """One file object of a card: what the card states, and what storage holds (None: missing)."""

    node_id: str
    uri: str
    sha256: str
    size: int | None
    found_sha256: str | None
    found_size: int | None

    @property
    def ok(self) -> bool:
        return self.found_sha256 == self.sha256 and (self.size is None or self.found_size == self.size)

    def problem(self) -> str:
        if self.found_sha256 is None:
            return f"{self.node_id} {self.uri} is missing"
        return (
            f"{self.node_id} {self.uri} is {self.found_size} bytes with sha256 {self.found_sha256}, the card states "
            f"{self.size} bytes with sha256 {self.sha256}"
        )


def check_card(storage: StorageSource, card_uri: str, *, copies_only: bool = False) -> list[CardFile]:
    """Every file object of the card at `card_uri` (`copies_only`: its clean copies under
    ``approved-view/``), hashed; `ManifestError` for a card that is not one."""
    store = storage_of(storage)
    uri = normalize_uri(card_uri)
    card = loads_strict(store.get_document(uri), source=uri)
    nodes = card.get("distribution") if isinstance(card, dict) else None
    if not isinstance(nodes, list):
        raise ManifestError(f"{uri} is not a Croissant card (no distribution list); pass the card's URI")
    folder = parent_uri(uri)
    copies = _resolve(VIEW_FOLDER, folder) + "/"
    out = []
    for node in nodes:
        if isinstance(node, dict) and node.get("@type") == "cr:FileObject":
            url = node.get("contentUrl")
            if not copies_only or (isinstance(url, str) and _resolve(url, folder).startswith(copies)):
                out.append(_checked(store, uri, folder, node))
    return out


def _checked(storage: Any, card_uri: str, folder: str, node: dict[str, Any]) -> CardFile:
    url, sha256, node_id = node.get("contentUrl"), node.get("sha256"), str(node.get("@id"))
    if not isinstance(url, str) or not isinstance(sha256, str):
        raise ManifestError(f"{card_uri}: file object {node_id} states no contentUrl or sha256")
    size = _stated_size(node.get("contentSize"))
    uri = _resolve(url, folder)
    try:
        got = hash_objects(storage, [uri])[uri]
    except ObjectNotFoundError:
        return CardFile(node_id, uri, sha256, size, None, None)
    return CardFile(node_id, uri, sha256, size, got.sha256, got.size)


def _stated_size(value: Any) -> int | None:
    """``"<n> B"`` as the card states it, else None (not checked)."""
    if isinstance(value, str) and value.endswith(" B") and value[:-2].isdigit():
        return int(value[:-2])
    return None


def _resolve(url: str, folder: str) -> str:
    """`url` as the card means it: absolute, or relative to the card's folder (``..`` allowed)."""
    if "://" in url or url.startswith("/"):
        return normalize_uri(url)
    base = parse_uri(folder)
    return replace(base, path=posixpath.normpath(posixpath.join("/" + base.path, url)).lstrip("/")).uri


def reuse_croissant(
    storage: StorageSource, approved: ApprovedDataset, uri: str, **about: Any
) -> tuple[WrittenCard, bool]:
    """The card at `uri` once each clean copy it lists matches its digest (a copy that differs is
    rewritten from the approval: its name is its content's digest), else written
    (`write_croissant`): (card, whether anything was written). The published shards it lists are
    not re-read: the approval binds them and every trainvault read checks them."""
    store = storage_of(storage)
    uri = normalize_uri(uri)
    try:
        bad = [f for f in check_card(store, uri, copies_only=True) if not f.ok]
    except ObjectNotFoundError:
        return write_croissant(store, approved, uri, **about), True
    for f in bad:
        log.warning("Croissant card %s: %s; writing the clean copy again", uri, f.problem())
    for split in approved.manifest.splits if bad else ():
        view_shards(store, approved, split, parent_uri(uri), repair=True)
    still = [f.problem() for f in check_card(store, uri, copies_only=True) if not f.ok] if bad else []
    if still:
        raise IntegrityError(
            f"the Croissant card {uri} lists clean copies the approval does not make again ({'; '.join(still)}): "
            "it is not this approval's card; write a new one (write_croissant with another uri)"
        )
    data = store.get_document(uri)
    return WrittenCard(ObjectRef(uri=uri, sha256=sha256_hex(data), size=len(data))), bool(bad)
