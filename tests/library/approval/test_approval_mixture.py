"""Mixtures through the approved loader: components are approved stages, bound exclusions
are never dealt, and a PositionBudget per component counts what the mixture report counts."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainvault import ConfigurationError, ResumeStateError, SelectionError, TrainVault  # noqa: E402
from trainvault.approval import ApprovalPolicy  # noqa: E402
from trainvault.approval.gate import approve_dataset  # noqa: E402
from trainvault.contamination import exclusions_from_report  # noqa: E402
from trainvault.loading import PositionBudget  # noqa: E402
from trainvault.mixtures import Mixture, MixtureComponent, load_mixture  # noqa: E402

MIX = Mixture("train", [MixtureComponent("easy", 1, "easy", run_out="drop"), MixtureComponent("hard", 1, "hard")])


@pytest.fixture(scope="module")
def approved(
    eval_items: list[dict[str, str]],
    build_chain: Callable[..., Any],
    make_records: Callable[..., Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Any:
    """easy = s0 + s1 (80 records, 43 excluded: hits in s0 0/17/39 and all of s1), hard = s2 (40)."""

    def records(i: int) -> list[dict[str, Any]]:
        out = make_records(i, 40)
        for j in (0, 17, 39) if i == 0 else range(40) if i == 1 else ():
            out[j]["text"] += " " + eval_items[2]["text"]
        return out

    chain = build_chain(
        TrainVault(), str(tmp_path_factory.mktemp("amix") / "c"), shards=3, shard_records=records, block_bytes=512
    )
    ex = exclusions_from_report(chain.extra["report"], report_sha256=chain.refs["contamination_report"].sha256)
    dataset = approve_dataset(
        chain.vault,
        chain.with_exclusions(ex),
        policy=ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 2)),
    )
    excluded = {f"s{0 if r.shard == 'easy/s0' else 1}-{r.record_index}" for r in ex.records}
    return chain, dataset, excluded


def load(dataset: Any, workers: int = 0) -> Any:
    return dataset.loader_factory(
        collate_fn=lambda b: [r["id"] for r in b], dataloader_args={"batch_size": 4, "num_workers": workers}
    ).load_mixture(MIX)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_approved_mixture_skips_exclusions_and_budgets_per_component(approved: Any, workers: int) -> None:
    chain, dataset, excluded = approved
    ld = load(dataset, workers)
    sizes = {r.name: r.records for r in ld.mixture_report()}
    assert sizes == {"easy": 80 - 43, "hard": 40}
    budgets = {name: PositionBudget(n) for name, n in sizes.items()}
    budgets["hard"] = PositionBudget(10 * sizes["hard"])  # repeat: ten passes' worth
    seen: list[str] = []
    drawn = dict.fromkeys(sizes, 0)
    for batch in itertools.islice(iter(ld), 40):
        seen += batch
        for r in ld.mixture_report():
            budgets[r.name].consume(r.draws - drawn[r.name])
            drawn[r.name] = r.draws
    assert not excluded & set(seen)
    easy = [i for i in seen if i.split("-")[0] in ("s0", "s1")]
    assert sorted(easy) == sorted(r["id"] for r in chain.records["s0"] if r["id"] not in excluded)
    assert budgets["easy"].exhausted and budgets["easy"].consumed == len(easy)  # dropped after one pass
    assert budgets["hard"].consumed == len(seen) - len(easy) == 160 - 37
    report = {r.name: r for r in ld.mixture_report()}
    assert report["easy"].dropped and report["hard"].target == 1.0 and report["hard"].repeated == 123 - 40


def test_a_stage_the_approval_does_not_hold_is_refused(approved: Any) -> None:
    _, dataset, _ = approved
    with pytest.raises(SelectionError, match="'medium'"):
        dataset.loader_factory().load_mixture(Mixture("train", [MixtureComponent("m", 1, "medium")]))
    ld = load(dataset)
    with pytest.raises(SelectionError, match="'medium'"):
        ld.set_mixture(Mixture("train", [MixtureComponent("m", 1, "medium")]), at_step=3)


def test_the_ungated_entry_refuses_an_approved_factory(approved: Any) -> None:
    """`trainvault.mixtures.load_mixture` takes a `SplitLoaderFactory`: handed an approved
    factory, it names the approved factory's own `load_mixture` (which keeps its exclusions)."""
    _, dataset, _ = approved
    with pytest.raises(ConfigurationError, match=r"loader_factory\(\)\.load_mixture\(mixture\)"):
        load_mixture(dataset.loader_factory(), MIX)


def test_an_unapproved_run_does_not_resume_under_the_approval(approved: Any) -> None:
    chain, dataset, _ = approved
    plain = load_mixture(
        chain.vault.ungated_loader_factory(
            chain.manifest_uri, collate_fn=lambda b: b, dataloader_args={"batch_size": 4}
        ),
        MIX,
    )
    next(iter(plain))
    with pytest.raises(ResumeStateError, match="component 'easy'"):
        load(dataset).load_state_dict(plain.state_dict())
    first = load(dataset)
    head = list(itertools.islice(iter(first), 7))
    resumed = load(dataset, workers=2)
    resumed.load_state_dict(first.state_dict())
    assert head + list(itertools.islice(iter(resumed), 5)) == list(itertools.islice(iter(load(dataset)), 12))
