"""The one rule for references that would leave a document's root (trainvault.uris.resolve_uri)."""

from __future__ import annotations

import pytest

from trainvault.errors import ManifestError
from trainvault.uris import resolve_uri

ROOT = "memory://bucket/root"


@pytest.mark.parametrize(
    ("ref", "absolute", "expected"),
    [
        ("shards/a.bin", "refuse", "memory://bucket/root/shards/a.bin"),
        ("shards/a.bin", "within", "memory://bucket/root/shards/a.bin"),
        ("shards/a.bin", "anywhere", "memory://bucket/root/shards/a.bin"),
        ("memory://bucket/root/s/a", "within", "memory://bucket/root/s/a"),
        ("s3://other/elsewhere/a", "anywhere", "s3://other/elsewhere/a"),
    ],
)
def test_references_that_stay_resolve(ref: str, absolute: str, expected: str) -> None:
    assert resolve_uri(ref, ROOT, absolute=absolute, where="doc.json") == expected


@pytest.mark.parametrize(
    ("ref", "absolute"),
    [
        ("../a", "anywhere"),  # relative paths never leave the root, whatever the mode
        ("a/../../b", "within"),
        ("./a", "within"),
        ("a//b", "refuse"),
        ("", "anywhere"),
        ("memory://bucket/other/a", "within"),
        ("memory://bucket/rootx/a", "within"),  # a sibling that shares the root's prefix
        ("memory://bucket/root/../x", "within"),
        ("memory://elsewhere/root/a", "within"),  # same path, another store
        ("memory://bucket/root/a", "refuse"),
        ("/etc/passwd", "refuse"),
    ],
)
def test_references_that_would_leave_are_refused_naming_the_document(ref: str, absolute: str) -> None:
    with pytest.raises(ManifestError, match=r"^doc\.json: "):
        resolve_uri(ref, ROOT, absolute=absolute, where="doc.json")
