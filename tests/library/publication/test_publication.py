"""The spine's core pieces on real stores: ObjectRef, storage_of, and Publication (a manifest
read once, pinned, parsed and resolved by the one rule)."""

from __future__ import annotations

import json
import uuid

import pytest
from pydantic import ValidationError

from trainvault import IntegrityError, ManifestError, Storage, TrainVault
from trainvault.approval import ArtifactRef
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import SelectionError
from trainvault.publication.pinned import Publication
from trainvault.refs import ObjectRef
from trainvault.storage import storage_of


def test_object_ref_serialises_without_an_unknown_size() -> None:
    ref = ObjectRef(uri="memory://x/a.json", sha256="a" * 64)
    assert ref.model_dump(mode="json") == {"uri": "memory://x/a.json", "sha256": "a" * 64}
    sized = ObjectRef(uri="memory://x/a.json", sha256="a" * 64, size=3)
    assert sized.model_dump(mode="json")["size"] == 3
    for bad in ({"sha256": "A" * 64}, {"sha256": "a" * 63}, {"size": -1}, {"extra": 1}, {"uri": ""}):
        with pytest.raises(ValidationError):
            ObjectRef(**{"uri": "memory://x/a.json", "sha256": "a" * 64, **bad})


def test_artifact_ref_is_an_object_ref_without_size() -> None:
    ref = ArtifactRef(uri="memory://x/a.json", sha256="b" * 64)
    assert isinstance(ref, ObjectRef)
    assert canonical_json(ref.model_dump(mode="json")) == b'{"sha256":"' + b"b" * 64 + b'","uri":"memory://x/a.json"}'
    with pytest.raises(ValidationError):
        ArtifactRef(uri="memory://x/a.json", sha256="b" * 64, size=1)


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
    return saver.commit_manifest()


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
