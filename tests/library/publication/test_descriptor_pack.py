"""The descriptor pack: a publication opens with O(1) requests, whatever its shard count, and a
missing, truncated, altered or mismatched pack is refused with a typed error naming it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ConflictError, IntegrityError, ManifestError, ObjectNotFoundError, TrainVault
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.loading import LoaderPlan, SplitLoaderFactory
from trainvault.publication.pack import PackedDescriptors, build_pack, descriptor_bytes, pack_uri
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import parse_descriptor
from trainvault.refs import ObjectRef
from trainvault.storage import Storage
from trainvault.uris import join_uri, normalize_uri

pytest.importorskip("torch")


class CountingStorage(Storage):
    """A real Storage that counts every request it makes, by operation and URI."""

    def __init__(self, config: Any = None):
        super().__init__(config)
        self.calls: Counter[tuple[str, str]] = Counter()

    def _count(self, op: str, uri: str) -> None:
        self.calls[(op, normalize_uri(uri))] += 1

    def get(self, uri: str, **kwargs: Any) -> bytes:
        self._count("get", uri)
        return super().get(uri, **kwargs)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        self._count("get_range", uri)
        return super().get_range(uri, start, end)

    def stream(self, uri: str, **kwargs: Any) -> Any:
        self._count("stream", uri)
        return super().stream(uri, **kwargs)

    def head(self, uri: str) -> Any:
        self._count("head", uri)
        return super().head(uri)

    def list(self, prefix_uri: str) -> Any:
        self._count("list", prefix_uri)
        return super().list(prefix_uri)

    def put(self, uri: str, data: bytes) -> Any:
        self._count("put", uri)
        return super().put(uri, data)

    def put_create(self, uri: str, data: Any) -> bool:
        self._count("put_create", uri)
        return super().put_create(uri, data)

    def total(self) -> int:
        return sum(self.calls.values())


@pytest.fixture
def publish(unpacked_manifest: Callable[[Any], bytes]) -> Callable[..., str]:
    def make(vault: TrainVault, root: str, shards: int, *, packed: bool = True) -> str:
        uri = join_uri(root, "data-manifest-v1.json")
        saver = vault.dataset_saver(uri)
        for i in range(shards):
            saver.save("train", None, [{"i": i, "j": j} for j in range(3)], shard_id=str(i))
        if packed:
            saver.commit_manifest()
        else:
            vault.storage.put_create(uri, unpacked_manifest(saver))
        return uri

    return make


def open_loader(storage: Storage, uri: str) -> list[Any]:
    loader = SplitLoaderFactory(storage, uri, LoaderPlan.create(collate_fn=list, dataloader_args={"batch_size": 4}))
    return loader.load("train")


@pytest.mark.parametrize("shards", [3, 300])
def test_loader_opens_with_two_requests_whatever_the_shard_count(
    publish: Callable[..., str], tmp_path: Path, shards: int
) -> None:
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), shards)
    pack = vault.load_manifest(uri).descriptor_pack
    assert pack is not None
    storage = CountingStorage()
    dataloader = open_loader(storage, uri)
    # The manifest and the pack, one GET each: nothing per shard.
    assert storage.calls == Counter({("get", normalize_uri(uri)): 1, ("get", pack.uri): 1})
    first = next(iter(dataloader))
    assert first == [{"i": 0, "j": 0}, {"i": 0, "j": 1}, {"i": 0, "j": 2}, {"i": 1, "j": 0}]


def test_manifest_without_a_pack_still_loads_reading_each_descriptor(
    publish: Callable[..., str], tmp_path: Path
) -> None:
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), 5, packed=False)
    manifest = vault.load_manifest(uri)
    assert manifest.descriptor_pack is None and b"descriptor_pack" not in vault.storage.get(uri)
    storage = CountingStorage()
    records = [r for batch in open_loader(storage, uri) for r in batch]
    assert records == [{"i": i, "j": j} for i in range(5) for j in range(3)]
    descriptor_reads = [u for (op, u) in storage.calls if op == "get" and u.endswith(".complete.json")]
    assert len(descriptor_reads) == 5


def test_commit_reads_no_descriptor_its_saver_holds(tmp_path: Path) -> None:
    root = normalize_uri(str(tmp_path / "ds"))
    uri = join_uri(root, "data-manifest-v1.json")
    storage = CountingStorage()
    vault = TrainVault()
    vault.storage = storage
    saver = vault.dataset_saver(uri)
    for i in range(4):
        saver.save("train", None, [{"i": i}], shard_id=str(i))
    storage.calls.clear()
    manifest = saver.commit_manifest().document
    assert manifest.descriptor_pack is not None
    # One listing, the pack and the manifest: no descriptor is read again.
    expected = [("list", join_uri(root, "shards")), ("put_create", manifest.descriptor_pack.uri), ("put_create", uri)]
    assert sorted(storage.calls) == sorted(expected)
    # A fresh saver (another process's) reads each descriptor once, and commits the same bytes.
    storage.calls.clear()
    again = TrainVault().dataset_saver(uri)
    again.storage = storage
    assert again.commit_manifest().document == manifest
    assert sum(n for (op, u), n in storage.calls.items() if op == "get" and u.endswith(".complete.json")) == 4


def test_pack_is_canonical_deterministic_and_bound(publish: Callable[..., str], tmp_path: Path) -> None:
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), 3)
    manifest = vault.load_manifest(uri)
    ref = manifest.descriptor_pack
    assert ref is not None
    raw = vault.storage.get(ref.uri)
    assert (sha256_hex(raw), len(raw)) == (ref.sha256, ref.size)
    doc = json.loads(raw)
    assert canonical_json(doc) == raw
    assert (doc["format"], doc["version"], doc["data_format"]) == ("trainvault.descriptor-pack", 2, "msgpack.zst")
    # Columnar: what the manifest does not hold, once per shard or block; shared fields once.
    assert (doc["shards"]["blocks"], doc["shards"]["shared"], len(doc["shared"])) == ([1, 1, 1], [0, 0, 0], 1)
    entries = manifest.splits["train"].shards
    stored = [(e.descriptor_uri, vault.storage.get(e.descriptor_uri)) for e in entries]
    # Each descriptor is rebuilt from the manifest and the pack exactly as it was stored.
    attached = Publication.load(vault.storage, uri).read_pack(vault.storage)
    assert isinstance(attached.descriptors, PackedDescriptors)
    assert [canonical_json(attached.descriptors.document(i)) for i in range(3)] == [b for _, b in stored]
    assert [attached.descriptor(e).to_json_bytes() for _, e in attached.entries()] == [b for _, b in stored]
    # The same descriptors give the same pack bytes.
    assert (
        build_pack("msgpack.zst", [(u, parse_descriptor(e, b), b) for e, (u, b) in zip(entries, stored, strict=False)])
        == raw
    )


def test_recommitting_other_shards_conflicts_on_the_manifest_not_the_pack(
    publish: Callable[..., str], tmp_path: Path
) -> None:
    vault = TrainVault()
    root = str(tmp_path / "ds")
    uri = publish(vault, root, 2)
    saver = vault.dataset_saver(uri)
    saver.save("train", None, [{"i": 9}], shard_id="9")
    with pytest.raises(ConflictError, match="already holds a different publication"):
        saver.commit_manifest()


def damage(storage: Storage, ref: ObjectRef, how: str) -> None:
    data = storage.get(ref.uri)
    if how == "delete":
        storage.delete(ref.uri)
    elif how == "truncate":
        storage.put(ref.uri, data[: len(data) // 2])
    else:
        mid = len(data) // 2
        storage.put(ref.uri, data[:mid] + bytes([data[mid] ^ 1]) + data[mid + 1 :])


@pytest.mark.parametrize(
    ("how", "error", "match"),
    [
        ("delete", ObjectNotFoundError, "is missing"),
        ("truncate", IntegrityError, "truncated"),
        ("flip", IntegrityError, "altered"),
    ],
)
def test_damaged_pack_is_refused_by_the_loader(
    publish: Callable[..., str], tmp_path: Path, how: str, error: type, match: str
) -> None:
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), 3)
    ref = vault.load_manifest(uri).descriptor_pack
    assert ref is not None
    damage(vault.storage, ref, how)
    with pytest.raises(error, match=rf"descriptor pack {ref.uri}.*{match}"):
        open_loader(Storage(), uri)


def forged(vault: TrainVault, uri: str, edit: Any) -> Publication:
    """The publication at `uri` under a new manifest that binds `edit`ed pack bytes (uri, sha256,
    size all correct): what a pack that disagrees with its own manifest looks like."""
    pub = Publication.load(vault.storage, uri)
    ref = pub.manifest.descriptor_pack
    assert ref is not None
    doc = json.loads(vault.storage.get(ref.uri))
    data = canonical_json(edit(doc))
    digest = sha256_hex(data)
    new_ref = ObjectRef(uri=pack_uri(pub.uri.rsplit("/", 1)[0], digest), sha256=digest, size=len(data))
    vault.storage.put_create(new_ref.uri, data)
    new_uri = uri.replace("data-manifest-v1.json", f"forged-{new_ref.sha256[:8]}.json")
    vault.storage.put_create(new_uri, pub.manifest.model_copy(update={"descriptor_pack": new_ref}).to_json_bytes())
    return Publication.load(vault.storage, new_uri)


def _recount(doc: dict[str, Any]) -> dict[str, Any]:
    doc["blocks"]["record_count"][1] = 2
    return doc


def _unshared(doc: dict[str, Any]) -> dict[str, Any]:
    doc["shards"]["shared"][1] = 5
    return doc


def _overlap(doc: dict[str, Any]) -> dict[str, Any]:
    doc["shards"]["blocks"][0:2] = [2, 0]
    return doc


def _drop(doc: dict[str, Any]) -> dict[str, Any]:
    for column in (*doc["shards"].values(), *doc["blocks"].values()):
        column.pop()
    return doc


def _other_format(doc: dict[str, Any]) -> dict[str, Any]:
    doc["data_format"] = "jsonl.gz"
    return doc


def _newer(doc: dict[str, Any]) -> dict[str, Any]:
    doc["version"] = 3
    return doc


@pytest.mark.parametrize(
    ("edit", "error", "match"),
    [
        (_recount, IntegrityError, r"shard _/1: its blocks hold 2 records, the manifest 3"),
        (_unshared, ManifestError, r"names shared fields it does not hold"),
        (_overlap, IntegrityError, r"shard _/0: block 1 overlaps the block before it"),
        (_drop, ManifestError, r"holds 2 descriptors, the manifest lists 3 shards"),
        (_other_format, ManifestError, r"data_format 'jsonl.gz', the manifest 'msgpack.zst'"),
        (_newer, ManifestError, r"version 3 is not supported.*upgrade trainvault"),
    ],
)
def test_pack_that_disagrees_with_its_manifest_is_refused(
    publish: Callable[..., str], tmp_path: Path, edit: Any, error: type, match: str
) -> None:
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), 3)
    pub = forged(vault, uri, edit)
    assert pub.manifest.descriptor_pack is not None
    with pytest.raises(error, match=rf"descriptor pack {pub.manifest.descriptor_pack.uri}.*{match}"):
        open_loader(Storage(), pub.uri)


def _recodec(doc: dict[str, Any]) -> dict[str, Any]:
    doc["shared"].append({**doc["shared"][0], "codec": {**doc["shared"][0]["codec"], "zstd_level": 19}})
    doc["shards"]["shared"][2] = 1
    return doc


def _swap(doc: dict[str, Any]) -> dict[str, Any]:
    hashes = doc["blocks"]["sha256"]
    hashes[0], hashes[1] = hashes[1], hashes[0]
    return doc


@pytest.mark.parametrize(("edit", "shard"), [(_recodec, 2), (_swap, 0)])
def test_gate_binds_each_packed_descriptor_to_its_descriptor_sha256(
    publish: Callable[..., str], tmp_path: Path, edit: Any, shard: int
) -> None:
    # Agrees with every entry field, yet is not the descriptor the manifest binds by digest.
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), 3)
    pub = forged(vault, uri, edit)
    ref = pub.manifest.descriptor_pack
    assert ref is not None
    attached = pub.with_pack(vault.storage.get(ref.uri))
    with pytest.raises(
        IntegrityError,
        match=rf"descriptor pack {ref.uri}: the descriptor of shard train/_/{shard} does not "
        "hash to the descriptor_sha256",
    ):
        descriptor_bytes(attached.manifest, attached.descriptors, ref.uri)
    honest = Publication.load(vault.storage, uri).read_pack(vault.storage)
    assert descriptor_bytes(honest.manifest, honest.descriptors, "pack") == {
        e.descriptor_uri: vault.storage.get(e.descriptor_uri) for _, e in honest.entries()
    }


def test_non_canonical_descriptor_is_not_packed(publish: Callable[..., str], tmp_path: Path) -> None:
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), 2, packed=False)
    pub = Publication.load(vault.storage, uri)
    entry = pub.manifest.splits["train"].shards[0]
    stored = vault.storage.get(entry.descriptor_uri)
    desc = parse_descriptor(entry, stored)
    spaced = json.dumps(json.loads(stored), indent=1).encode()
    with pytest.raises(ManifestError, match=rf"{entry.descriptor_uri} is not stored as its canonical JSON"):
        build_pack("msgpack.zst", [(entry.descriptor_uri, desc, spaced)])


def test_a_v1_pack_written_before_columns_still_opens(publish: Callable[..., str], tmp_path: Path) -> None:
    vault = TrainVault()
    uri = publish(vault, str(tmp_path / "ds"), 3)
    entries = vault.load_manifest(uri).splits["train"].shards
    stored = [json.loads(vault.storage.get(e.descriptor_uri)) for e in entries]
    v1 = {"data_format": "msgpack.zst", "descriptors": stored, "format": "trainvault.descriptor-pack", "version": 1}
    pub = forged(vault, uri, lambda _: v1)
    attached = pub.read_pack(vault.storage)
    assert not isinstance(attached.descriptors, PackedDescriptors)
    assert descriptor_bytes(attached.manifest, attached.descriptors, "v1") == {
        e.descriptor_uri: vault.storage.get(e.descriptor_uri) for _, e in attached.entries()
    }
    records = [r for batch in open_loader(Storage(), pub.uri) for r in batch]
    assert records == [{"i": i, "j": j} for i in range(3) for j in range(3)]
