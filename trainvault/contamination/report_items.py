"""What a contamination report lists: per-benchmark results and the items it names.

ngram-exact-v3 reports add, per benchmark, `n_uncounted`; per listed item, the informative
n-grams matched (`counted_ngrams` of `informative_ngrams`); and the `UncountedItem` list:
items whose every match the evidence rule leaves out, kept with their hits and reason. The
v3 fields are omitted when absent, so v1 and v2 reports keep their bytes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_serializer

from trainvault.contamination.contract import METHOD_V3, BenchmarkLimits, MethodSpec
from trainvault.contamination.index import UncheckableReason
from trainvault.contamination.scan import ShardHit
from trainvault.documents import StrictModel
from trainvault.publication.manifest import natural_key
from trainvault.refs import Sha256

#: Why an uncounted item's matches do not count: every matched gram is low-information, or
#: fewer informative grams matched than the rule's `min_counted_ngrams`.
UncountedReason = Literal["low-information", "too-little-evidence"]


def item_sort_key(item_id: str) -> tuple[Any, ...]:
    """Order item ids naturally (``HumanEval/2`` before ``HumanEval/10``), ties by the raw id."""
    return (natural_key(item_id), item_id)


def _omit_none(out: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if out.get(name, 0) is None:
            out.pop(name)
    return out


class BenchmarkResult(StrictModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str
    split: str
    n_items: int = Field(ge=0)
    n_checkable: int = Field(ge=0)
    n_uncheckable: int = Field(ge=0)
    n_hot_ngrams_excluded: int = Field(ge=0)
    n_contaminated: int = Field(ge=0)
    #: ``[n_contaminated, n_checkable]``.
    contaminated_fraction: list[int] = Field(min_length=2, max_length=2)
    #: ``[n_uncheckable, n_items]``.
    uncheckable_fraction: list[int] = Field(min_length=2, max_length=2)
    passed: bool = Field(alias="pass")
    #: ngram-exact-v3: checkable items with matches the evidence rule does not count.
    n_uncounted: int | None = Field(default=None, ge=0)

    @model_serializer(mode="wrap")
    def _omit_v3(self, handler: Any) -> dict[str, Any]:
        return _omit_none(handler(self), "n_uncounted")


class ReportHit(ShardHit):
    """Training coordinates of one match: a `ShardHit` placed in its split and shard."""

    split: str
    shard: str
    shard_sha256: Sha256


class ContaminatedItem(StrictModel):
    benchmark: str
    item_id: str
    item_sha256: Sha256
    #: Distinct item n-grams found anywhere in the training data, of `total_ngrams`.
    matched_ngrams: int = Field(ge=1)
    total_ngrams: int = Field(ge=1)
    #: Longest run of training tokens covered by overlapping matched n-grams.
    longest_match_tokens: int = Field(ge=1)
    hits_total: int = Field(ge=1)
    hits: list[ReportHit] = Field(min_length=1)
    #: ngram-exact-v3: distinct informative n-grams matched, of the item's `informative_ngrams`.
    counted_ngrams: int | None = Field(default=None, ge=0)
    informative_ngrams: int | None = Field(default=None, ge=1)

    @model_serializer(mode="wrap")
    def _omit_v3(self, handler: Any) -> dict[str, Any]:
        return _omit_none(handler(self), "counted_ngrams", "informative_ngrams")


class UncountedItem(ContaminatedItem):
    """An item whose matches the evidence rule leaves out of the verdict, and why."""

    reason: UncountedReason


class UncheckableItem(StrictModel):
    benchmark: str
    item_id: str
    item_sha256: Sha256
    tokens: int = Field(ge=0)
    reason: UncheckableReason


def check_evidence(
    method: MethodSpec,
    policy: BenchmarkLimits,
    benchmarks: list[BenchmarkResult],
    contaminated: list[ContaminatedItem],
    uncounted: list[UncountedItem] | None,
) -> None:
    """A report's v3 fields are present exactly in a v3 report, and each listed item is on the
    side of the evidence rule its own counts put it (what a gate recomputes, item by item)."""
    rule = method.evidence
    v3 = method.id == METHOD_V3
    listed = [*contaminated, *(uncounted or [])]
    if (
        (uncounted is None) == v3
        or any((b.n_uncounted is None) == v3 for b in benchmarks)
        or any((it.counted_ngrams is None or it.informative_ngrams is None) == v3 for it in listed)
    ):
        raise ValueError(f"uncounted items and evidence counts belong to {METHOD_V3} reports, and only there")
    if rule is None:
        return
    per_benchmark: dict[str, int] = {}
    for it in listed:
        counted, informative = it.counted_ngrams or 0, it.informative_ngrams or 0  # both set: checked above
        counts = policy.count_uncounted or rule.counts(counted, informative)
        if counts != (not isinstance(it, UncountedItem)) or counted > it.matched_ngrams:
            raise ValueError(f"item {it.item_id!r}: its evidence counts put it in the other list")
        if isinstance(it, UncountedItem):
            per_benchmark[it.benchmark] = per_benchmark.get(it.benchmark, 0) + 1
    if any(per_benchmark.pop(b.name, 0) != b.n_uncounted for b in benchmarks) or per_benchmark:
        raise ValueError("n_uncounted disagrees with the uncounted items listed")
    keys = [(it.benchmark, item_sort_key(it.item_id)) for it in uncounted or []]
    if (
        keys != sorted(keys)
        or len(set(keys)) != len(keys)
        or set(keys) & {(it.benchmark, item_sort_key(it.item_id)) for it in contaminated}
    ):
        raise ValueError("uncounted_items must be sorted by benchmark and item id, each once, none contaminated")


__all__ = [
    "BenchmarkResult",
    "ContaminatedItem",
    "ReportHit",
    "UncheckableItem",
    "UncountedItem",
    "UncountedReason",
    "check_evidence",
    "item_sort_key",
]
