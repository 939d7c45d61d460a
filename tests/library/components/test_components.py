"""Component ranges: the ledger builder, the materializer (unpack / group), its custody
refusals and the approved loader over logical records, on a real approval chain."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvault import ObjectRef, TrainVault
from trainvault.components import Frame, collate_sequences, split_frame
from trainvault.components.builder import ledger_record
from trainvault.components.custody import CompiledRecord, CompiledShard, check_record, read_record
from trainvault.components.materializer import materialize_record
from trainvault.components.sequences import LazyRanges, group_sequences
from trainvault.errors import ApprovalError, ConflictError, CustodyError, IntegrityError, ManifestError
from trainvault.loading import PositionBudget

#: Tokens after the last frame of a hypothesis packing: never part of a range.
PADDING = 999_999


@pytest.fixture(scope="module")
def world(
    packed_records: ModuleType, build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    vault = TrainVault()
    root = str(tmp_path_factory.mktemp("components"))
    chain = build_chain(vault, root, shards=2, block_bytes=512, shard_records=packed_records.shard_records)
    binding = vault.build_component_ledger(chain.manifest_uri, split="train", declare=packed_records.declare)
    approved = vault.approve_dataset(chain.request(sidecars=binding.sidecars()))
    return {"vault": vault, "chain": chain, "binding": binding, "approved": approved}


def by_range(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["range_id"]: r for r in records}


# -- the worked table ----------------------------------------------------------------


def test_p7_table_unpack(world: dict[str, Any]) -> None:
    m = world["approved"].component_range_materializer("train")
    got = [r for r in m.iter_records() if r["packed_record_id"] == "p7"]
    assert [r["range_id"] for r in got] == ["p7:A:0", "p7:B:0", "p7:B:3"]
    table = {
        "p7:A:0": ([11, 12, 13, 14, 15], [0, 1, 2, 3, 4], [0, 1, 1, 1, 1], [0, 1, 2, 3]),
        "p7:B:0": ([21, 22, 23], [0, 1, 2], [0, 1, 1], [0, 1]),
        "p7:B:3": ([23, 24, 25, 26], [0, 1, 2, 3], [0, 1, 1, 1], [0, 1, 2]),
    }
    for r in got:
        ids, pos, mask, targets = table[r["range_id"]]
        assert r["input_ids"].tolist() == ids and r["input_ids"].dtype == np.int32
        assert r["position_ids"].tolist() == pos and r["position_ids"].dtype == np.int32
        assert r["loss_mask"].tolist() == [bool(x) for x in mask]
        assert r["target_row_indices"].tolist() == targets and r["target_row_indices"].dtype == np.int64
        assert r["ce_valid"].all() and len(r["ce_valid"]) == len(targets)
        assert (r["input_ids"][r["target_row_indices"] + 1] == r["input_ids"][r["loss_mask"]]).all()
    a0, _, b1 = got
    assert (a0["component_range"], a0["record_range"]) == ((0, 5), (0, 5))
    assert (b1["component_range"], b1["record_range"]) == ((3, 6), (8, 11))
    # 23 bears loss once (b0) and is context in b1; the pad is never read.
    loss_tokens = [t for r in got for t in r["input_ids"][r["loss_mask"]].tolist()]
    assert loss_tokens.count(23) == 1 and len(loss_tokens) == 9
    assert all(0 not in r["input_ids"].tolist() for r in got)


def test_p7_table_group(world: dict[str, Any]) -> None:
    g = world["approved"].component_range_materializer("train", mode="group")
    first = next(iter(g.iter_records()))
    assert first["packed_record_id"] == "p7"
    assert [s["range_id"] for s in first["component_sequences"]] == ["p7:A:0", "p7:B:0", "p7:B:3"]
    assert first["cu_seqlens"].tolist() == [0, 5, 8, 12] and first["cu_seqlens"].dtype == np.int32
    assert sum(int(s["loss_mask"].sum()) for s in first["component_sequences"]) == 9


def test_sentinels_never_appear_and_group_is_unpack_regrouped(
    packed_records: ModuleType, world: dict[str, Any]
) -> None:
    approved, chain = world["approved"], world["chain"]
    unpack = list(approved.component_range_materializer("train").iter_records())
    group = list(approved.component_range_materializer("train", mode="group").iter_records())
    for r in unpack:
        assert packed_records.SENTINEL not in r["input_ids"].tolist(), r["range_id"]
        assert not np.shares_memory(r["input_ids"], r["loss_mask"])
    assert [s["range_id"] for g in group for s in g["component_sequences"]] == [r["range_id"] for r in unpack]
    flat = [s for g in group for s in g["component_sequences"]]
    for a, b in zip(flat, unpack, strict=False):
        for k in ("input_ids", "position_ids", "loss_mask", "target_row_indices", "ce_valid"):
            assert a[k].tolist() == b[k].tolist()
    # Records declaring nothing yield nothing; the masked record keeps its own mask.
    assert not any(g["packed_record_id"].endswith("-empty") for g in group)
    masked = by_range(unpack)["s0-masked:m:0"]
    assert masked["loss_mask"].tolist() == [False, True, False, False, True, True, True, False, True, True]
    assert masked["target_row_indices"].tolist() == [0, 3, 4, 5, 7, 8]
    # Manifest, record, frame, range order, and the packed records in it.
    pids = [r["packed_record_id"] for r in unpack]
    stored = [r["packed_record_id"] for k in ("s0", "s1") for r in chain.records[k]]
    assert list(dict.fromkeys(pids)) == [p for p in stored if p in set(pids)]


# -- Hypothesis packings ---------------------------------------------------------------


@st.composite
def packings(draw: Any) -> tuple[list[int], list[Frame], int]:
    lengths = draw(st.lists(st.integers(1, 20), min_size=1, max_size=6))
    first_start = draw(st.integers(0, 5))
    max_rows = draw(st.integers(2, 9))
    tokens: list[int] = []
    frames = []
    for k, n in enumerate(lengths):
        cstart = first_start if k == 0 else 0
        start = len(tokens)
        tokens.extend(100 * (k + 1) + cstart + i for i in range(n))
        frames.append(split_frame(Frame(f"c{k}", start, start + n, cstart), max_rows))
    tokens.extend([PADDING] * draw(st.integers(0, 3)))
    return tokens, frames, max_rows


@settings(max_examples=150, deadline=None)
@given(packings())
def test_packings(packing: tuple[list[int], list[Frame], int]) -> None:
    tokens, frames, max_rows = packing
    record = {"packed_record_id": "p", "input_ids": np.asarray(tokens, dtype=np.int32)}
    entry = ledger_record("_/s0", 0, record, frames)
    compiled = check_record(entry, "_/s0", max_rows)
    shard = CompiledShard("_/s0", "memory://x", "memory://x.json", (CompiledRecord("p", len(tokens), compiled),))
    out = materialize_record(shard, 0, record)
    ranges = [(c, n) for f in frames for c, n in f.ranges]
    assert len(out) == len(ranges)
    assert sum(int(r["loss_mask"].sum()) for r in out) == sum(n - (c == 0) for c, n in ranges)
    loss_positions: list[int] = []
    for r in out:
        rows = len(r["input_ids"])
        assert rows <= max_rows and r["position_ids"].tolist() == list(range(rows))
        assert (r["input_ids"][r["target_row_indices"] + 1] == r["input_ids"][r["loss_mask"]]).all()
        assert r["ce_valid"].all() and PADDING not in r["input_ids"].tolist()
        _lo, hi = r["record_range"]
        loss_positions += list(range(hi - int(r["loss_mask"].sum()), hi))
    # Every frame token bears loss exactly once, except each frame's first (context only).
    expected = [p for f in frames for p in range(f.start + 1, f.end)]
    assert sorted(loss_positions) == expected
    grouped = group_sequences(out) if out else None
    if grouped is not None:
        assert grouped["cu_seqlens"].tolist() == [0, *np.cumsum([len(r["input_ids"]) for r in out]).tolist()]
    # Lazy ranges, written by the collate straight from the record, give the owned records' batch.
    pid, ids, mask, compiled_ranges = read_record(shard, 0, record)
    lazy = collate_sequences([LazyRanges(pid, ids, mask, (r,), False) for r in compiled_ranges])
    owned = collate_sequences(out)
    for name in ("input_ids", "position_ids", "loss_mask", "target_row_indices", "ce_valid", "cu_seqlens"):
        assert lazy[name].dtype == owned[name].dtype and lazy[name].tolist() == owned[name].tolist(), name
    assert (lazy["range_ids"], lazy["max_seqlen"], lazy["logical_records"]) == (
        owned["range_ids"],
        owned["max_seqlen"],
        len(out),
    )


# -- the builder ---------------------------------------------------------------------


def test_builder_is_idempotent_and_create_only(packed_records: ModuleType, world: dict[str, Any]) -> None:
    vault, chain, binding = world["vault"], world["chain"], world["binding"]
    again = vault.build_component_ledger(chain.manifest_uri, split="train", declare=packed_records.declare)
    assert (again.uri, again.sha256, again.written) == (binding.uri, binding.sha256, False)

    def shorter(record: dict[str, Any]) -> list[Frame]:
        return [
            Frame(f.component_id, f.start, f.end, f.component_start, f.ranges[:1])
            for f in packed_records.declare(record)
        ]

    with pytest.raises(ConflictError):
        vault.build_component_ledger(chain.manifest_uri, split="train", declare=shorter)


def test_builder_refuses_a_continuation_range_at_its_frame_start(world: dict[str, Any]) -> None:
    vault, chain = world["vault"], world["chain"]
    with pytest.raises(CustodyError, match="predecessor"):
        vault.build_component_ledger(
            chain.manifest_uri, split="train", declare=lambda r: [Frame("x", 0, 1, 4, ((4, 1),))]
        )
    with pytest.raises(ManifestError, match="overlaps"):
        vault.build_component_ledger(
            chain.manifest_uri, split="train", declare=lambda r: [Frame("x", 0, 2, 0, ((0, 2), (1, 1)))]
        )


# -- refusals ------------------------------------------------------------------------


def forge(world: dict[str, Any], name: str, edit_top: Any = None, edit_part: Any = None) -> ObjectRef:
    """A copy of the good ledger with edits, written under <root>/forged/<name>/; returns its ref."""
    storage, chain, binding = world["vault"].storage, world["chain"], world["binding"]
    from trainvault.canonical import canonical_json, sha256_hex
    from trainvault.uris import join_uri, parent_uri

    top = json.loads(storage.get(binding.uri))
    base = f"{chain.root}/forged/{name}"
    for p in top["parts"]:
        part = json.loads(storage.get(join_uri(parent_uri(binding.uri), p["uri"])))
        if edit_part is not None:
            edit_part(p["shard_key"], part)
        data = canonical_json(part)
        storage.put_create(f"{base}/{p['uri']}", data)
        p["sha256"] = sha256_hex(data)
        p["record_count"] = len(part["records"])
        p["range_count"] = sum(len(f["ranges"]) for r in part["records"] for f in r["frames"])
    if edit_top is not None:
        edit_top(top)
    data = canonical_json(top)
    storage.put_create(f"{base}/component-ledger-v1.json", data)
    return ObjectRef(uri=f"{base}/component-ledger-v1.json", sha256=sha256_hex(data))


def approve_with(world: dict[str, Any], ref: ObjectRef) -> Any:
    chain = world["chain"]
    return world["vault"].approve_dataset(chain.request(sidecars={"train_component_ledger": ref}))


def first_shard(edit: Any) -> Any:
    return lambda key, part: edit(part) if key == "easy/s0" else None


def test_refuses_a_ledger_that_is_not_an_approval_sidecar(world: dict[str, Any]) -> None:
    plain = world["vault"].approve_dataset(world["chain"].request())
    with pytest.raises(ApprovalError, match="binds no component ledger"):
        plain.component_range_materializer("train")


def test_refuses_another_approvals_valid_ledger(
    packed_records: ModuleType, build_chain: Callable[..., Any], world: dict[str, Any], tmp_path: Path
) -> None:
    vault = world["vault"]
    other = build_chain(
        vault, str(tmp_path), shards=2, block_bytes=512, shard_records=lambda i: packed_records.shard_records(i + 5)
    )
    theirs = vault.build_component_ledger(other.manifest_uri, split="train", declare=packed_records.declare)
    assert vault.approve_dataset(other.request(sidecars=theirs.sidecars())).component_range_materializer("train")
    with pytest.raises(ApprovalError, match="another dataset's ledger"):
        approve_with(world, ObjectRef(uri=theirs.uri, sha256=theirs.sha256))


def test_refuses_a_part_whose_digest_differs(world: dict[str, Any]) -> None:
    def edit(top: dict[str, Any]) -> None:
        top["parts"][0]["sha256"] = "0" * 64

    ref = forge(world, "part-digest", edit_top=edit)
    with pytest.raises(IntegrityError, match="easy/s0"):
        approve_with(world, ref)


def test_the_gate_refuses_a_range_whose_digest_differs(world: dict[str, Any]) -> None:
    def edit(part: dict[str, Any]) -> None:
        part["records"][12]["frames"][0]["ranges"][0]["sha256"] = "f" * 64

    bad = world["chain"].records["s0"][12]["packed_record_id"]
    ref = forge(world, "range-digest", edit_part=first_shard(edit))
    # Checked once, at approval: no dataset is issued, the refusal names range, record and shard.
    with pytest.raises(IntegrityError, match=rf"range {bad}:\S+ of record 12 \({bad!r}\) of shard easy/s0: .* sha256"):
        approve_with(world, ref)


def test_refuses_a_shard_outside_the_approved_split(world: dict[str, Any]) -> None:
    def edit(top: dict[str, Any]) -> None:
        top["parts"][0]["shard_key"] = "easy/s9"

    ref = forge(world, "foreign-shard", edit_top=edit)
    with pytest.raises(CustodyError, match="easy/s9"):
        approve_with(world, ref)


def test_refuses_a_shifted_record_index(world: dict[str, Any]) -> None:
    def edit(part: dict[str, Any]) -> None:
        for r in part["records"]:
            r["record_index"] += 1

    ref = forge(world, "shifted", edit_part=first_shard(edit))
    with pytest.raises(CustodyError, match="record_index 27 is outside"):
        approve_with(world, ref)


def test_refuses_a_record_the_ledger_does_not_describe(world: dict[str, Any]) -> None:
    def edit(part: dict[str, Any]) -> None:
        rec = part["records"][3]
        rec["packed_record_id"] = "elsewhere"
        for f in rec["frames"]:
            for r in f["ranges"]:
                r["range_id"] = f"elsewhere:{f['component_id']}:{r['component_offset']}"

    ref = forge(world, "other-record", edit_part=first_shard(edit))
    with pytest.raises(CustodyError, match=r"range elsewhere:.* of record 3 .* shard easy/s0"):
        approve_with(world, ref)


def test_refuses_a_continuation_range_at_its_frame_start(world: dict[str, Any]) -> None:
    def edit(part: dict[str, Any]) -> None:
        frame = part["records"][0]["frames"][0]  # p7's frame A, now a later piece of its document
        frame["component_start"] = 40
        frame["ranges"] = [{"range_id": "p7:A:40", "component_offset": 40, "length": 5, "sha256": "0" * 64}]

    ref = forge(world, "continuation", edit_part=first_shard(edit))
    with pytest.raises(CustodyError, match=r"range p7:A:40 of record 0 .* shard easy/s0.*predecessor"):
        approve_with(world, ref)


def _p7(part: dict[str, Any]) -> dict[str, Any]:
    return part["records"][0]


@pytest.mark.parametrize(
    "name, edit, match",
    [
        ("outside-frame", lambda p: _p7(p)["frames"][1]["ranges"][1].update(length=4), "outside its frame"),
        (
            "overlap-ranges",
            lambda p: _p7(p)["frames"][1]["ranges"][1].update(range_id="p7:B:2", component_offset=2),
            "bear loss twice",
        ),
        ("overlap-frames", lambda p: _p7(p)["frames"][0].update(end=6), "overlaps frame"),
        ("past-count", lambda p: _p7(p)["frames"][1].update(end=13), "runs past"),
        ("missing-record", lambda p: p["records"].pop(4), "missing"),
        ("twice", lambda p: p["records"][5].update(record_index=4), "listed twice"),
    ],
)
def test_refuses_bad_geometry(world: dict[str, Any], name: str, edit: Any, match: str) -> None:
    ref = forge(world, name, edit_part=first_shard(edit))
    with pytest.raises(ManifestError, match=match):
        approve_with(world, ref)


def test_refuses_rows_above_max_rows(world: dict[str, Any]) -> None:
    with pytest.raises(ManifestError, match="max_rows=4"):
        world["approved"].component_range_materializer("train", max_rows=4)
    assert world["approved"].component_range_materializer("train", max_rows=16).max_rows == 16


def test_a_shard_altered_after_approval_fails_at_its_first_block(
    packed_records: ModuleType, build_chain: Callable[..., Any], tmp_path: Path
) -> None:
    vault = TrainVault()
    chain = build_chain(vault, str(tmp_path), shards=2, block_bytes=512, shard_records=packed_records.shard_records)
    binding = vault.build_component_ledger(chain.manifest_uri, split="train", declare=packed_records.declare)
    approved = vault.approve_dataset(chain.request(sidecars=binding.sidecars()))
    m = approved.component_range_materializer("train")
    shard = approved.manifest.splits["train"].shards[0]
    path = Path(shard.uri.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size: only the block digest can tell
    path.write_bytes(bytes(data))
    got = []
    with pytest.raises(IntegrityError, match="block 0"):
        for r in m.iter_records():
            got.append(r)
    assert got == []
    loader = approved.loader_factory(collate_fn=list, materializer=m).load("train")
    with pytest.raises(IntegrityError, match="block 0"):
        next(iter(loader))


# -- the approved loader over logical records --------------------------------------


def ids_of(batches: list[list[dict[str, Any]]]) -> list[list[str]]:
    return [[r["range_id"] for r in b] for b in batches]


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_record_continues_identically(world: dict[str, Any], workers: int) -> None:
    approved = world["approved"]
    m = approved.component_range_materializer("train")
    args = {"batch_size": 3, "num_workers": workers}
    full = ids_of(list(approved.loader_factory(collate_fn=list, dataloader_args=args, materializer=m).load("train")))
    assert [rid for b in full for rid in b] == [r["range_id"] for r in m.iter_records()]
    loader = approved.loader_factory(collate_fn=list, dataloader_args=args, materializer=m).load("train")
    it = iter(loader)
    # Stop at a batch boundary that falls inside a packed record (its next range is the same record's).
    flat = [rid for b in full for rid in b]
    stop = next(k for k in range(1, len(full)) if flat[3 * k - 1].split(":")[0] == flat[3 * k].split(":")[0])
    seen = [[r["range_id"] for r in next(it)] for _ in range(stop)]
    state = loader.state_dict()
    del it
    assert state["position"] == 3 * stop and "view_sha256" in state
    resumed = approved.loader_factory(collate_fn=list, dataloader_args=args, materializer=m).load("train")
    resumed.load_state_dict(state)
    assert seen + ids_of(list(resumed)) == full


def test_group_batches_and_resume_state_binds_the_view(world: dict[str, Any]) -> None:
    from trainvault.errors import ResumeStateError

    approved = world["approved"]
    g = approved.component_range_materializer("train", mode="group")
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 4}, materializer=g).load("train")
    batches = list(loader)
    assert [r["packed_record_id"] for b in batches for r in b] == [r["packed_record_id"] for r in g.iter_records()]
    unpack = approved.loader_factory(collate_fn=list, materializer=approved.component_range_materializer("train"))
    other = unpack.load("train")
    with pytest.raises(ResumeStateError, match="record view"):
        other.load_state_dict(loader.state_dict())
    with pytest.raises(Exception, match="covers split 'train'"):
        unpack.load("valid")


# -- the varlen collate ------------------------------------------------------------------


def collated(approved: Any, mode: str, batch_size: int, workers: int) -> list[dict[str, Any]]:
    m = approved.component_range_materializer("train", mode=mode)
    args = {"batch_size": batch_size, "num_workers": workers}
    return list(
        approved.loader_factory(collate_fn=collate_sequences, dataloader_args=args, materializer=m).load("train")
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_collate_sequences_packs_ranges_into_one_varlen_buffer(world: dict[str, Any], workers: int) -> None:
    approved = world["approved"]
    records = list(approved.component_range_materializer("train").iter_records())
    batches = collated(approved, "unpack", 5, workers)
    assert [rid for b in batches for rid in b["range_ids"]] == [r["range_id"] for r in records]
    k = 0
    for b in batches:
        seqs = records[k : k + len(b["range_ids"])]
        k += len(seqs)
        # One buffer a batch: in a worker, one shared-memory segment reaches the trainer.
        assert len({t.untyped_storage().data_ptr() for t in b.values() if isinstance(t, torch.Tensor)}) == 1
        assert b["cu_seqlens"].dtype == torch.int32 and b["input_ids"].dtype == torch.int32
        assert b["cu_seqlens"].diff().tolist() == [len(s["input_ids"]) for s in seqs]
        assert b["max_seqlen"] == max(len(s["input_ids"]) for s in seqs)
        for name in ("input_ids", "position_ids", "loss_mask"):
            assert b[name].tolist() == np.concatenate([s[name] for s in seqs]).tolist()
        starts = b["cu_seqlens"][:-1].tolist()
        flat_targets = [t + o for s, o in zip(seqs, starts, strict=False) for t in s["target_row_indices"].tolist()]
        assert b["target_row_indices"].dtype == torch.int64 and b["target_row_indices"].tolist() == flat_targets
        assert b["ce_valid"].all() and len(b["ce_valid"]) == len(flat_targets)
        # The loss pairs logits at each target row with the next row's token: the loss-bearing tokens.
        ids = b["input_ids"]
        assert ids[b["target_row_indices"] + 1].tolist() == ids[b["loss_mask"]].tolist()
    assert k == len(records)


def test_collate_sequences_flattens_group_records_like_unpack(world: dict[str, Any]) -> None:
    approved = world["approved"]
    unpack, group = collated(approved, "unpack", 7, 0), collated(approved, "group", 3, 2)
    for name in ("input_ids", "position_ids", "loss_mask", "ce_valid"):
        assert torch.cat([b[name] for b in group]).tolist() == torch.cat([b[name] for b in unpack]).tolist()
    assert [r for b in group for r in b["range_ids"]] == [r for b in unpack for r in b["range_ids"]]
    assert sum(len(b["target_row_indices"]) for b in group) == sum(len(b["target_row_indices"]) for b in unpack)


def test_collate_sequences_refuses_records_that_are_not_materialised(world: dict[str, Any]) -> None:
    plain = world["approved"].loader_factory(collate_fn=collate_sequences).load("train")
    with pytest.raises(TypeError, match="component range materializer"):
        next(iter(plain))
    empty = collate_sequences([])
    assert empty["cu_seqlens"].tolist() == [0] and len(empty["input_ids"]) == 0 and empty["max_seqlen"] == 0


def test_a_user_collate_gets_owned_records(world: dict[str, Any]) -> None:
    approved = world["approved"]
    m = approved.component_range_materializer("train", mode="group")
    args = {"batch_size": 4, "num_workers": 2}
    batches = list(approved.loader_factory(collate_fn=list, dataloader_args=args, materializer=m).load("train"))
    records = [r for b in batches for r in b]
    assert records and all(type(r) is dict for r in records)
    for s in (s for r in records for s in r["component_sequences"]):
        for name in ("input_ids", "position_ids", "loss_mask", "target_row_indices", "ce_valid"):
            assert s[name].base is None and s[name].flags.writeable, name  # a fresh array, nothing shared


# -- PositionBudget over logical records -----------------------------------------------


def test_a_budget_boundary_fires_once_across_a_resume_mid_record(world: dict[str, Any]) -> None:
    approved = world["approved"]
    m = approved.component_range_materializer("train")
    args = {"batch_size": 3, "num_workers": 2}

    def load() -> Any:
        return approved.loader_factory(collate_fn=collate_sequences, dataloader_args=args, materializer=m).load("train")

    flat = [rid for b in load() for rid in b["range_ids"]]
    assert len(flat) == m.logical_records
    # Stop after batch `stop`, between two ranges of one packed record.
    stop = next(k for k in range(1, len(flat) // 3) if flat[3 * k - 1].split(":")[0] == flat[3 * k].split(":")[0])
    marks = [3 * stop - 1, 3 * stop + 2]  # reached inside the last batch before the stop, and the first after
    budget = PositionBudget(m.logical_records, checkpoints=marks)
    fired = []
    loader = load()
    it = iter(loader)
    for _ in range(stop):
        fired += budget.consume(next(it)["logical_records"])
    state, snapshot = loader.state_dict(), budget.snapshot()
    del it
    assert budget.consumed == state["position"] == 3 * stop
    again = PositionBudget(m.logical_records, checkpoints=marks)
    again.restore(snapshot)
    resumed = load()
    resumed.load_state_dict(state)
    rest = list(resumed)
    for b in rest:
        fired += again.consume(b["logical_records"])
    assert [b.position for b in fired] == marks and again.exhausted
    assert flat[: 3 * stop] + [rid for b in rest for rid in b["range_ids"]] == flat


def test_group_batches_count_packed_records_as_positions(world: dict[str, Any]) -> None:
    approved = world["approved"]
    g = approved.component_range_materializer("train", mode="group")
    loader = approved.loader_factory(
        collate_fn=collate_sequences, dataloader_args={"batch_size": 4, "num_workers": 2}, materializer=g
    ).load("train")
    budget = PositionBudget(g.logical_records)
    it = iter(loader)
    for b in it:
        budget.consume(b["logical_records"])
        assert b["logical_records"] == len(set(b["packed_record_ids"]))
    assert budget.exhausted and g.logical_records == len(list(g.iter_records()))


def test_a_signed_approval_reopens_with_its_checked_ledger(world: dict[str, Any]) -> None:
    from trainvault.approval import SigningKey, write_approval

    vault, approved = world["vault"], world["approved"]
    key = SigningKey.generate()
    written = write_approval(vault, f"{world['chain'].root}/approval-ledger.json", approved, signing_keys=[key])
    opened = vault.open_approved(written.uri, written.sha256, trusted_keys=[key.public_key])
    mine = [r["range_id"] for r in opened.component_range_materializer("train").iter_records()]
    assert mine == [r["range_id"] for r in approved.component_range_materializer("train").iter_records()]
