"""The one rule for references that would leave a document's root (trainvault.uris.resolve_uri), and
the resolver with fast paths (`uri_resolver`) that must answer every reference as it does."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainvault.errors import ManifestError
from trainvault.uris import resolve_uri, uri_resolver

ROOT = "memory://bucket/root"


def by_rule(ref: str, root: str, absolute: str) -> str:
    return resolve_uri(ref, root, absolute=absolute, where="doc.json")  # type: ignore[arg-type]


def by_resolver(ref: str, root: str, absolute: str) -> str:
    return uri_resolver(root, absolute=absolute)(ref, lambda: "doc.json")  # type: ignore[arg-type]


RESOLVERS = pytest.mark.parametrize("resolve", [by_rule, by_resolver])


@pytest.mark.parametrize(
    ("ref", "absolute", "expected"),
    [
        ("shards/a.bin", "refuse", "memory://bucket/root/shards/a.bin"),
        ("shards/a.bin", "within", "memory://bucket/root/shards/a.bin"),
        ("shards/a.bin", "anywhere", "memory://bucket/root/shards/a.bin"),
        ("memory://bucket/root/s/a", "within", "memory://bucket/root/s/a"),
        ("s3://other/elsewhere/a", "anywhere", "s3://other/elsewhere/a"),
        ("memory://bucket/root/a%2Fb", "within", "memory://bucket/root/a%2Fb"),
    ],
)
@RESOLVERS
def test_references_that_stay_resolve(resolve: Callable[..., str], ref: str, absolute: str, expected: str) -> None:
    assert resolve(ref, ROOT, absolute) == expected


@pytest.mark.parametrize(
    ("ref", "absolute", "expected"),
    [
        ("file:///data/root/shards/a.bin", "within", "file:///data/root/shards/a.bin"),
        ("/data/root/shards/a.bin", "within", "file:///data/root/shards/a.bin"),
        ("shards/a.bin", "within", "file:///data/root/shards/a.bin"),
        ("file:///data/root/a%20b", "within", "file:///data/root/a b"),
        ("file:///elsewhere/a", "anywhere", "file:///elsewhere/a"),
    ],
)
@RESOLVERS
def test_local_references_resolve_to_their_canonical_uri(
    resolve: Callable[..., str], ref: str, absolute: str, expected: str
) -> None:
    assert resolve(ref, "/data/root", absolute) == expected


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
        ("memory://bucket/root/./a", "within"),
    ],
)
@RESOLVERS
def test_references_that_would_leave_are_refused_naming_the_document(
    resolve: Callable[..., str], ref: str, absolute: str
) -> None:
    with pytest.raises(ManifestError, match=r"^doc\.json: "):
        resolve(ref, ROOT, absolute)


@pytest.mark.parametrize("ref", ["file:///data/rootx/a", "file:///data/root/../x", "file:///data/other"])
@RESOLVERS
def test_local_references_that_would_leave_are_refused(resolve: Callable[..., str], ref: str) -> None:
    with pytest.raises(ManifestError, match=r"^doc\.json: "):
        resolve(ref, "/data/root", "within")
