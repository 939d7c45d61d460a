"""The approved loader: finite, in manifest order whatever num_workers, every block verified first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from approval_chain import build_chain

from trainvault import IntegrityError, TrainVault


@pytest.fixture(scope="module")
def approved_chain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Worker processes read from a local folder (fork-safe); many small blocks per shard.
    chain = build_chain(TrainVault(), str(tmp_path_factory.mktemp("approved")), shards=4, records_per_shard=60,
                        block_bytes=512)
    return chain, chain.vault.approve_dataset(chain.request())


def ids(loader: Any) -> list[str]:
    return [r["id"] for batch in loader for r in batch]


def expected_ids(chain: Any, keys: list[str]) -> list[str]:
    return [r["id"] for k in keys for r in chain.records[k]]


def test_order_does_not_depend_on_num_workers(approved_chain: Any) -> None:
    chain, approved = approved_chain
    seqs = {}
    for workers in (0, 2):
        loader = approved.split_data_loader(collate_fn=list, dataloader_args={"batch_size": 7, "num_workers": workers})
        seqs[workers] = ids(loader.load("train"))
    assert seqs[0] == seqs[2] == expected_ids(chain, ["s0", "s1", "s2", "s3"])
    # The same order as the unapproved loader over the same manifest.
    plain = chain.vault.split_data_loader(chain.manifest_uri, collate_fn=list, dataloader_args={"batch_size": 7})
    assert ids(plain.load("train")) == seqs[0]


def test_stage_selection_and_finite(approved_chain: Any) -> None:
    chain, approved = approved_chain
    loader = approved.split_data_loader(collate_fn=list, dataloader_args={"batch_size": 5})
    assert ids(loader.load("train", curriculum_stage="hard")) == expected_ids(chain, ["s3"])
    assert ids(loader.load("valid")) == expected_ids(chain, ["valid"])
    with pytest.raises(ValueError, match="finitely"):
        loader.load("train", infinite_iter=True)


@pytest.mark.parametrize("workers", [0])
def test_block_changed_after_approval_yields_nothing_from_it(tmp_path: Path, workers: int) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), shards=3, records_per_shard=40, block_bytes=512)
    approved = chain.vault.approve_dataset(chain.request())
    entry = approved.manifest.splits["train"].shard("easy/s1")
    # Same size, one byte of the first block changed: only the block digest can tell.
    data = bytearray(chain.vault.storage.get(entry.uri))
    data[5] ^= 0x40
    chain.vault.storage.put(entry.uri, bytes(data))
    loader = approved.split_data_loader(collate_fn=list, dataloader_args={"batch_size": 1, "num_workers": workers})
    got: list[str] = []
    with pytest.raises(IntegrityError, match="block 0 sha256"):
        for batch in loader.load("train"):
            got.extend(r["id"] for r in batch)
    s0 = expected_ids(chain, ["s0"])
    assert not any(i.startswith("s1-") for i in got)
    assert got == s0[: len(got)]
    if workers == 0:
        assert got == s0


def test_shard_extended_after_approval_fails_before_any_block(tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), shards=2, records_per_shard=20, block_bytes=512)
    approved = chain.vault.approve_dataset(chain.request())
    entry = approved.manifest.splits["train"].shard("easy/s0")
    chain.vault.storage.put(entry.uri, chain.vault.storage.get(entry.uri) + b"\0")
    loader = approved.split_data_loader(collate_fn=list)
    got: list[Any] = []
    with pytest.raises(IntegrityError, match="changed after approval"):
        for batch in loader.load("train"):
            got.extend(batch)
    assert got == []
