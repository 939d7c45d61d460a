"""Amendments: signed, chained takedowns; the amended view deals no removed record, the chain's
refusals are typed, and a run's state says which of its steps read what was later removed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, ManifestError, TrainVault
from trainvault.approval import ApprovalPolicy, SigningKey, write_approval
from trainvault.approval.amend import amend
from trainvault.approval.amendment import Amendment, Removal, amendment_statement, amendment_uri
from trainvault.approval.dsse import sign_envelope
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import AmendmentError

APPROVER = SigningKey.generate()
SECOND = SigningKey.generate()
STRANGER = SigningKey.generate()
ROOM = (1, 5)  # the tests' datasets are small: 1/100 of 85 records is less than one


def shard_key(shard: str) -> str:
    return f"{'hard' if shard == 's3' else 'easy'}/{shard}"


@pytest.fixture
def approved(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    chain = build_chain(TrainVault(), str(tmp_path), shards=4, records_per_shard=20, block_bytes=256)
    gated = chain.vault.approve_dataset(chain.request())
    written = write_approval(chain.vault, f"{chain.root}/approval.json", gated, signing_keys=[APPROVER, SECOND])
    return chain, written


def open_it(
    chain: Any, written: Any, amendments: Any = None, keys: Any = (APPROVER,), room: Any = ROOM, **kw: Any
) -> Any:
    return chain.vault.open_approved(
        written.uri,
        written.sha256,
        trusted_keys=[k.public_key for k in keys],
        amendments=amendments,
        policy=ApprovalPolicy(max_removed_fraction=room),
        **kw,
    )


def prefix_of(written: Any) -> str:
    return written.uri.rsplit("/", 1)[0] + "/amendments"


def ids_of(chain: Any, removed: set[str]) -> list[str]:
    return [r["id"] for k in ("s0", "s1", "s2", "s3") for r in chain.records[k] if r["id"] not in removed]


def test_an_amendment_removes_records_from_every_loader(approved: Any) -> None:
    chain, written = approved
    opened = open_it(chain, written)
    first = amend(
        chain.vault,
        opened,
        [
            {"split": "train", "shard": "easy/s0", "record_index": 3, "reason": "licence"},
            {"split": "train", "record_id": "s2-7", "reason": "opt-out", "note": "request 17"},
        ],
        signing_keys=[APPROVER],
    )
    assert first.uri.startswith(f"{prefix_of(written)}/{written.sha256}/000001-")
    assert [(r.shard, r.record_index, r.reason) for r in first.amendment.removed] == [
        ("easy/s0", 3, "licence"),
        ("easy/s2", 7, "opt-out"),
    ]
    amended = open_it(chain, written, prefix_of(written))
    got = [r["id"] for b in amended.loader_factory(collate_fn=list).load("train") for r in b]
    assert got == ids_of(chain, {"s0-3", "s2-7"})
    # The approval alone still deals everything: an amendment rewrites no shard.
    assert [r["id"] for b in opened.loader_factory(collate_fn=list).load("train") for r in b] == ids_of(chain, set())
    # The second amendment chains to the first and adds to it.
    second = amend(
        chain.vault,
        amended,
        [{"split": "train", "record_id": "s3-0", "reason": "personal-data"}],
        signing_keys=APPROVER,
    )
    assert second.amendment.previous_sha256 == first.sha256 and second.amendment.sequence == 2
    amended = open_it(chain, written, prefix_of(written))
    assert [a.uri for a in amended.amendments.amendments] == [first.uri, second.uri]
    removed = {"s0-3", "s2-7", "s3-0"}
    for workers in (0, 2):
        seen: list[str] = []
        for rank in (0, 1):
            factory = amended.loader_factory(
                collate_fn=list,
                dataloader_args={"batch_size": 3, "num_workers": workers},
                shuffle=True,
                seed=5,
                rank=rank,
                world_size=2,
            )
            seen += [r["id"] for b in factory.load("train") for r in b]
        assert sorted(set(seen)) == sorted(ids_of(chain, removed)) and not removed & set(seen)
    with pytest.raises(AmendmentError, match="already removed"):
        amend(
            chain.vault, amended, [{"split": "train", "record_id": "s3-0", "reason": "licence"}], signing_keys=APPROVER
        )


def _signed(document: Amendment, written: Any, keys: Any = (APPROVER,)) -> bytes:
    return sign_envelope(canonical_json(amendment_statement(document, written.uri)), list(keys)).to_json_bytes()


def _put(chain: Any, written: Any, data: bytes, sequence: int) -> str:
    uri = amendment_uri(prefix_of(written), written.sha256, sequence, sha256_hex(data))
    chain.vault.storage.put_create(uri, data)
    return uri


def _doc(chain: Any, written: Any, sequence: int, previous: str | None, removed: list[tuple[int, int]]) -> Amendment:
    opened = open_it(chain, written)
    return Amendment(
        approval_sha256=written.sha256,
        data_manifest_sha256=opened.manifest_sha256,
        sequence=sequence,
        previous_sha256=previous,
        removed=[
            Removal(split="train", shard="easy/s1", record_index=i, reason="licence", amendment=a) for a, i in removed
        ],
    )


def test_an_amendment_signed_by_an_untrusted_key_or_below_threshold_is_refused(approved: Any) -> None:
    chain, written = approved
    doc = _doc(chain, written, 1, None, [(1, 2)])
    _put(chain, written, _signed(doc, written, keys=[STRANGER]), 1)
    with pytest.raises(AmendmentError, match="not signed by 1 of the trusted keys"):
        open_it(chain, written, prefix_of(written))
    # The approver does not chain onto it either.
    with pytest.raises(AmendmentError, match="not signed by 1 of the trusted keys"):
        amend(
            chain.vault,
            open_it(chain, written),
            [{"split": "train", "record_id": "s0-0", "reason": "licence"}],
            signing_keys=APPROVER,
        )
    other = f"{chain.root}/one-key.dsse.json"
    chain.vault.storage.put_create(other, _signed(doc, written, keys=[APPROVER]))
    both = (APPROVER, SECOND)
    with pytest.raises(AmendmentError, match="not signed by 2 of the trusted keys"):
        open_it(chain, written, [other], keys=both, threshold=2)
    assert open_it(chain, written, [other], keys=both, threshold=1).amendments.latest.uri.endswith("one-key.dsse.json")


def test_an_amendment_of_another_approval_is_refused(approved: Any, build_chain: Callable[..., Any]) -> None:
    chain, written = approved
    other_chain = build_chain(TrainVault(), f"{chain.root}/other", shards=2, records_per_shard=10, seed_offset=7)
    other = write_approval(
        other_chain.vault,
        f"{other_chain.root}/approval.json",
        other_chain.vault.approve_dataset(other_chain.request()),
        signing_keys=[APPROVER],
    )
    theirs = amend(
        chain.vault,
        open_it(other_chain, other),
        [{"split": "train", "shard": "easy/s0", "record_index": 0, "reason": "licence"}],
        signing_keys=APPROVER,
    )
    with pytest.raises(AmendmentError, match=f"amends approval {other.sha256}"):
        open_it(chain, written, [theirs.uri])
    copied = f"{prefix_of(written)}/{written.sha256}/000001-copied.dsse.json"
    chain.vault.storage.put_create(copied, chain.vault.storage.get(theirs.uri))
    with pytest.raises(AmendmentError, match="amends approval"):
        open_it(chain, written, prefix_of(written))
    with pytest.raises(AmendmentError, match="amends approval"):
        amend(
            chain.vault,
            open_it(chain, written),
            [{"split": "train", "record_id": "s0-0", "reason": "licence"}],
            signing_keys=APPROVER,
        )


@pytest.mark.parametrize("break_it", ["gap", "fork", "predecessor", "adds back", "changes a reason"])
def test_a_broken_chain_or_one_that_adds_records_back_is_refused(approved: Any, break_it: str) -> None:
    chain, written = approved
    one = _signed(_doc(chain, written, 1, None, [(1, 2)]), written)
    first = _put(chain, written, one, 1)
    first_sha = sha256_hex(one)
    if break_it == "gap":
        _put(chain, written, _signed(_doc(chain, written, 3, first_sha, [(1, 2), (3, 4)]), written), 3)
        match = "sequence numbers are"
    elif break_it == "fork":
        _put(chain, written, _signed(_doc(chain, written, 1, None, [(1, 5)]), written), 1)
        match = "sequence numbers are"
    elif break_it == "predecessor":
        _put(chain, written, _signed(_doc(chain, written, 2, "0" * 64, [(1, 2), (2, 4)]), written), 2)
        match = "follows 0000"
    elif break_it == "adds back":
        _put(chain, written, _signed(_doc(chain, written, 2, first_sha, [(2, 4)]), written), 2)
        match = "adds back 1 record"
    else:
        doc = _doc(chain, written, 2, first_sha, [(1, 2), (2, 4)])
        changed = doc.model_copy(
            update={"removed": [doc.removed[0].model_copy(update={"reason": "opt-out"}), doc.removed[1]]}
        )
        _put(chain, written, _signed(changed, written), 2)
        match = "changes earlier removals"
    with pytest.raises(AmendmentError, match=match):
        open_it(chain, written, prefix_of(written))
    assert open_it(chain, written, [first]).amendments.latest.uri == first  # the first alone still holds


def test_removing_more_than_the_policy_allows_is_refused(approved: Any) -> None:
    chain, written = approved
    opened = open_it(chain, written)
    removals = [{"split": "train", "shard": "easy/s0", "record_index": i, "reason": "opt-out"} for i in range(5)]
    amend(chain.vault, opened, removals, signing_keys=APPROVER)
    assert len(open_it(chain, written, prefix_of(written), room=(5, 85)).amendments.removed) == 5
    with pytest.raises(AmendmentError, match=r"remove 5 of 85 records, more than the 4/85 .*max_removed_fraction"):
        open_it(chain, written, prefix_of(written), room=(4, 85))
    with pytest.raises(AmendmentError, match="more than the 1/100"):
        chain.vault.open_approved(
            written.uri, written.sha256, trusted_keys=[APPROVER.public_key], amendments=prefix_of(written)
        )
    for bad in ((2, 1), (1, 0), (-1, 5), (True, 2), "1/5"):
        with pytest.raises(ApprovalError, match=r"ApprovalPolicy.max_removed_fraction must be"):
            open_it(chain, written, prefix_of(written), room=bad)


@pytest.mark.parametrize(
    ("removal", "match"),
    [
        ({"split": "train", "shard": "easy/s0", "record_index": 1, "reason": "boredom"}, "a reason in"),
        ({"split": "train", "shard": "easy/s9", "record_index": 1, "reason": "licence"}, "no such shard"),
        ({"split": "train", "shard": "easy/s0", "record_index": 20, "reason": "licence"}, "holds 20 records"),
        ({"split": "train", "record_id": "nope", "reason": "licence"}, "no record with id 'nope'"),
        ({"split": "nope", "record_id": "s0-1", "reason": "licence"}, "no split 'nope'"),
        ({"split": "train", "shard": "easy/s0", "record_index": -1, "reason": "licence"}, "is not valid"),
    ],
)
def test_bad_removals_are_refused_and_write_nothing(approved: Any, removal: dict[str, Any], match: str) -> None:
    chain, written = approved
    with pytest.raises(AmendmentError, match=match):
        amend(chain.vault, open_it(chain, written), [removal], signing_keys=APPROVER)
    assert chain.vault.storage.list(prefix_of(written) + "/") == []


def test_bad_amendment_files_and_requests_are_refused(approved: Any) -> None:
    chain, written = approved
    opened = open_it(chain, written)
    with pytest.raises(AmendmentError, match="at least one record"):
        amend(chain.vault, opened, [], signing_keys=APPROVER)
    two = [{"split": "train", "record_id": "s0-1", "reason": "licence"}] * 2
    with pytest.raises(AmendmentError, match="named twice"):
        amend(chain.vault, opened, two, signing_keys=APPROVER)
    just_approved = chain.vault.approve_dataset(chain.request())
    with pytest.raises(AmendmentError, match="opened from its signed record"):
        amend(chain.vault, just_approved, two[:1], signing_keys=APPROVER)
    bad = f"{prefix_of(written)}/{written.sha256}/000001-bad.dsse.json"
    chain.vault.storage.put_create(
        bad, b'{"payload": "e30=", "payloadType": "application/vnd.in-toto+json", "signatures": []}'
    )
    with pytest.raises(ManifestError, match="is not an amendment"):
        open_it(chain, written, prefix_of(written))
    with pytest.raises(ManifestError, match="is not an amendment"):
        open_it(chain, written, [written.uri])  # the approval record itself


def _run(factories: list[Any], steps: int, state: Any = None) -> tuple[list[list[list[str]]], Any]:
    """`steps` steps of a run on len(factories) ranks in lockstep: ids per step per rank, and rank 0's state."""
    loaders = [f.load("train") for f in factories]
    if state is not None:
        for ld in loaders:
            ld.load_state_dict(state)
    its = [iter(ld) for ld in loaders]
    out = [[[r["id"] for r in next(it)] for it in its] for _ in range(steps)]
    return out, loaders[0].state_dict()


