"""Storage URIs, and the one rule for references that would leave a publication's root.

A URI's scheme picks the store: ``s3://bucket/key``, ``file:///abs/path`` or a plain path
(local), ``memory://name/key``. Documents refer to objects by absolute URI or by a path
relative to their folder; `resolve_uri` is the only place that decides which of those may
point outside that folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal
from urllib.parse import unquote, urlsplit

from trainvault.errors import ManifestError, StorageError

#: What an absolute reference may name: anywhere (a manifest copy reads the original
#: shards), only objects under the root (what an approval binds), or nothing (documents
#: whose parts always sit beside them).
Absolute = Literal["anywhere", "within", "refuse"]


@dataclass(frozen=True)
class Location:
    """A parsed URI: which store, and the path inside it."""

    scheme: str  # "s3" | "file" | "memory"
    bucket: str  # bucket, memory store name, or "" for local
    path: str  # key inside the store, no leading slash

    @property
    def uri(self) -> str:
        if self.scheme == "file":
            return "file:///" + self.path
        return f"{self.scheme}://{self.bucket}/{self.path}"


def parse_uri(uri: str) -> Location:
    """Parse a storage URI or plain local path; relative paths become absolute."""
    # No store holds a name with a NUL byte (a path cannot, and the OS refuses it with a ValueError).
    if not isinstance(uri, str) or not uri or "\x00" in uri:
        raise StorageError(f"not a storage URI: {uri!r}; use s3://bucket/key, file:///path or memory://name/key")
    if "://" not in uri:
        return Location("file", "", os.path.abspath(uri).lstrip("/"))
    try:
        parts = urlsplit(uri)
    except ValueError:  # an unbalanced "[" reads as a broken IPv6 host
        raise StorageError(
            f"{uri}: not a storage URI; use s3://bucket/key, file:///path or memory://name/key"
        ) from None
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"{uri}: file URIs must be absolute (file:///abs/path)")
        path = os.path.normpath(unquote(parts.path))
        if "\x00" in path:
            raise StorageError(f"{uri}: a file path cannot hold a NUL byte (%00)")
        return Location("file", "", path.lstrip("/"))
    if scheme in ("s3", "memory"):
        path = parts.path.lstrip("/")
        if scheme == "s3" and not parts.netloc:
            raise StorageError(f"{uri}: an s3 URI needs a bucket (s3://bucket/key)")
        return Location(scheme, parts.netloc, path)
    raise StorageError(f"{uri}: unsupported scheme {scheme!r}; use s3://, file:// or a local path, or memory://")


def normalize_uri(uri: str) -> str:
    """The canonical spelling of a URI (plain paths become file:///...)."""
    return parse_uri(uri).uri


def join_uri(base: str, *parts: str) -> str:
    """Join path segments onto a folder URI."""
    loc = parse_uri(base)
    segs = [p.strip("/") for p in (loc.path, *parts) if p and p.strip("/")]
    return replace(loc, path="/".join(segs)).uri


def parent_uri(uri: str) -> str:
    """The folder that holds an object."""
    loc = parse_uri(uri)
    return replace(loc, path=loc.path.rsplit("/", 1)[0] if "/" in loc.path else "").uri


def is_within(uri: str, root: str) -> bool:
    """True when `uri` names an object inside the folder `root` (same store)."""
    a, b = parse_uri(uri), parse_uri(root)
    if (a.scheme, a.bucket) != (b.scheme, b.bucket):
        return False
    prefix = b.path.rstrip("/")
    return not prefix or a.path.startswith(prefix + "/")


def _is_absolute(ref: str) -> bool:
    return "://" in ref or ref.startswith("/")


def resolve_uri(ref: str, root: str, *, absolute: Absolute, where: str) -> str:
    """The absolute URI a document at `where` means by `ref`, resolved against the folder
    `root`. A relative `ref` is plain path segments (never empty, ``.`` or ``..``) and always
    lands under `root`; an absolute one is allowed as `absolute` says. Anything else raises
    `ManifestError` naming the document, the reference and the root."""
    if not isinstance(ref, str) or not ref:
        raise ManifestError(f"{where}: {ref!r} is not a URI or relative path")
    if _is_absolute(ref):
        if absolute == "refuse":
            raise ManifestError(
                f"{where}: {ref!r} must be a path relative to {root}, not an absolute URI; keep the parts beside the document"
            )
        if absolute == "anywhere":
            return normalize_uri(ref)
        segments = ref.split("://", 1)[-1].strip("/").split("/")
    else:
        segments = ref.split("/")
    # Dot segments mean nothing to an object store but would let a key look inside the root.
    if any(seg in ("", ".", "..") for seg in segments):
        raise ManifestError(
            f"{where}: {ref!r} has empty, '.' or '..' segments (a path that escapes the root {root} is refused); "
            "name objects by plain paths under it"
        )
    resolved = normalize_uri(ref) if _is_absolute(ref) else join_uri(root, ref)
    if not is_within(resolved, root):
        raise ManifestError(
            f"{where}: {ref!r} escapes the root {root}; what a document binds must live under its root: copy it there"
        )
    return resolved


#: An absolute URI that `normalize_uri` returns unchanged (store name and key without anything
#: `urlsplit` would strip, split off or refuse), and a relative reference of plain segments.
_CANONICAL = re.compile(r"(?:s3|memory)://[A-Za-z0-9._:@-]+/[^\x00-\x20/?#\x7f][^\x00-\x20?#\x7f]*")
_PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(?:/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")


def uri_resolver(root: str, *, absolute: Absolute) -> Callable[[str, Callable[[], str]], str]:
    """`resolve_uri` against the folder `root`, as ``resolve(ref, where)`` (`where` is called only
    to name a refused reference). The spellings writers produce are answered without a parse:
    a plain relative path, a canonical absolute URI under `root` and (where `absolute` allows
    any) a canonical ``s3://`` or ``memory://`` URI; a manifest of 100,000 shards resolves
    200,000 references, and parsing each was most of a trainer's open."""
    folder = join_uri(root, "x")[:-1]  # what join_uri(root, ref) puts before a plain `ref`
    under = absolute != "refuse"

    def resolve(ref: str, where: Callable[[], str]) -> str:
        if isinstance(ref, str):
            if under and ref.startswith(folder) and _PLAIN.fullmatch(ref, len(folder)):
                return ref
            if absolute == "anywhere" and _CANONICAL.fullmatch(ref):
                return ref
            if _PLAIN.fullmatch(ref):  # no segment is empty, "." or ".."
                return folder + ref
        return resolve_uri(ref, root, absolute=absolute, where=where())

    return resolve
