"""Approval with exclusions: exclusions-v1 from a report, bound by the request, checked by the
gate (policy, fraction, existence, coverage) and skipped by the approved loader."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import (
    ApprovalError,
    ContaminationError,
    ManifestError,
    ResumeStateError,
    TrainVault,
)
from trainvault.approval import ApprovalPolicy, SigningKey, write_approval
from trainvault.approval.gate import approve_dataset
from trainvault.approval.record import open_approved
from trainvault.contamination import (
    Exclusions,
    VerifierContract,
    exclusions_from_report,
)
from trainvault.loading import LoaderPlan, Observability, SplitLoaderFactory

ALLOW = ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 10))
#: E's loader skips excluded records (`exclude=`); until it lands the approved loader refuses to load.


@pytest.fixture
def dirty(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    """Three train shards of 30 records and a valid shard; train/hard/s2 record 15 holds tiny-1."""
    return build_chain(TrainVault(), str(tmp_path / "dirty"), shards=3, contaminate=True)


def exclusions_of(chain: Any) -> Exclusions:
    return exclusions_from_report(chain.extra["report"], report_sha256=chain.refs["contamination_report"].sha256)


def edited(ex: Exclusions, **changes: Any) -> Exclusions:
    return Exclusions.from_obj({**ex.model_dump(mode="json"), **changes})


def test_exclusions_from_a_report_name_every_hit_record(dirty: Any) -> None:
    ex = exclusions_of(dirty)
    assert [(r.split, r.shard, r.record_index) for r in ex.records] == [("train", "hard/s2", 15)]
    assert [(x.benchmark, x.item_id) for x in ex.records[0].reasons] == [("tiny", "tiny-1")]
    assert ex.data_manifest_sha256 == dirty.refs["data_manifest"].sha256
    assert dict(ex.by_shard("train")) == {"hard/s2": frozenset({15})} and dict(ex.by_shard("valid")) == {}
    assert ex.per_benchmark() == {"tiny": 1}
    assert Exclusions.from_json_bytes(ex.to_json_bytes()) == ex


def test_the_gate_approves_what_remains_and_records_the_exclusions(dirty: Any, tmp_path: Path) -> None:
    with pytest.raises(ApprovalError, match=r"fails under the contract's policy .*or bind exclusions"):
        approve_dataset(dirty.vault, dirty.request(), policy=ALLOW)
    request = dirty.with_exclusions(exclusions_of(dirty))
    approved = approve_dataset(dirty.vault, request, policy=ALLOW)
    s = approved.summary
    assert s.exclusions is not None and s.exclusions.records == 1 and s.exclusions.per_benchmark == {"tiny": 1}
    assert s.exclusions.sha256 == request.sidecars["exclusions"].sha256 and s.contaminated_items == 1
    assert (
        approved.exclusions == exclusions_of(dirty)
        and approved.bindings["exclusions"] == request.sidecars["exclusions"]
    )
    key = SigningKey.generate()
    written = write_approval(dirty.vault, str(tmp_path / "approval.json"), approved, signing_keys=key)
    opened = open_approved(dirty.vault, written.uri, written.sha256, trusted_keys=[key], policy=ALLOW)
    assert opened.exclusions == approved.exclusions
    # A trainer whose policy forbids exclusions does not open it.
    with pytest.raises(ApprovalError, match="does not allow exclusions"):
        open_approved(dirty.vault, written.uri, written.sha256, trusted_keys=[key])


@pytest.mark.parametrize(
    "policy, match",
    [
        (ApprovalPolicy(), "the trainer's policy does not allow exclusions"),
        (
            ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 100)),
            r"leave out 1 of 95 records, more than "
            r"the policy's 1/100",
        ),
    ],
)
def test_exclusions_the_policy_does_not_allow_are_refused(dirty: Any, policy: ApprovalPolicy, match: str) -> None:
    with pytest.raises(ApprovalError, match=match):
        approve_dataset(dirty.vault, dirty.with_exclusions(exclusions_of(dirty)), policy=policy)


def test_bad_exclusions_are_refused(dirty: Any) -> None:
    ex = exclusions_of(dirty)
    record = ex.records[0].model_dump(mode="json")
    cases = {
        "uncovered": (edited(ex, records=[]), "which the exclusions do not cover"),
        "no such record": (
            edited(ex, records=[{**record, "record_index": 30}]),
            "which the data manifest does not hold",
        ),
        "no such shard": (
            edited(ex, records=[{**record, "shard": "hard/s9"}]),
            "which the data manifest does not hold",
        ),
        "other shard bytes": (edited(ex, records=[{**record, "shard_sha256": "0" * 64}]), "does not hold"),
        "other manifest": (edited(ex, data_manifest_sha256="1" * 64), "the exclusions name data manifest"),
        "other report": (edited(ex, contamination_report_sha256="2" * 64), "generated from report"),
    }
    for name, (bad, match) in cases.items():
        with pytest.raises(ApprovalError, match=match):
            approve_dataset(dirty.vault, dirty.with_exclusions(bad, name=f"{name}.json"), policy=ALLOW)
    # Another record excluded as well as the hit one: covered, within the fraction, approved.
    more = edited(ex, records=[{**record, "record_index": 3}, record])
    assert approve_dataset(dirty.vault, dirty.with_exclusions(more, name="more.json"), policy=ALLOW).summary.exclusions


def test_malformed_exclusions_are_refused(dirty: Any) -> None:
    record = exclusions_of(dirty).records[0].model_dump(mode="json")
    base = exclusions_of(dirty).model_dump(mode="json")
    for records in (
        [record, record],
        [{**record, "record_index": 9}, {**record, "record_index": 3}],
        [{**record, "reasons": []}],
        [{**record, "record_index": -1}],
    ):
        with pytest.raises(ManifestError):
            Exclusions.from_obj({**base, "records": records})
    raw = dirty.put_raw("not-exclusions.json", b'{"format": "trainvault.exclusions", "version": 2}')
    with pytest.raises(ApprovalError, match=r"exclusions is not a readable trainvault\.exclusions"):
        approve_dataset(dirty.vault, dirty.request(sidecars={"exclusions": raw}), policy=ALLOW)
    with pytest.raises(ContaminationError, match="report_sha256"):
        exclusions_from_report(dirty.extra["report"], report_sha256="nope")


def test_a_report_that_capped_hits_cannot_be_excluded(
    eval_items: list[dict[str, str]], build_chain: Callable[..., Any], make_records: Callable[..., Any], tmp_path: Path
) -> None:
    def records(i: int) -> list[dict[str, Any]]:
        out = make_records(i, 20)
        if i == 1:
            for j in (2, 9):
                out[j]["text"] += " " + eval_items[0]["text"]
        return out

    chain = build_chain(
        TrainVault(),
        str(tmp_path / "capped"),
        shards=2,
        shard_records=records,
        contract=VerifierContract(max_hits_per_item=1),
    )
    with pytest.raises(ContaminationError, match="lists only some hits of 1 item"):
        exclusions_of(chain)
    ex = Exclusions.from_obj(
        {
            "format": "trainvault.exclusions",
            "version": 1,
            "data_manifest_sha256": chain.refs["data_manifest"].sha256,
            "contamination_report_sha256": chain.refs["contamination_report"].sha256,
            "records": [
                {
                    "split": "train",
                    "shard": "hard/s1",
                    "shard_sha256": chain.extra["report"].contaminated_items[0].hits[0].shard_sha256,
                    "record_index": 2,
                    "reasons": [{"benchmark": "tiny", "item_id": "tiny-0"}],
                }
            ],
        }
    )
    with pytest.raises(ApprovalError, match="lists only some hits"):
        approve_dataset(chain.vault, chain.with_exclusions(ex), policy=ALLOW)


@pytest.fixture
def excluded_chain(
    eval_items: list[dict[str, str]], build_chain: Callable[..., Any], make_records: Callable[..., Any], tmp_path: Path
) -> Any:
    """Hits in the first, a middle and the last block of train/easy/s0, and train/easy/s1 wholly
    contaminated: 43 excluded records, approved under a policy that allows half."""

    def records(i: int) -> list[dict[str, Any]]:
        out = make_records(i, 40)
        for j in (0, 17, 39) if i == 0 else range(40) if i == 1 else ():
            out[j]["text"] += " " + eval_items[2]["text"]
        return out

    chain = build_chain(TrainVault(), str(tmp_path / "load"), shards=3, shard_records=records, block_bytes=512)
    ex = exclusions_of(chain)
    approved = approve_dataset(
        chain.vault,
        chain.with_exclusions(ex),
        policy=ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 2)),
    )
    chain.extra["approved"] = approved
    chain.extra["excluded"] = {f"s{0 if r.shard == 'easy/s0' else 1}-{r.record_index}" for r in ex.records}
    return chain


def _texts(approved: Any, split: str, **args: Any) -> list[str]:
    loader = approved.loader_factory(collate_fn=lambda b: b, dataloader_args={"batch_size": 4, **args})
    return [r["id"] for batch in loader.load(split) for r in batch]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_approved_loader_never_yields_an_excluded_record(excluded_chain: Any, workers: int) -> None:
    chain, approved, excluded = excluded_chain, excluded_chain.extra["approved"], excluded_chain.extra["excluded"]
    assert len(excluded) == 43 and {"s0-0", "s0-17", "s0-39", "s1-0", "s1-39"} <= excluded
    assert _texts(approved, "valid", num_workers=workers) == [r["id"] for r in chain.records["valid"]]
    everything = [r["id"] for k in ("s0", "s1", "s2") for r in chain.records[k]]
    assert _texts(approved, "train", num_workers=workers) == [i for i in everything if i not in excluded]


def test_the_approved_loader_resumes_over_the_remaining_records(excluded_chain: Any) -> None:
    approved, excluded = excluded_chain.extra["approved"], excluded_chain.extra["excluded"]
    args = {"batch_size": 4}
    first = approved.loader_factory(collate_fn=lambda b: b, dataloader_args=args).load("train")
    assert len(first) == -(-(120 - 43) // 4)
    it = iter(first)
    seen = [r["id"] for _ in range(5) for r in next(it)]
    state = first.state_dict()
    resumed = approved.loader_factory(collate_fn=lambda b: b, dataloader_args={**args, "num_workers": 2}).load("train")
    resumed.load_state_dict(state)
    rest = [r["id"] for batch in resumed for r in batch]
    everything = [r["id"] for k in ("s0", "s1", "s2") for r in excluded_chain.records[k]]
    assert seen + rest == [i for i in everything if i not in excluded]
    # A state saved without the exclusions belongs to another order.
    plain = excluded_chain.vault.ungated_loader_factory(
        excluded_chain.manifest_uri, collate_fn=lambda b: b, dataloader_args=args
    ).load("train")
    next(iter(plain))
    with pytest.raises(ResumeStateError):
        resumed.load_state_dict(plain.state_dict())


# -- the approved loader takes every option the ungated one does, over the same code path --------


def _approved_ids(chain: Any, *, rank: int, world: int, batch: int, **options: Any) -> list[list[str]]:
    factory = chain.extra["approved"].loader_factory(
        collate_fn=lambda b: b, dataloader_args={"batch_size": batch}, rank=rank, world_size=world, **options
    )
    return [[r["id"] for r in b] for b in factory.load("train")]


def test_shuffled_ranks_deal_every_approved_record_once_and_no_excluded_one(excluded_chain: Any) -> None:
    excluded = excluded_chain.extra["excluded"]
    everything = [r["id"] for k in ("s0", "s1", "s2") for r in excluded_chain.records[k]]
    approved_ids = [i for i in everything if i not in excluded]
    per_rank = [
        _approved_ids(excluded_chain, rank=r, world=2, batch=4, shuffle=True, seed=7, shuffle_window_blocks=2)
        for r in (0, 1)
    ]
    dealt = [i for batches in per_rank for b in batches for i in b]
    assert sorted(dealt) == sorted(approved_ids) and not excluded & set(dealt)
    assert len(per_rank[0]) == len(per_rank[1])
    assert [i for b in per_rank[0] for i in b] != approved_ids[: len(dealt) // 2]  # shuffled, not manifest order
    # One code path: the ungated factory with the same exclusions deals exactly the same batches.
    ex = excluded_chain.extra["approved"].exclusions
    plan = LoaderPlan.create(
        collate_fn=lambda b: b, dataloader_args={"batch_size": 4}, shuffle=True, seed=7, shuffle_window_blocks=2
    )
    plain = SplitLoaderFactory(
        excluded_chain.vault.storage,
        excluded_chain.manifest_uri,
        dataclasses.replace(plan, rank=1, world_size=2),
        exclude=dict(ex.by_shard("train")),
    )
    assert [[r["id"] for r in b] for b in plain.load("train")] == per_rank[1]


def test_an_approved_shuffled_run_resumes_elastically_and_traces_its_steps(excluded_chain: Any) -> None:
    approved = excluded_chain.extra["approved"]
    options = {"collate_fn": lambda b: b, "shuffle": True, "seed": 3, "observe": Observability(window_steps=2)}
    whole = [
        [r["id"] for r in b]
        for b in approved.loader_factory(dataloader_args={"batch_size": 4}, **options).load("train")
    ]
    first = approved.loader_factory(dataloader_args={"batch_size": 4}, **options).load("train")
    it = iter(first)
    seen = [r["id"] for _ in range(3) for r in next(it)]
    assert [t.id for t in first.trace(1)] == whole[1] and first.figures()["step"] == 2
    state = first.state_dict()
    resumed = approved.loader_factory(dataloader_args={"batch_size": 5, "num_workers": 2}, **options).load("train")
    resumed.load_state_dict(state)
    rest = [r["id"] for b in resumed for r in b]
    assert seen + rest == [i for b in whole for i in b]


def test_an_approved_loader_iterates_infinitely_without_an_excluded_record(excluded_chain: Any) -> None:
    excluded = excluded_chain.extra["excluded"]
    loader = (
        excluded_chain.extra["approved"]
        .loader_factory(collate_fn=lambda b: b, dataloader_args={"batch_size": 8}, shuffle=True)
        .load("train", infinite_iter=True)
    )
    it = iter(loader)
    dealt = [r["id"] for _ in range(30) for r in next(it)]  # three epochs of 77 records
    assert len(set(dealt)) == 120 - 43 and not excluded & set(dealt)
