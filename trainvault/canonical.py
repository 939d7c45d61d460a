"""Canonical JSON and SHA-256 digests: the bytes that get hashed and published; the one
strict JSON parser every document goes through."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from trainvault.errors import ManifestError


def canonical_json(value: Any) -> bytes:
    """Serialise to canonical JSON: sorted keys, UTF-8, no insignificant whitespace.

    NaN and infinities are refused: they have no JSON spelling and would make two
    equal documents hash differently across tools. A value nested past Python's recursion
    limit raises `ManifestError`.
    """
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise _too_deep("value to serialise") from None
    return text.encode("utf-8")


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    """Hex SHA-256 of a byte buffer."""
    return hashlib.sha256(data).hexdigest()


#: What every sha256 field accepts: 64 lowercase hex characters.
SHA256_PATTERN = r"^[0-9a-f]{64}$"


def is_sha256_hex(value: str) -> bool:
    """True for a 64-character lowercase hex digest."""
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)


#: How deep JSON arrays and objects may nest in a document: trainvault's own nest a few levels,
#: and deeper values would exhaust Python's recursion in the parser, the models or the encoder.
MAX_JSON_DEPTH = 128


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # the common case costs one length check
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def loads_strict(data: bytes | bytearray | str, *, source: str, walk: bool = True) -> Any:
    """`json.loads` that refuses, with `ManifestError` naming `source`: a key repeated within one
    object (parsers disagree on which value wins, so such bytes do not mean one document), and
    arrays or objects nested deeper than `MAX_JSON_DEPTH`. Invalid JSON raises json's own
    `ValueError` for the caller to word (catch `ManifestError` first: it is a `ValueError` too).
    `walk=False` leaves the depth check (past what the parser's recursion refuses) to a caller
    that knows which parts of the value its schema bounds (see `check_depth`)."""
    try:
        value = json.loads(data, object_pairs_hook=_unique_keys)
    except _DuplicateKey as dup:
        raise ManifestError(
            f"{source}: key {dup.key!r} appears more than once in one JSON object; trainvault refuses duplicate "
            "keys (parsers disagree on which value wins): write the document with each key once"
        ) from None
    except RecursionError:
        raise _too_deep(source) from None
    if walk and _brackets(data) > MAX_JSON_DEPTH and _depth(value) > MAX_JSON_DEPTH:
        raise _too_deep(source)
    return value


def check_depth(value: Any, source: str, above: int = 0) -> None:
    """Raise `ManifestError` naming `source` when `value`, sitting `above` levels deep in its
    document, nests arrays and objects past `MAX_JSON_DEPTH`."""
    if above + _depth(value) > MAX_JSON_DEPTH:
        raise _too_deep(source)


def _too_deep(source: str) -> ManifestError:
    return ManifestError(
        f"{source}: JSON arrays and objects nest deeper than {MAX_JSON_DEPTH} levels; no trainvault document "
        "does: the object is damaged or hostile, do not use it"
    )


def _brackets(data: bytes | bytearray | str) -> int:
    """Opening brackets in `data`: a bound on its depth that needs no walk (strings counted too)."""
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed value (iterative: no recursion to exhaust)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest
