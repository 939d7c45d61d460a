"""The approved loader: in the plan's order whatever num_workers, every block verified first."""

from __future__ import annotations

import copy
import functools
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

from trainvault import IntegrityError, TrainVault
from trainvault.approval.guard import CustodyStorage
from trainvault.canonical import sha256_hex
from trainvault.errors import CustodyError


@pytest.fixture(scope="module")
def approved_chain(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Worker processes read from a local folder (fork-safe); many small blocks per shard.
    chain = build_chain(
        TrainVault(), str(tmp_path_factory.mktemp("approved")), shards=4, records_per_shard=60, block_bytes=512
    )
    return chain, chain.vault.approve_dataset(chain.request())


def ids(loader: Any) -> list[str]:
    return [r["id"] for batch in loader for r in batch]


def expected_ids(chain: Any, keys: list[str]) -> list[str]:
    return [r["id"] for k in keys for r in chain.records[k]]


def test_order_does_not_depend_on_num_workers(approved_chain: Any) -> None:
    chain, approved = approved_chain
    seqs = {}
    for workers in (0, 2):
        loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 7, "num_workers": workers})
        seqs[workers] = ids(loader.load("train"))
    assert seqs[0] == seqs[2] == expected_ids(chain, ["s0", "s1", "s2", "s3"])
    # The same order as the unapproved loader over the same manifest.
    plain = chain.vault.ungated_loader_factory(chain.manifest_uri, collate_fn=list, dataloader_args={"batch_size": 7})
    assert ids(plain.load("train")) == seqs[0]


def test_stage_selection(approved_chain: Any) -> None:
    chain, approved = approved_chain
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 5})
    assert ids(loader.load("train", curriculum_stage="hard")) == expected_ids(chain, ["s3"])
    assert ids(loader.load("valid")) == expected_ids(chain, ["valid"])


@pytest.mark.parametrize("workers", [0])
def test_block_changed_after_approval_yields_nothing_from_it(
    build_chain: Callable[..., Any], tmp_path: Path, workers: int
) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), shards=3, records_per_shard=40, block_bytes=512)
    approved = chain.vault.approve_dataset(chain.request())
    entry = approved.manifest.splits["train"].shard("easy/s1")
    # Same size, one byte of the first block changed: only the block digest can tell.
    data = bytearray(chain.vault.storage.get(entry.uri))
    data[5] ^= 0x40
    chain.vault.storage.put(entry.uri, bytes(data))
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 1, "num_workers": workers})
    got: list[str] = []
    with pytest.raises(IntegrityError, match="block 0 sha256"):
        for batch in loader.load("train"):
            got.extend(r["id"] for r in batch)
    s0 = expected_ids(chain, ["s0"])
    assert not any(i.startswith("s1-") for i in got)
    assert got == s0[: len(got)]
    if workers == 0:
        assert got == s0


def test_shard_extended_after_approval_fails_before_any_block(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), shards=2, records_per_shard=20, block_bytes=512)
    approved = chain.vault.approve_dataset(chain.request())
    entry = approved.manifest.splits["train"].shard("easy/s0")
    chain.vault.storage.put(entry.uri, chain.vault.storage.get(entry.uri) + b"\0")
    loader = approved.loader_factory(collate_fn=list)
    got: list[Any] = []
    with pytest.raises(IntegrityError, match="changed after approval"):
        for batch in loader.load("train"):
            got.extend(batch)
    assert got == []


# -- custody is issued by the gate, never built, copied or unpickled ----------------------


def forged_manifest(chain: Any, root: Path) -> tuple[str, str]:
    """An unapproved publication: (manifest URI, its sha256)."""
    uri = str(root / "forged" / "data-manifest-v1.json")
    saver = chain.vault.dataset_saver(uri, block_bytes=512)
    saver.save(
        "train", "easy", [{"id": f"forged-{i}", "text": "never approved", "tokens": 1} for i in range(5)], shard_id="s0"
    )
    saver.commit_manifest()
    return uri, sha256_hex(chain.vault.storage.get(uri))


