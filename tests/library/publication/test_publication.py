"""The spine's core pieces on real stores: ObjectRef, storage_of, and Publication (a manifest
read once, pinned, parsed and resolved by the one rule)."""

from __future__ import annotations

import json
import uuid
from functools import partial
from typing import Any

import pytest
from pydantic import ValidationError

from trainvault import IntegrityError, ManifestError, TrainVault
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import SelectionError
from trainvault.publication.pinned import Publication
from trainvault.refs import ObjectRef
from trainvault.storage import Storage
from trainvault.storage.store import storage_of


def test_object_ref_serialises_without_an_unknown_size() -> None:
    ref = ObjectRef(uri="memory://x/a.json", sha256="a" * 64)
    assert ref.model_dump(mode="json") == {"uri": "memory://x/a.json", "sha256": "a" * 64}
    sized = ObjectRef(uri="memory://x/a.json", sha256="a" * 64, size=3)
    assert sized.model_dump(mode="json")["size"] == 3
    for bad in ({"sha256": "A" * 64}, {"sha256": "a" * 63}, {"size": -1}, {"extra": 1}, {"uri": ""}):
        with pytest.raises(ValidationError):
            ObjectRef(**{"uri": "memory://x/a.json", "sha256": "a" * 64, **bad})


def test_a_reference_without_a_size_serialises_without_one() -> None:
    ref = ObjectRef(uri="memory://x/a.json", sha256="b" * 64)
    assert canonical_json(ref.model_dump(mode="json")) == b'{"sha256":"' + b"b" * 64 + b'","uri":"memory://x/a.json"}'
    with pytest.raises(ValidationError):
        ObjectRef(uri="memory://x/a.json", sha256="b" * 64, size=-1)


def test_storage_of_takes_a_vault_or_a_storage() -> None:
    vault = TrainVault()
    assert storage_of(vault) is vault.storage
    assert storage_of(vault.storage) is vault.storage
    with pytest.raises(TypeError, match="TrainVault or a Storage"):
        storage_of("memory://x")


def _publish(vault: TrainVault, root: str) -> str:
    saver = vault.dataset_saver(f"{root}/data-manifest-v1.json")
    saver.save("train", None, [{"id": i} for i in range(10)], shard_id="s0")
    saver.save("valid", None, [{"id": i} for i in range(3)], shard_id="s0")
    return saver.commit_manifest().document


def test_publication_reads_the_manifest_once_and_resolves_every_uri() -> None:
    vault = TrainVault()
    root = f"memory://{uuid.uuid4().hex}/ds"
    _publish(vault, root)
    uri = f"{root}/data-manifest-v1.json"
    raw = vault.storage.get(uri)
    pub = Publication.load(vault.storage, uri, sha256=sha256_hex(raw))
    assert (pub.uri, pub.sha256, pub.raw) == (uri, sha256_hex(raw), raw)
    assert all(e.uri.startswith(root + "/") and e.descriptor_uri.startswith(root + "/") for _, e in pub.entries())
    assert pub.manifest == vault.load_manifest(uri)
    assert not pub.descriptors
    attached = pub.with_descriptors({e.descriptor_uri: vault.storage.get(e.descriptor_uri) for _, e in pub.entries()})
    entry = attached.split("train").shards[0]
    assert attached.descriptor(entry).record_count == 10
    with pytest.raises(SelectionError, match="published splits: train, valid"):
        pub.split("nope")
    with pytest.raises(IntegrityError, match="expected"):
        Publication.load(vault.storage, uri, sha256="0" * 64)
    with pytest.raises(IntegrityError):
        pub.with_descriptors({e.descriptor_uri: b"{}" for _, e in pub.entries()})


def test_publication_within_refuses_references_leaving_the_root(tmp_path) -> None:
    vault = TrainVault()
    root = str(tmp_path / "ds")
    _publish(vault, root)
    obj = json.loads(vault.storage.get(f"{root}/data-manifest-v1.json"))
    obj["splits"]["train"]["shards"][0]["uri"] = "../elsewhere/x.msgpack.zst"
    raw = canonical_json(obj)
    with pytest.raises(ManifestError, match="escapes the root"):
        Publication.from_bytes(f"{root}/data-manifest-v1.json", raw, absolute="within")


def test_publication_storage_arguments_accept_a_bare_storage() -> None:
    storage = Storage()
    root = f"memory://{uuid.uuid4().hex}/ds"
    _publish(TrainVault(), root)
    assert Publication.load(storage, f"{root}/data-manifest-v1.json").split("valid").record_count == 3


#: References a manifest may hold: the saver's spellings (answered without a parse) and others.
REFERENCES = [
    "s3://bucket/ds/shards/train/_/0.msgpack.zst",
    "memory://store/ds/shards/a/b.json",
    "S3://bucket/ds/x",
    "s3://bucket//ds/x",
    "s3://bucket/ds/x?y",
    "s3://bucket/ds/x#y",
    "s3://bucket/ds/a b",
    "s3://[bucket/ds/x",
    "s3:///ds/x",
    "file:///tmp/ds/x",
    "shards/train/_/0.msgpack.zst",
    "shards/./x",
    "shards/../x",
    "shards//x",
    "../x",
    "/tmp/ds/x",
    "x%2F..",
]


def outcome(fn: Any) -> Any:
    """What `fn()` returns, or the class and message of the error it raises."""
    try:
        return fn()
    except Exception as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("absolute", ["anywhere", "within", "refuse"])
@pytest.mark.parametrize("ref", REFERENCES)
def test_resolved_references_match_resolve_uri_exactly(ref: str, absolute: Any) -> None:
    from trainvault.publication.manifest import check_uri
    from trainvault.publication.pinned import _resolver
    from trainvault.uris import parse_uri, resolve_uri

    for base in ("s3://bucket/ds", "memory://store/ds/", "file:///tmp/ds"):
        where = f"the manifest in {base}, split 's' shard 'k'"
        expected = outcome(partial(resolve_uri, ref, base, absolute=absolute, where=where))
        assert outcome(partial(_resolver(base, absolute), ref, ("s", "k"))) == expected, (ref, base, absolute)
    # The manifest's own check refuses exactly what parse_uri does, with its error.
    checked, parsed = outcome(lambda: check_uri(ref)), outcome(lambda: parse_uri(ref))
    assert checked == (parsed if isinstance(parsed, tuple) else None)