@pytest.mark.parametrize("workers", [0, 2])
def test_removed_reads_names_the_steps_that_read_removed_records_exactly(approved: Any, workers: int) -> None:
    chain, written = approved
    opened = open_it(chain, written)

    def factories(batch: int) -> list[Any]:
        args = {"batch_size": batch, "num_workers": workers}
        return [
            opened.loader_factory(collate_fn=list, dataloader_args=args, shuffle=True, seed=3, rank=r, world_size=2)
            for r in (0, 1)
        ]

    before, state = _run(factories(4), 3)  # steps 0-2 at batch size 4
    after, state = _run(factories(6), 2, state)  # resumed at batch size 6: steps 3-4
    steps = before + after
    read = {rid for step in steps for batch in step for rid in batch}
    unread = sorted({r["id"] for k in ("s0", "s1", "s2", "s3") for r in chain.records[k]} - read)
    targets = [steps[1][0][0], steps[1][0][2], steps[4][1][-1], unread[0]]
    index = {r["id"]: (shard_key(k), i) for k in ("s0", "s1", "s2", "s3") for i, r in enumerate(chain.records[k])}
    amend(
        chain.vault,
        opened,
        [{"split": "train", "record_id": t, "reason": "personal-data", "note": t} for t in targets],
        signing_keys=APPROVER,
    )
    amended = open_it(chain, written, prefix_of(written))
    # Independently: every (step, rank, record) whose batch held a target, from what the ranks received.
    expected = sorted(
        (s, rank, *index[rid], rid)
        for s, step in enumerate(steps)
        for rank, batch in enumerate(step)
        for rid in batch
        if rid in targets
    )
    got = sorted((r.step, r.rank, r.shard, r.record_index, r.note) for r in amended.removed_reads(state))
    assert got == expected and len(got) == 3
    assert all(r.reason == "personal-data" and r.amendment == 1 for r in amended.removed_reads(state))
    # A state saved under the amended view read nothing later removed.
    fresh = amended.loader_factory(collate_fn=list, dataloader_args={"batch_size": 4}).load("train")
    next(iter(fresh))
    assert amended.removed_reads(fresh.state_dict()) == []
    with pytest.raises(AmendmentError, match="without amendments"):
        opened.removed_reads(state)


