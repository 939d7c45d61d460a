"""Canonical JSON and SHA-256 digests: the bytes that get hashed and published."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Serialise to canonical JSON: sorted keys, UTF-8, no insignificant whitespace.

    NaN and infinities are refused: they have no JSON spelling and would make two
    equal documents hash differently across tools.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes | bytearray | memoryview) -> str:
    """Hex SHA-256 of a byte buffer."""
    return hashlib.sha256(data).hexdigest()


def is_sha256_hex(value: str) -> bool:
    """True for a 64-character lowercase hex digest."""
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)
