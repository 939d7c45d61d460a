"""Teacher representations: writer, custody chain and loader on a temp folder, memory:// and S3.

Reads are counted and buffers observed by subclassing `Storage` (real stores, no mocks).
Bad-input cases forge a publication whose bindings are all consistent except the one under
test, so the check that must trip is the one that trips.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from trainvault import ConflictError, EncodeError, IntegrityError, ManifestError, SelectionError, TrainVault
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.representations import RepresentationExample
from trainvault.representations import artifact as artifact_format
from trainvault.representations.documents import MANIFEST_NAME, ArtifactEntry
from trainvault.storage import Storage
from trainvault.uris import join_uri, parse_uri

DIM = 8
TEACHER = {"name": "olmo-3-7b", "revision": "r1", "num_layers": 32, "hidden_size": 4096}
PROJECTION = {"method": "gaussian", "dim": DIM, "seed": 17}
LAYERS = (15, 31)
KIND = "post_mlp"
# The example, with part_rows=8: broad_replay 3, 7, 12 fill part-00000 (3+4+1 rows),
# 40 lands in part-00001; dolmino 5, 9, 10 share part-00000.
BLOCKS = {
    "broad_replay": {3: [101, 7, 88], 7: [5, 6, 7, 8], 12: [9], 40: [1, 2, 3, 4, 5]},
    "dolmino": {10: [30, 31, 32], 5: [10, 11], 9: [20, 21, 22]},  # added out of order on purpose
}
SELECT = dict(
    split="analysis", sources=["dolmino", "broad_replay"], per_source_count=2, teacher_layer=31, state_kind=KIND
)


def states_of(source: str, block_id: int, layer: int, tokens: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash((source, block_id, layer)) & 0xFFFF_FFFF)
    return torch.randn(tokens, DIM, generator=g).to(torch.bfloat16)


def publish(vault: TrainVault, root: str, blocks=BLOCKS, order=1) -> tuple[str, str]:
    w = vault.representation_writer(
        root, teacher=TEACHER, projection=PROJECTION, layers=LAYERS, state_kinds=[KIND], part_rows=8
    )
    for source, by_id in list(blocks.items())[::order]:
        for block_id, ids in list(by_id.items())[::order]:
            w.add_block(
                "analysis",
                source,
                block_id,
                ids,
                {(layer, KIND): states_of(source, block_id, layer, len(ids)) for layer in LAYERS},
            )
    return w.commit()


class CountingStorage(Storage):
    """A real Storage that records every object it reads and hands out weakref-able buffers."""

    def __init__(self, config):
        super().__init__(config)
        self.reads: list[str] = []
        self.buffers: dict[str, weakref.ref] = {}

    def get(self, uri, **kwargs):
        data = super().get(uri, **kwargs)
        self.reads.append(uri)
        # An ndarray over the bytes: the loader sees a buffer, the test a weakref to it.
        buf = np.frombuffer(data, dtype=np.uint8)
        self.buffers[uri] = weakref.ref(buf)
        return buf

    def artifact_reads(self) -> list[str]:
        return [u for u in self.reads if u.endswith(".safetensors")]


def counting(vault: TrainVault) -> CountingStorage:
    vault.storage = CountingStorage(vault.storage_config)
    return vault.storage


def read(vault: TrainVault, uri: str, sha: str, **overrides) -> list[RepresentationExample]:
    return list(vault.iter_representation_examples(uri, sha, **{**SELECT, **overrides}))


def key(e: RepresentationExample) -> tuple:
    return (
        e.source,
        e.block_id,
        e.input_ids.tolist(),
        e.states.view(torch.int16).tolist(),
        e.teacher_layer,
        e.state_kind,
        e.states_sha256,
    )


# -- round trip and determinism ----------------------------------------------------------


def test_round_trip_and_idempotent_rewrite(vault_root) -> None:
    vault, root = vault_root
    uri, sha = publish(vault, root)
    assert uri == join_uri(root, MANIFEST_NAME)
    for layer in LAYERS:
        got = read(vault, uri, sha, sources=["broad_replay", "dolmino"], per_source_count=3, teacher_layer=layer)
        want = [(s, b) for s in ("broad_replay", "dolmino") for b in sorted(BLOCKS[s])[:3]]
        assert [(e.source, e.block_id) for e in got] == want
        for e in got:
            assert e.input_ids.dtype == torch.int32 and e.input_ids.tolist() == BLOCKS[e.source][e.block_id]
            assert e.states.dtype == torch.bfloat16
            assert torch.equal(e.states, states_of(e.source, e.block_id, layer, len(e.input_ids)))
            assert (e.teacher_layer, e.state_kind) == (layer, KIND)
    before = {o.uri: vault.storage.get(o.uri) for o in vault.storage.list(root)}
    # Same blocks, added in the opposite order: the same bytes, so the commit is a no-op.
    assert publish(vault, root, order=-1) == (uri, sha)
    assert {o.uri: vault.storage.get(o.uri) for o in vault.storage.list(root)} == before


def test_same_publication_elsewhere_has_the_same_bytes(tmp_path) -> None:
    vault = TrainVault()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    publish(vault, a)
    publish(vault, b, order=-1)

    def objects(root: str) -> dict[str, object]:
        out: dict[str, object] = {
            o.uri[len(parse_uri(root).uri) :]: vault.storage.get(o.uri) for o in vault.storage.list(root)
        }
        # A local etag names the file (inode, mtime), so only the final manifest's etags differ.
        manifest = json.loads(out.pop("/" + MANIFEST_NAME))
        for ref in manifest["splits"]["analysis"]["sources"].values():
            ref["index"].pop("etag")
        return {**out, "manifest": manifest}

    assert objects(a) == objects(b)


def test_different_publication_at_the_same_root_is_a_conflict(vault_root) -> None:
    vault, root = vault_root
    uri, sha = publish(vault, root)
    changed = {**BLOCKS, "dolmino": {**BLOCKS["dolmino"], 5: [10, 12]}}
    with pytest.raises(ConflictError, match="already exists with different content"):
        publish(vault, root, blocks=changed)
    assert len(read(vault, uri, sha)) == 4  # the original still reads under its pin


# -- the example: order, reads, ownership ----------------------------------------


def test_example_order_and_artifact_reads(vault_root) -> None:
    vault, root = vault_root
    uri, sha = publish(vault, root)
    store = counting(vault)
    got = read(vault, uri, sha)
    assert [(e.source, e.block_id) for e in got] == [
        ("dolmino", 5),
        ("dolmino", 9),
        ("broad_replay", 3),
        ("broad_replay", 7),
    ]
    block3 = got[2]
    assert block3.input_ids.tolist() == [101, 7, 88] and list(block3.states.shape) == [3, DIM]
    assert torch.equal(block3.states[1], states_of("broad_replay", 3, 31, 3)[1])  # row i is token i's state
    part = f"{parse_uri(root).uri}/artifacts/analysis"
    assert store.artifact_reads() == [
        f"{part}/dolmino/part-00000/tokens.safetensors",
        f"{part}/dolmino/part-00000/layer-31.post_mlp.safetensors",
        f"{part}/broad_replay/part-00000/tokens.safetensors",
        f"{part}/broad_replay/part-00000/layer-31.post_mlp.safetensors",
    ]
    assert not any("part-00001" in u or "layer-15" in u for u in store.reads)
    assert len(store.reads) == 4 + 4  # manifest, two indexes, artifact manifest once, four artifacts
    assert got[0].states_sha256 == sha256_hex(vault.storage.get(store.artifact_reads()[1]).tobytes())


def test_block_ids_are_ordered_as_integers(vault_root) -> None:
    vault, root = vault_root
    uri, sha = publish(vault, root)
    got = read(vault, uri, sha, sources=["dolmino"], per_source_count=3)
    assert [e.block_id for e in got] == [5, 9, 10]  # 9 before 10


def test_examples_own_their_tensors(vault_root) -> None:
    vault, root = vault_root
    uri, sha = publish(vault, root)
    store = counting(vault)
    seen = 0
    for e in vault.iter_representation_examples(
        uri, sha, **{**SELECT, "per_source_count": 4, "sources": ["broad_replay"]}
    ):
        seen += 1
        t = len(e.input_ids)
        assert e.states.untyped_storage().nbytes() == t * DIM * 2
        assert e.input_ids.untyped_storage().nbytes() == t * 4
        # Every artifact read so far (this part's included) is gone: no view or handle keeps it.
        artifacts = store.artifact_reads()
        assert artifacts and all(store.buffers[u]() is None for u in artifacts)
        with pytest.raises(dataclasses.FrozenInstanceError):
            e.block_id = 0
    assert seen == 4 and len(store.artifact_reads()) == 4  # two parts, tokens + states each


# -- bad input --------------------------------------------------------------------------


def forge(
    vault: TrainVault, src: str, dst: str, *, artifact=None, entry=None, index=None, manifest=None
) -> tuple[str, str]:
    """Copy the publication at `src` to `dst`, applying the hooks, and re-bind every digest
    upward (artifact -> artifact manifest -> indexes -> final manifest), so that only what
    a hook breaks on purpose is wrong. Hooks edit plain JSON objects or artifact bytes."""
    s = vault.storage
    am = json.loads(s.get(join_uri(src, "representation-artifacts-v1.json")))
    for e in am["artifacts"]:
        data = s.get(join_uri(src, e["uri"]))
        data = artifact(e["artifact_id"], data) if artifact else data
        s.put(join_uri(dst, e["uri"]), data)
        e.update(sha256=sha256_hex(data), size_bytes=len(data))
        if entry:
            entry(e)
    am_bytes = canonical_json(am)
    s.put(join_uri(dst, "representation-artifacts-v1.json"), am_bytes)
    m = json.loads(s.get(join_uri(src, MANIFEST_NAME)))
    for source, ref in m["splits"]["analysis"]["sources"].items():
        idx = json.loads(s.get(join_uri(src, ref["index"]["uri"])))
        idx["artifact_manifest"]["sha256"] = sha256_hex(am_bytes)
        if index:
            index(source, idx)
        data = canonical_json(idx)
        info = s.put(join_uri(dst, ref["index"]["uri"]), data)
        ref["index"].update(sha256=sha256_hex(data), size_bytes=len(data), etag=s.head(info.uri).etag)
    if manifest:
        manifest(m)
    data = canonical_json(m)
    s.put(join_uri(dst, MANIFEST_NAME), data)
    return join_uri(dst, MANIFEST_NAME), sha256_hex(data)


@pytest.fixture
def published(vault_root):
    vault, root = vault_root
    return vault, root, *publish(vault, root + "/good")


def test_forge_without_hooks_reads_the_same(published) -> None:
    vault, root, uri, sha = published
    assert [key(e) for e in read(vault, *forge(vault, root + "/good", root + "/copy"))] == [
        key(e) for e in read(vault, uri, sha)
    ]


def test_manifest_not_matching_the_pin_reads_nothing_else(published) -> None:
    vault, _root, uri, _sha = published
    store = counting(vault)
    with pytest.raises(IntegrityError, match="pinned by the caller"):
        read(vault, uri, "0" * 64)
    assert store.reads == [uri]


def test_index_rewritten_with_equal_bytes_is_refused(published) -> None:
    vault, root, uri, sha = published
    index_uri = join_uri(root, "good/indexes/analysis/dolmino.json")
    data, old = vault.storage.get(index_uri), vault.storage.head(index_uri).etag
    loc = parse_uri(index_uri)
    if loc.scheme == "s3":
        # S3's etag of a single PUT is the MD5 of its bytes; a multipart upload of the same
        # bytes is a new version with a new etag.
        import obstore

        obstore.put(vault.storage._clients.get(loc).store, loc.path, data, use_multipart=True)
    else:
        vault.storage.delete(index_uri)
        vault.storage.put(index_uri, data)
    assert vault.storage.get(index_uri) == data and vault.storage.head(index_uri).etag != old
    with pytest.raises(IntegrityError, match="rewritten after publication"):
        read(vault, uri, sha)


def _set_index_ref(field, value):
    return lambda m: m["splits"]["analysis"]["sources"]["dolmino"]["index"].update({field: value})


def _set_index_am(field, value):
    return lambda source, idx: idx["artifact_manifest"].update({field: value})


def _tamper_bytes(target):
    return lambda aid, data: data[:-1] + bytes([data[-1] ^ 1]) if aid == target else data


def _states_table(target, offsets):
    def hook(aid, data):
        if aid != target:
            return data
        e = ArtifactEntry.model_construct(
            artifact_id=aid,
            kind="states",
            split="analysis",
            source="dolmino",
            part="part-00000",
            layer=31,
            state_kind=KIND,
        )
        hlen = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + hlen])
        begin, end = header["rows"]["data_offsets"]
        rows = data[8 + hlen + begin : 8 + hlen + end]
        return artifact_format.encode(
            e.metadata(), "states", "bfloat16", header["rows"]["shape"], [5, 9, 10], offsets, [rows]
        )

    return hook


def _token_count(block_id, count):
    def hook(source, idx):
        for b in idx["blocks"]:
            if source == "dolmino" and b["block_id"] == block_id:
                b["token_count"] = count

    return hook


def _swap_blocks(source, idx):
    if source == "dolmino":
        idx["blocks"][0], idx["blocks"][1] = idx["blocks"][1], idx["blocks"][0]


def _repeat_block(source, idx):
    if source == "dolmino":
        idx["blocks"][1]["block_id"] = idx["blocks"][0]["block_id"]


D31 = "analysis/dolmino/part-00000/layer-31.post_mlp"
BAD = {
    # name: (forge hooks, error, message fragment)
    "index sha256": (dict(manifest=_set_index_ref("sha256", "1" * 64)), IntegrityError, "does not match"),
    "index size": (dict(manifest=_set_index_ref("size_bytes", 3)), IntegrityError, "truncated or replaced"),
    "artifact manifest sha256": (dict(index=_set_index_am("sha256", "2" * 64)), IntegrityError, "pinned by index"),
    "artifact sha256": (
        dict(entry=lambda e: e.update(sha256="3" * 64) if e["artifact_id"] == D31 else None),
        IntegrityError,
        "pinned by artifact manifest",
    ),
    "artifact truncated": (
        dict(entry=lambda e: e.update(size_bytes=e["size_bytes"] + 1) if e["artifact_id"] == D31 else None),
        IntegrityError,
        "truncated",
    ),
    "header over 100 MiB": (
        dict(artifact=lambda aid, d: (200 << 20).to_bytes(8, "little") + b"{}" if aid == D31 else d),
        IntegrityError,
        "100 MiB",
    ),
    "header unlike its entry": (
        dict(artifact=lambda aid, d: d.replace(b'"layer":"31"', b'"layer":"15"') if aid == D31 else d),
        IntegrityError,
        "unlike its artifact manifest entry",
    ),
    "header shape unlike its entry": (
        dict(entry=lambda e: e.update(shape=[9, DIM]) if e["artifact_id"] == D31 else None),
        IntegrityError,
        "unlike",
    ),
    "block tables differ": (
        dict(artifact=_states_table(D31, [0, 3, 5, 8])),
        IntegrityError,
        "differ from those of the part's tokens",
    ),
    "token_count is not the rows": (dict(index=_token_count(9, 2)), IntegrityError, "token_count"),
    "unsorted block ids": (dict(index=_swap_blocks), ManifestError, "strictly ascending"),
    "repeated block ids": (dict(index=_repeat_block), ManifestError, "repeated"),
    "index URI escapes the root": (
        dict(manifest=_set_index_ref("uri", "../good/indexes/analysis/dolmino.json")),
        ManifestError,
        "escapes the publication root",
    ),
    "artifact URI escapes the root": (
        dict(entry=lambda e: e.update(uri="/etc/passwd") if e["artifact_id"] == D31 else None),
        ManifestError,
        "escapes",
    ),
    "unknown manifest version": (dict(manifest=lambda m: m.update(version=2)), ManifestError, "upgrade trainvault"),
    "unknown index format": (
        dict(index=lambda s, i: i.update(format="eagle.manifest")),
        ManifestError,
        "field 'format'",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_publication_is_refused(published, case) -> None:
    vault, root, _, _ = published
    hooks, error, fragment = BAD[case]
    uri, sha = forge(vault, root + "/good", root + "/bad", **hooks)
    yielded = []
    with pytest.raises(error, match=fragment):
        for e in vault.iter_representation_examples(uri, sha, **SELECT):
            yielded.append(e)
    # Dolmino's part-00000 is the first read: nothing of it (or after it) was yielded.
    assert yielded == []


def test_bad_artifact_yields_nothing_from_it(published) -> None:
    vault, root, _, _ = published
    target = "analysis/broad_replay/part-00000/layer-31.post_mlp"
    uri, sha = forge(
        vault,
        root + "/good",
        root + "/bad",
        entry=lambda e: e.update(sha256="4" * 64) if e["artifact_id"] == target else None,
    )
    it = vault.iter_representation_examples(uri, sha, **SELECT)
    assert [(e.source, e.block_id) for e in (next(it), next(it))] == [("dolmino", 5), ("dolmino", 9)]
    with pytest.raises(IntegrityError, match="broad_replay/part-00000/layer-31"):
        next(it)


def test_artifact_replaced_in_place_is_refused(published) -> None:
    vault, root, uri, sha = published
    target = join_uri(root, "good/artifacts/analysis/dolmino/part-00000/layer-31.post_mlp.safetensors")
    data = vault.storage.get(target)
    vault.storage.put(target, data[:-2])
    with pytest.raises(IntegrityError, match="truncated or replaced"):
        read(vault, uri, sha)
    vault.storage.put(target, _tamper_bytes(D31)(D31, data))
    with pytest.raises(IntegrityError, match="does not match"):
        read(vault, uri, sha)


def test_artifact_far_larger_than_pinned_is_refused_unread(tmp_path) -> None:
    # Extended (sparsely) to 1 TiB: read whole it would exhaust memory; nothing past the pinned size is read.
    vault = TrainVault()
    root = str(tmp_path / "rep")
    uri, sha = publish(vault, root)
    target = join_uri(root, "artifacts/analysis/dolmino/part-00000/layer-31.post_mlp.safetensors")
    os.truncate("/" + parse_uri(target).path, 1 << 40)
    with pytest.raises(IntegrityError, match=r"layer-31.*more than .* bytes, but artifact manifest"):
        read(vault, uri, sha)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(split="train"), "published splits: \\['analysis'\\]"),
        (dict(sources=["dolmino", "wiki"]), "published sources: \\['broad_replay', 'dolmino'\\]"),
        (dict(teacher_layer=7), "published layers: \\[15, 31\\]"),
        (dict(state_kind="pre_attn"), "published state kinds: \\['post_mlp'\\]"),
        (dict(sources=["dolmino", "dolmino"]), "repeated"),
        (dict(sources="dolmino"), "list of source names"),
        (dict(per_source_count=0), ">= 1"),
        (dict(per_source_count=4), "exceeds the blocks published"),
    ],
)
def test_bad_selection_reads_no_artifact(published, overrides, fragment) -> None:
    vault, _root, uri, sha = published
    store = counting(vault)
    with pytest.raises(SelectionError, match=fragment) as err:
        vault.iter_representation_examples(uri, sha, **{**SELECT, **overrides})
    assert isinstance(err.value, ValueError)
    assert store.artifact_reads() == [] and len(store.reads) <= 1


def test_writer_refuses_bad_blocks_and_publishes_nothing(vault_root) -> None:
    vault, root = vault_root
    w = vault.representation_writer(root, teacher=TEACHER, projection=PROJECTION, layers=LAYERS, state_kinds=[KIND])
    good = {(layer, KIND): torch.zeros(2, DIM, dtype=torch.bfloat16) for layer in LAYERS}
    with pytest.raises(EncodeError, match=r"missing \[\(31, 'post_mlp'\)\]"):
        w.add_block("analysis", "dolmino", 1, [1, 2], {(15, KIND): good[(15, KIND)]})
    with pytest.raises(EncodeError, match=r"expected \[2, 8\]"):
        w.add_block("analysis", "dolmino", 1, [1, 2], {**good, (31, KIND): torch.zeros(3, DIM, dtype=torch.bfloat16)})
    with pytest.raises(EncodeError, match="dtype"):
        w.add_block("analysis", "dolmino", 1, [1, 2], {**good, (31, KIND): torch.zeros(2, DIM, dtype=torch.float64)})
    with pytest.raises(EncodeError, match="non-empty 1-D integer"):
        w.add_block("analysis", "dolmino", 1, [[1, 2]], good)
    w.add_block("analysis", "dolmino", 1, [1, 2], good)
    with pytest.raises(EncodeError, match="already added"):
        w.add_block("analysis", "dolmino", 1, [1, 2], good)
    with pytest.raises(ManifestError):
        w.add_block("analysis", "../x", 2, [1, 2], good)
    assert vault.storage.list(root) == []  # nothing is written before commit()
    uri, sha = w.commit()
    got = read(vault, uri, sha, sources=["dolmino"], per_source_count=1)
    assert [(e.block_id, e.input_ids.tolist()) for e in got] == [(1, [1, 2])]


def test_without_the_extra_the_error_names_it(tmp_path) -> None:
    code = (
        "import sys\n"
        "import trainvault, trainvault.representations\n"
        "heavy = [m for m in ('torch', 'numpy', 'safetensors') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "sys.modules['torch'] = None\n"
        "v = trainvault.TrainVault()\n"
        "for call in (lambda: v.iter_representation_examples('x', '0' * 64, split='a', sources=['b'], per_source_count=1,"
        " teacher_layer=0, state_kind='k'), lambda: v.representation_writer('x', teacher={}, projection={}, layers=[0],"
        " state_kinds=['k'])):\n"
        "    try:\n"
        "        call()\n"
        "    except ImportError as exc:\n"
        "        assert \"pip install 'trainvault[representation]'\" in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError('no ImportError')\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_artifacts_read_with_plain_safetensors(tmp_path) -> None:
    from safetensors.torch import load

    vault = TrainVault()
    _uri, _sha = publish(vault, str(tmp_path / "p"))
    tensors = load(
        vault.storage.get(str(tmp_path / "p/artifacts/analysis/dolmino/part-00000/layer-31.post_mlp.safetensors"))
    )
    assert tensors["block_ids"].tolist() == [5, 9, 10] and tensors["row_offsets"].tolist() == [0, 2, 5, 8]
    assert torch.equal(tensors["rows"][2:5], states_of("dolmino", 9, 31, 3))


# -- reads through faults ----------------------------------------------------------------


def test_reads_through_the_fault_proxy_give_identical_examples(
    faults: ModuleType, s3_config: Callable[..., Any], s3_server, s3_bucket
) -> None:
    clean = TrainVault(storage=s3_config(s3_server))
    uri, sha = publish(clean, f"s3://{s3_bucket}/rep")
    want = [key(e) for e in read(clean, uri, sha)]
    proxy = faults.FaultProxy(int(s3_server.rsplit(":", 1)[1])).start()
    try:
        faulty = TrainVault(
            storage=s3_config(
                proxy.endpoint,
                client_retries=0,
                read_timeout_s=2.0,
                recovery_window_s=20.0,
                backoff_initial_s=0.01,
                backoff_max_s=0.2,
            )
        )
        for rule in (
            faults.Rule(mode="fin", path_contains=".safetensors", cut_after=64, times=3),
            faults.Rule(mode="rst", path_contains="layer-31", cut_after=100, times=2),
            faults.Rule(mode="503", path_contains="indexes", times=2),
        ):
            fired = proxy.fired
            proxy.arm(rule)
            assert [key(e) for e in read(faulty, uri, sha)] == want
            assert proxy.fired > fired
        gets = [r["target"] for r in proxy.log if r["method"] == "GET" and ".safetensors" in r["target"]]
        assert not any("part-00001" in t or "layer-15" in t for t in gets)
    finally:
        proxy.stop()


# -- storage: etag-pinned reads ------------------------------------------------------------


def test_get_if_match_reads_only_the_pinned_version(vault_root) -> None:
    vault, root = vault_root
    uri = join_uri(root, "obj")
    vault.storage.put(uri, b"first")
    etag = vault.storage.head(uri).etag
    assert vault.storage.get(uri, if_match=etag) == b"first"
    vault.storage.put(uri, b"second")
    with pytest.raises(IntegrityError, match="obj"):
        vault.storage.get(uri, if_match=etag)


def test_a_timing_with_416_in_it_is_not_a_range_error() -> None:
    import obstore.exceptions as obx

    from trainvault.errors import TransientStorageError
    from trainvault.storage.translate import translate as _translate

    text = (
        "Generic S3 error: Error performing GET http://h/b/k in 16.416158ms - Server returned non-2xx status code: 503"
    )
    with pytest.raises(TransientStorageError), _translate("s3://b/k", "read"):
        raise obx.GenericError(text)