def test_the_cli_amends_verifies_and_lists_removed_reads(
    approved: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from trainvault.cli import main

    chain, written = approved
    key, pub = tmp_path / "approver.key", tmp_path / "approver.pub"
    key.write_bytes(APPROVER.to_pem())
    pub.write_bytes(APPROVER.public_key.to_pem())
    opened = open_it(chain, written)
    loader = opened.loader_factory(collate_fn=list, dataloader_args={"batch_size": 5}).load("train")
    it = iter(loader)
    first = [r["id"] for r in next(it)]
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(loader.state_dict()))
    removals = tmp_path / "removals.json"
    removals.write_text(
        json.dumps([{"split": "train", "record_id": first[2], "reason": "licence", "note": "ticket 9"}])
    )
    approval = [written.uri, "--sha256", written.sha256, "--trusted-key", str(pub), "--quiet"]
    prefix = ["--amendments", prefix_of(written), "--max-removed", "1/10"]
    assert main(["amend", *approval, "--removals", str(removals), "--signing-key", str(key)]) == 0
    assert "amendment 1 of" in capsys.readouterr().out
    assert main(["verify", *approval, *prefix]) == 0
    assert "amended: 1 amendment(s) remove 1 records" in capsys.readouterr().out
    assert main(["removed-reads", *approval, *prefix, "--state", str(state_path)]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("1 removed records read, at 1 steps")
        and "step 0 rank 0 epoch 0: train\teasy/s0\t2\tlicence (ticket 9)" in out
    )
    assert main(["removed-reads", *approval, "--state", str(state_path)]) == 1
    assert "needs the amendments" in capsys.readouterr().err
    assert main(["verify", *approval, "--amendments", prefix_of(written)]) == 1  # 1 of 85 > the default 1/100
    assert "more than the 1/100" in capsys.readouterr().err


