"""Issue 34 item 1: a descriptor that moves a block boundary (one block claims a record more, the
next one fewer, the shard's total and every data byte unchanged), rebound in a new manifest, is
refused by every reader that decodes the blocks, naming the shard and the block; `inspect` reports
a pack whose block counts do not sum to the shard's total."""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest

from trainvault import IntegrityError, TrainVault, iter_shard
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.cli import main
from trainvault.contamination import scan_dataset
from trainvault.contamination.scan import ScanFeed
from trainvault.loading import LoaderPlan, SplitLoaderFactory
from trainvault.publication.pack import pack_uri
from trainvault.publication.pinned import Publication
from trainvault.refs import ObjectRef

pytest.importorskip("torch")

SHARD = "hard/s1"  # the chain's contaminated shard: record 15 holds a benchmark item


def forge(vault: TrainVault, uri: str, deltas: dict[int, int], name: str) -> str:
    """A new manifest whose descriptor of shard `SHARD` adds `deltas[i]` to block i's record count,
    its pack and `descriptor_sha256` rebound to match (what a writer without any key can do)."""
    pub = Publication.load(vault.storage, uri)
    ref = pub.manifest.descriptor_pack
    assert ref is not None
    pack = json.loads(vault.storage.get(ref.uri))
    entries = [e for _, e in pub.entries()]
    target = next(i for i, e in enumerate(entries) if e.key == SHARD)
    entry = entries[target]
    first_block = sum(pack["shards"]["blocks"][:target])
    desc = json.loads(vault.storage.get(entry.descriptor_uri))
    assert len(desc["blocks"]) > max(deltas) + 1
    for block, delta in deltas.items():
        pack["blocks"]["record_count"][first_block + block] += delta
        desc["blocks"][block]["record_count"] += delta
    firsts = accumulate((b["record_count"] for b in desc["blocks"]), initial=0)
    for b, first in zip(desc["blocks"], firsts, strict=False):
        b["first_record"] = first
    data = canonical_json(pack)
    root = uri.rsplit("/", 1)[0]
    new_ref = ObjectRef(uri=pack_uri(root, sha256_hex(data)), sha256=sha256_hex(data), size=len(data))
    vault.storage.put_create(new_ref.uri, data)
    # The loose descriptor too, for readers that read it rather than the pack.
    raw = canonical_json(desc)
    desc_uri = entry.descriptor_uri.replace(".complete.json", f".{name}.complete.json")
    vault.storage.put_create(desc_uri, raw)
    bound = {"descriptor_uri": desc_uri, "descriptor_sha256": sha256_hex(raw)}
    rebound = [e.model_copy(update=bound) if e.key == SHARD else e for e in pub.manifest.splits["train"].shards]
    splits = {**pub.manifest.splits, "train": pub.manifest.splits["train"].model_copy(update={"shards": rebound})}
    forged = pub.manifest.model_copy(update={"descriptor_pack": new_ref, "splits": splits})
    new_uri = f"{root}/{name}.json"
    vault.storage.put_create(new_uri, forged.to_json_bytes())
    return new_uri


@pytest.fixture
def chain(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path / "data"), shards=2, records_per_shard=30, contaminate=True)


@pytest.fixture
def moved(chain: Any) -> str:
    """The chain's manifest with the boundary between blocks 1 and 2 of `SHARD` one record later."""
    return forge(chain.vault, chain.manifest_uri, {1: 1, 2: -1}, "moved")


REFUSED = rf"shard {SHARD} block 1 holds \d+ records, its descriptor declares \d+"


def test_ungated_loader_refuses_a_moved_block_boundary(chain: Any, moved: str) -> None:
    plan = LoaderPlan.create(collate_fn=list, dataloader_args={"batch_size": 4})
    honest = [
        r for batch in SplitLoaderFactory(chain.vault.storage, chain.manifest_uri, plan).load("train") for r in batch
    ]
    assert len(honest) == 60
    loader = SplitLoaderFactory(chain.vault.storage, moved, plan).load("train")
    with pytest.raises(IntegrityError, match=REFUSED):
        for _ in loader:
            pass


def test_trace_and_shard_reads_refuse_a_moved_block_boundary(chain: Any, moved: str) -> None:
    plan = LoaderPlan.create(collate_fn=list, dataloader_args={"batch_size": 4})
    loader = SplitLoaderFactory(chain.vault.storage, moved, plan).load("train")
    with pytest.raises(IntegrityError, match=REFUSED):
        for step in range(15):  # 60 records, 4 a batch: every block is read by some step
            loader.trace(step)
    # What approved-view copies, component ledgers and derivations read a shard through.
    pub = Publication.load(chain.vault.storage, moved)
    entry = next(e for _, e in pub.entries() if e.key == SHARD)
    with pytest.raises(IntegrityError, match=REFUSED):
        list(iter_shard(pub.data_format, entry, storage=chain.vault))


def test_scan_refuses_a_moved_block_boundary(chain: Any, moved: str) -> None:
    # The report an approval needs is never written: the scan stops at the block.
    with pytest.raises(IntegrityError, match=REFUSED):
        scan_dataset(
            chain.vault,
            moved,
            chain.index,
            scan_manifest_sha256=chain.refs["training_scan_manifest"].sha256,
            producer_pins_sha256=chain.refs["producer_pins"].sha256,
            progress=False,
        )


def test_gate_rescan_refuses_a_moved_block_boundary(chain: Any, moved: str) -> None:
    # The gate re-scans a shard from the bytes its hash pass streams (ScanFeed).
    pub = Publication.load(chain.vault.storage, moved).read_pack(chain.vault.storage)
    entry = next(e for _, e in pub.entries() if e.key == SHARD)
    feed = ScanFeed(
        chain.vault.storage, pub.data_format, entry, chain.index, descriptor=pub.descriptors[entry.descriptor_uri]
    )
    feed.feed(chain.vault.storage.get(entry.uri))
    feed.close()
    with pytest.raises(IntegrityError, match=REFUSED):
        feed.result()


def test_inspect_reports_block_counts_that_do_not_sum_to_the_shard(
    chain: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", chain.manifest_uri]) == 0
    capsys.readouterr()
    mixed = forge(chain.vault, chain.manifest_uri, {1: 1}, "mixed")
    assert main(["inspect", mixed]) == 3
    out = capsys.readouterr().out
    mismatches = [line for line in out.splitlines() if "MISMATCH" in line]
    assert len(mismatches) == 1
    assert mismatches[0].startswith(f"  MISMATCH split train shard {SHARD}: its blocks in the descriptor pack")
    assert "records, the manifest 30" in mismatches[0]
