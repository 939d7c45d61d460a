"""Manifest documents: strict parsing, versions, copies that still read the original data."""

from __future__ import annotations

import json

import pytest

from trainvault import ConflictError, DataManifest, ManifestError, TrainVault, iter_shard
from trainvault.publication.manifest import ShardDescriptor
from trainvault.uris import join_uri


@pytest.fixture
def published(tmp_path):
    vault = TrainVault()
    saver = vault.dataset_saver(str(tmp_path / "src" / "data-manifest-v1.json"))
    saver.save("train", "easy", [{"i": i} for i in range(10)], shard_id="0")
    saver.save("train", None, [{"i": i} for i in range(3)], shard_id="1")
    return vault, saver.commit_manifest().document, saver.manifest_uri


def mutate(doc: dict, path: list, value) -> dict:
    doc = json.loads(json.dumps(doc))
    target = doc
    for p in path[:-1]:
        target = target[p]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["version"], 2, "version 2 is not supported"),
        (["version"], "1", "must be an integer"),
        (["format"], "something-else", "field 'format'"),
        (["data_format"], "csv", "data_format"),
        (["splits", "train", "shards", 0, "sha256"], "abc", "splits.train.shards.0.sha256"),
        (["splits", "train", "shards", 0, "record_count"], "10", "record_count"),
        (["splits", "train", "shards", 0, "key"], "easy/9", "does not match"),
        (["splits", "train", "shards", 0, "shard_id"], "../x", "invalid shard id"),
        (["splits", "train", "shards", 0, "size_bytes"], KeyError, "size_bytes"),
        (["splits", "train", "curricula", "easy", "shards"], ["easy/404"], "not in the split"),
        (["splits", "train", "extra"], 1, "extra"),
    ],
)
def test_malformed_manifest_names_the_field(published, path, value, message) -> None:
    _, manifest, _ = published
    bad = mutate(manifest.model_dump(mode="json"), path, value)
    with pytest.raises(ManifestError, match=message):
        DataManifest.from_obj(bad, source="m.json")


def test_not_json_and_not_an_object(tmp_path) -> None:
    with pytest.raises(ManifestError, match="not valid JSON"):
        DataManifest.from_json_bytes(b"{trunc", source="x")
    with pytest.raises(ManifestError, match="expected a JSON object"):
        DataManifest.from_json_bytes(b"[1]", source="x")
    path = tmp_path / "m.json"
    path.write_bytes(b'{"format": "trainvault.data-manifest", "version": 7}')
    with pytest.raises(ManifestError, match="upgrade trainvault"):
        TrainVault().load_manifest(str(path))


def test_descriptor_with_inconsistent_block_index_is_refused(published) -> None:
    vault, manifest, _ = published
    raw = json.loads(vault.storage.get(manifest.splits["train"].shards[1].descriptor_uri))
    raw["record_count"] += 1
    with pytest.raises(ManifestError, match="record_count"):
        ShardDescriptor.from_obj(raw)


def test_copy_reads_the_original_data_and_is_create_only(published, tmp_path) -> None:
    vault, manifest, _ = published
    loaded = vault.load_manifest(str(tmp_path / "src" / "data-manifest-v1.json"))
    copy_uri = str(tmp_path / "new-run" / "data-manifest-v1.json")
    vault.save_manifest(copy_uri, loaded)
    vault.save_manifest(copy_uri, loaded)  # same copy again: no-op
    copy = vault.load_manifest(copy_uri)
    assert copy == manifest
    shard = copy.splits["train"].shard("easy/0")
    assert list(iter_shard(copy.data_format, shard)) == [{"i": i} for i in range(10)]

    # A modification (drop a shard) is a different manifest: refused at the same URI.
    edited = copy.model_copy(
        update={
            "splits": {"train": copy.splits["train"].model_copy(update={"shards": copy.splits["train"].shards[1:]})}
        }
    )
    with pytest.raises(ConflictError):
        vault.save_manifest(copy_uri, edited)
    vault.save_manifest(str(tmp_path / "other" / "data-manifest-v1.json"), edited)


def test_relative_uris_resolve_against_the_manifest_folder(published, tmp_path) -> None:
    vault, manifest, uri = published
    doc = manifest.model_dump(mode="json")
    root = uri.rsplit("/", 1)[0] + "/"
    for s in doc["splits"]["train"]["shards"]:
        s["uri"] = s["uri"][len(root) :]
        s["descriptor_uri"] = s["descriptor_uri"][len(root) :]
    rel = join_uri(root, "relative-manifest.json")
    vault.storage.put_create(rel, json.dumps(doc).encode())
    assert vault.load_manifest(rel) == manifest

    doc["splits"]["train"]["shards"][0]["uri"] = "../../etc/passwd"
    esc = join_uri(root, "escaping-manifest.json")
    vault.storage.put_create(esc, json.dumps(doc).encode())
    with pytest.raises(ManifestError, match="escapes"):
        vault.load_manifest(esc)


def test_summary_counts(published) -> None:
    _, manifest, _ = published
    s = manifest.summary()["splits"]["train"]
    assert s["records"] == 13 and s["shards"] == 2
    assert s["stages"]["easy"]["records"] == 10 and s["stages"]["_"]["records"] == 3