def test_no_croissant_card_describes_an_amended_view_yet(approved: Any) -> None:
    from trainvault import ApprovalError
    from trainvault.cards.croissant import croissant_card

    chain, written = approved
    amend(
        chain.vault,
        open_it(chain, written),
        [{"split": "train", "record_id": "s1-1", "reason": "licence"}],
        signing_keys=APPROVER,
    )
    with pytest.raises(ApprovalError, match="amended view is not supported"):
        croissant_card(chain.vault, open_it(chain, written, prefix_of(written)))


def test_amendments_are_found_on_every_store(
    vault_root: tuple[TrainVault, str], build_chain: Callable[..., Any]
) -> None:
    vault, root = vault_root
    chain = build_chain(vault, root, shards=2, records_per_shard=10)
    written = write_approval(
        vault, f"{root}/approval.json", vault.approve_dataset(chain.request()), signing_keys=APPROVER
    )
    prefix = f"{root}/amendments"
    one = amend(
        vault,
        open_it(chain, written),
        [{"split": "train", "record_id": "s1-4", "reason": "licence"}],
        signing_keys=APPROVER,
        prefix=prefix,
    )
    amended = open_it(chain, written, prefix)
    assert amended.amendments.latest.uri == one.uri
    ids = [r["id"] for b in amended.loader_factory(collate_fn=list).load("train") for r in b]
    assert ids == [r["id"] for k in ("s0", "s1") for r in chain.records[k] if r["id"] != "s1-4"]