def test_approved_loader_and_custody_cannot_be_built_over_a_forged_manifest(
    approved_chain: Any, tmp_path: Path
) -> None:
    chain, approved = approved_chain
    uri, sha = forged_manifest(chain, tmp_path)
    forged = chain.vault.load_manifest(uri)
    shards = {e.uri: e.size_bytes for e in forged.splits["train"].shards}
    loader = approved.loader_factory(collate_fn=list)
    got: list[Any] = []
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        got += ids(type(loader)(chain.vault.storage, uri, sha, collate_fn=list).load("train"))
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        custody = CustodyStorage(chain.vault.storage_config, shards, {uri: chain.vault.storage.get(uri)})
        got += ids(type(loader)(custody, uri, sha, collate_fn=list).load("train"))
    with pytest.raises(TypeError, match="issued"):
        type(loader)._issue(object(), approved.custody_storage(), uri, sha)
    with pytest.raises(TypeError, match="issued"):
        CustodyStorage._issue(object(), chain.vault.storage_config, shards, {})
    assert got == []
    # The issued ones keep what the gate approved: no swapping in another storage or manifest.
    for name, value in (("storage", chain.vault.storage), ("manifest", forged), ("manifest_uri", uri)):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(loader, name, value)
    with pytest.raises(CustodyError, match="not an object of the approved dataset"):
        approved.custody_storage().get(next(iter(shards)))
    assert ids(loader.load("train")) == expected_ids(chain, ["s0", "s1", "s2", "s3"])


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_approved_loader_and_custody_do_not_copy_or_pickle(approved_chain: Any, how: str) -> None:
    _, approved = approved_chain
    clone = {"copy": copy.copy, "deepcopy": copy.deepcopy, "pickle": lambda o: pickle.loads(pickle.dumps(o))}[how]
    loader = approved.loader_factory(collate_fn=list)
    objects = [loader, approved.custody_storage(), loader.storage]
    if how != "copy":  # a shallow copy of the dataset shares its custody; a deep copy or a pickle would hold its own
        objects.append(loader.load("train").dataset)
    for obj in objects:
        with pytest.raises(TypeError, match="does not pickle or copy"):
            clone(obj)


def worker_view(manifest_uri: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Collate inside a worker: the record ids, and what the worker's storage is and reads."""
    info = torch.utils.data.get_worker_info()
    storage = info.dataset.fetcher.storage if info is not None else None
    try:
        storage.get(manifest_uri)
        manifest = "read"
    except CustodyError:
        manifest = "refused"
    return {"ids": [r["id"] for r in records], "custody": isinstance(storage, CustodyStorage), "manifest": manifest}


def check_workers_get_approved_objects_only(chain: Any, context: str | None) -> None:
    approved = chain.vault.approve_dataset(chain.request())
    args: dict[str, Any] = {"batch_size": 4, "num_workers": 2, "timeout": 120}
    if context is not None:
        args["multiprocessing_context"] = context
    loader = approved.loader_factory(
        collate_fn=functools.partial(worker_view, chain.manifest_uri), dataloader_args=args
    )
    batches = list(loader.load("train"))
    assert [i for b in batches for i in b["ids"]] == expected_ids(
        chain, sorted(k for k in chain.records if k != "valid")
    )
    # Workers started clean got the approved data objects only: no custody, no manifest.
    assert {(b["custody"], b["manifest"]) for b in batches} == {(False, "refused")}


def test_spawned_workers_read_approved_objects_only(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), shards=2, records_per_shard=20, block_bytes=512)
    check_workers_get_approved_objects_only(chain, "spawn")


def test_s3_workers_read_approved_objects_only(
    build_chain: Callable[..., Any], s3_config: Callable[..., Any], s3_server: str, s3_bucket: str
) -> None:
    chain = build_chain(
        TrainVault(storage=s3_config(s3_server)), f"s3://{s3_bucket}", shards=2, records_per_shard=20, block_bytes=512
    )
    check_workers_get_approved_objects_only(chain, None)  # forkserver: obstore does not survive fork
