"""The contamination report (contamination-report-v1.json) and the deterministic reduce.

The reduce merges per-shard results into one report: per-benchmark counts and verdicts,
contaminated items with training coordinates (capped per item, with exact totals),
uncheckable items, coverage totals, and the digests of the five inputs it judged. The
same inputs give the same bytes whatever order the shard results arrive in: everything
is sorted, fractions are integer pairs, and there is no timestamp.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_serializer, model_validator

from trainvault.canonical import canonical_json, is_sha256_hex
from trainvault.contamination.contract import BenchmarkLimits, MethodSpec
from trainvault.contamination.index import EvalIndex, IndexedBenchmark, IndexedItem
from trainvault.contamination.report_items import (
    BenchmarkResult,
    ContaminatedItem,
    ReportHit,
    UncheckableItem,
    UncountedItem,
    check_evidence,
    item_sort_key,
)
from trainvault.contamination.scan import ShardScanResult
from trainvault.documents import Document, StrictModel
from trainvault.errors import ContaminationError
from trainvault.publication.manifest import DataManifest, natural_key
from trainvault.refs import Sha256
from trainvault.version import __version__

#: The report's file name beside the manifest (what `build_approval_chain` writes).
REPORT_NAME = "contamination-report-v1.json"


class ReleaseRef(StrictModel):
    id: str
    sha256: Sha256


class TrainingRef(StrictModel):
    data_manifest_sha256: Sha256
    scan_manifest_sha256: Sha256


class DigestRef(StrictModel):
    sha256: Sha256


class Coverage(StrictModel):
    """What was scanned: must equal the scan manifest's totals."""

    shards: int = Field(ge=0)
    records: int = Field(ge=0)
    tokens: int = Field(ge=0)
    bytes: int = Field(ge=0)


class ToolInfo(StrictModel):
    name: str
    version: str
    python: str
    unicode: str


class ContaminationReport(Document):
    """contamination-report-v1. `pass` is stored for people; a gate recomputes it."""

    KIND = "trainvault.contamination-report"
    model_config = ConfigDict(populate_by_name=True)

    format: Literal["trainvault.contamination-report"] = "trainvault.contamination-report"
    version: Literal[1] = 1
    method: MethodSpec
    fields: list[str]
    eval_release: ReleaseRef
    training: TrainingRef
    verifier_contract: DigestRef
    producer_pins: DigestRef
    coverage: Coverage
    policy: BenchmarkLimits
    benchmarks: list[BenchmarkResult] = Field(min_length=1)
    contaminated_items: list[ContaminatedItem]
    uncheckable_items: list[UncheckableItem]
    passed: bool = Field(alias="pass")
    tool: ToolInfo
    #: ngram-exact-v3: items whose matches the evidence rule does not count (omitted before v3).
    uncounted_items: list[UncountedItem] | None = None

    def to_json_bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json", by_alias=True))

    @model_serializer(mode="wrap")
    def _omit_v3(self, handler: Any) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if out.get("uncounted_items", 0) is None:
            out.pop("uncounted_items")
        return out

    @model_validator(mode="after")
    def _consistent(self) -> ContaminationReport:
        names = [b.name for b in self.benchmarks]
        if names != sorted(set(names)):
            raise ValueError("benchmarks must be sorted by name, each once")
        contaminated: dict[str, int] = {}
        for it in self.contaminated_items:
            contaminated[it.benchmark] = contaminated.get(it.benchmark, 0) + 1
            if it.hits_total < len(it.hits) or it.matched_ngrams > it.total_ngrams:
                raise ValueError(f"item {it.item_id!r}: counts are inconsistent")
        uncheckable: dict[str, int] = {}
        for u in self.uncheckable_items:
            uncheckable[u.benchmark] = uncheckable.get(u.benchmark, 0) + 1
        for b in self.benchmarks:
            if (
                b.n_checkable + b.n_uncheckable != b.n_items
                or b.n_contaminated > b.n_checkable
                or b.contaminated_fraction != [b.n_contaminated, b.n_checkable]
                or b.uncheckable_fraction != [b.n_uncheckable, b.n_items]
                or contaminated.pop(b.name, 0) != b.n_contaminated
                or uncheckable.pop(b.name, 0) != b.n_uncheckable
            ):
                raise ValueError(f"benchmark {b.name!r}: counts disagree with each other or with the item lists")
        if contaminated or uncheckable:
            raise ValueError(f"items listed for unknown benchmarks: {sorted({*contaminated, *uncheckable})}")
        keys = [(it.benchmark, item_sort_key(it.item_id)) for it in self.contaminated_items]
        if keys != sorted(keys) or len(set(keys)) != len(keys):
            raise ValueError("contaminated_items must be sorted by benchmark and item id, each once")
        check_evidence(self.method, self.policy, self.benchmarks, self.contaminated_items, self.uncounted_items)
        return self

    def bound_digests(self) -> dict[str, str]:
        """The five inputs this report judged, by the SHA-256 of their stored bytes."""
        return {
            "data_manifest": self.training.data_manifest_sha256,
            "scan_manifest": self.training.scan_manifest_sha256,
            "eval_release": self.eval_release.sha256,
            "verifier_contract": self.verifier_contract.sha256,
            "producer_pins": self.producer_pins.sha256,
        }

    def recompute_pass(self, policy: BenchmarkLimits | None = None) -> bool:
        """The verdict from the counts alone, under `policy` (default: the report's own).

        A gate passes the policy of the contract it trusts and ignores the stored flags.
        """
        policy = policy or self.policy
        return self.method.exhaustive and all(
            policy.benchmark_passes(b.name, b.n_items, b.n_checkable, b.n_uncheckable, b.n_contaminated)
            for b in self.benchmarks
        )


def _check_sha(value: str, what: str) -> None:
    if not isinstance(value, str) or not is_sha256_hex(value):
        raise ContaminationError(f"{what} must be a 64-character lowercase hex sha256, got {value!r}")


@dataclass
class _MergedItem:
    """One item's hits over every shard: matched gram positions, totals, and hits with sort keys."""

    grams: set[int] = field(default_factory=set)
    hits_total: int = 0
    longest: int = 0
    hits: list[tuple[tuple[Any, ...], ReportHit]] = field(default_factory=list)


def reduce_report(
    index: EvalIndex,
    manifest: DataManifest,
    results: Iterable[ShardScanResult],
    *,
    data_manifest_sha256: str,
    scan_manifest_sha256: str,
    producer_pins_sha256: str,
) -> ContaminationReport:
    """Merge per-shard results into the report, deterministically.

    Needs exactly one result for every distinct shard of `manifest` (matched by the
    shard's sha256), each made under the index's contract and release, with the shard's
    record count and size; anything else raises `ContaminationError`. Digests are of the
    documents' bytes as stored.
    """
    _check_sha(data_manifest_sha256, "data_manifest_sha256")
    _check_sha(scan_manifest_sha256, "scan_manifest_sha256")
    _check_sha(producer_pins_sha256, "producer_pins_sha256")
    contract = index.contract
    coverage, merged = _merge_shards(index, manifest, _results_by_shard(index, results))
    benchmarks, contaminated_items, uncheckable_items, uncounted_items = _judge(index, merged)
    return ContaminationReport(
        method=contract.method,
        fields=list(contract.fields),
        eval_release=ReleaseRef(id=index.release_id, sha256=index.release_sha256),
        training=TrainingRef(data_manifest_sha256=data_manifest_sha256, scan_manifest_sha256=scan_manifest_sha256),
        verifier_contract=DigestRef(sha256=index.contract_sha256),
        producer_pins=DigestRef(sha256=producer_pins_sha256),
        coverage=coverage,
        policy=contract.policy,
        benchmarks=benchmarks,
        contaminated_items=contaminated_items,
        uncheckable_items=uncheckable_items,
        passed=all(b.passed for b in benchmarks),
        uncounted_items=uncounted_items if contract.method.evidence is not None else None,
        tool=ToolInfo(
            name="trainvault",
            version=__version__,
            python=f"{sys.version_info.major}.{sys.version_info.minor}",
            unicode=unicodedata.unidata_version,
        ),
    )


def _results_by_shard(index: EvalIndex, results: Iterable[ShardScanResult]) -> dict[str, ShardScanResult]:
    """The results by shard sha256: each made under the index's contract and release, one per shard."""
    by_sha: dict[str, ShardScanResult] = {}
    for r in results:
        if not isinstance(r, ShardScanResult):
            raise ContaminationError(f"reduce_report needs ShardScanResult objects, got {type(r).__name__}")
        if r.contract_sha256 != index.contract_sha256 or r.release_sha256 != index.release_sha256:
            raise ContaminationError(
                f"result for shard {r.shard_sha256} was made under contract {r.contract_sha256} and release "
                f"{r.release_sha256}, not {index.contract_sha256} and {index.release_sha256}: rescan it"
            )
        if r.shard_sha256 in by_sha and by_sha[r.shard_sha256] != r:
            raise ContaminationError(f"two different results for shard {r.shard_sha256}: results are not deterministic")
        by_sha[r.shard_sha256] = r
    return by_sha


def _merge_shards(
    index: EvalIndex, manifest: DataManifest, by_sha: dict[str, ShardScanResult]
) -> tuple[Coverage, dict[tuple[str, str], _MergedItem]]:
    """Coverage totals and per-(benchmark, item id) hits over every shard of `manifest`.

    Every shard must have a result that agrees with its entry, and every result a shard.
    """
    field_pos = {f: i for i, f in enumerate(index.contract.fields)}
    shards = records = tokens = size = 0
    used: set[str] = set()
    merged: dict[tuple[str, str], _MergedItem] = {}
    for split_name in sorted(manifest.splits):
        for entry in manifest.splits[split_name].shards:
            where = f"shard {split_name}/{entry.key}"
            r = by_sha.get(entry.sha256)
            if r is None:
                raise ContaminationError(f"{where} (sha256 {entry.sha256}) was not scanned: scan it, then reduce again")
            if r.records != entry.record_count or r.bytes != entry.size_bytes:
                raise ContaminationError(
                    f"{where}: the scan saw {r.records} records and {r.bytes} bytes, the manifest says "
                    f"{entry.record_count} and {entry.size_bytes}"
                )
            used.add(entry.sha256)
            shards += 1
            records += r.records
            tokens += r.tokens
            size += r.bytes
            shard_order = (split_name, natural_key(entry.key), entry.key)
            for it in r.items:
                state = merged.setdefault((it.benchmark, it.item_id), _MergedItem())
                state.grams.update(it.matched_grams)
                state.hits_total += it.hits_total
                state.longest = max(state.longest, it.longest_match_tokens)
                for h in it.hits:
                    key = (*shard_order, h.record_index, field_pos.get(h.field, -1), h.token_start, h.token_end)
                    hit = ReportHit(split=split_name, shard=entry.key, shard_sha256=entry.sha256, **h.model_dump())
                    state.hits.append((key, hit))
    extra = sorted(set(by_sha) - used)
    if extra:
        raise ContaminationError(
            f"results for {len(extra)} shard(s) not in the data manifest (first: {extra[0]}): "
            "they belong to another publication"
        )
    return Coverage(shards=shards, records=records, tokens=tokens, bytes=size), merged


def _judge(
    index: EvalIndex, merged: dict[tuple[str, str], _MergedItem]
) -> tuple[list[BenchmarkResult], list[ContaminatedItem], list[UncheckableItem], list[UncountedItem]]:
    """Per benchmark (by name) its counts and verdict, and the contaminated, uncheckable and uncounted items."""
    lists: _ItemLists = ([], [], [])
    benchmarks = [
        _judge_benchmark(index, bench, merged, lists) for bench in sorted(index.benchmarks, key=lambda b: b.name)
    ]
    known = {(bench.name, item.item_id) for bench in index.benchmarks for item in bench.items}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ContaminationError(f"shard results name items the release does not hold: {unknown[:3]}")
    return benchmarks, *lists


#: The contaminated, uncheckable and uncounted items, appended to benchmark by benchmark.
_ItemLists = tuple[list[ContaminatedItem], list[UncheckableItem], list[UncountedItem]]


def _judge_benchmark(
    index: EvalIndex, bench: IndexedBenchmark, merged: dict[tuple[str, str], _MergedItem], lists: _ItemLists
) -> BenchmarkResult:
    """One benchmark's result; its listed items are appended to `lists` in item order."""
    contract = index.contract
    contaminated, uncheckable, uncounted = lists
    n_items = len(bench.items)
    n_unc = n_cont = n_uncounted = 0
    for item in sorted(bench.items, key=lambda i: item_sort_key(i.item_id)):
        if item.uncheckable is not None:
            n_unc += 1
            uncheckable.append(
                UncheckableItem(
                    benchmark=bench.name,
                    item_id=item.item_id,
                    item_sha256=item.item_sha256,
                    tokens=item.n_tokens,
                    reason=item.uncheckable,
                )
            )
            continue
        state = merged.get((bench.name, item.item_id))
        if state is None:
            continue
        listed = _listed_item(index, bench.name, item, state)
        if isinstance(listed, UncountedItem):
            n_uncounted += 1
            uncounted.append(listed)
        else:
            n_cont += 1
            contaminated.append(listed)
    n_check = n_items - n_unc
    return BenchmarkResult(
        name=bench.name,
        split=bench.split,
        n_items=n_items,
        n_checkable=n_check,
        n_uncheckable=n_unc,
        n_hot_ngrams_excluded=bench.n_hot_ngrams_excluded,
        n_contaminated=n_cont,
        contaminated_fraction=[n_cont, n_check],
        uncheckable_fraction=[n_unc, n_items],
        passed=contract.policy.benchmark_passes(bench.name, n_items, n_check, n_unc, n_cont),
        n_uncounted=n_uncounted if contract.method.evidence is not None else None,
    )


def _listed_item(index: EvalIndex, benchmark: str, item: IndexedItem, state: _MergedItem) -> ContaminatedItem:
    """A matched item as the report lists it: contaminated, or (v3) uncounted with its reason.

    The verdict reads the union of matched gram positions over every shard, so it does not
    depend on scan order or on how the data is cut into shards.
    """
    contract = index.contract
    rule = contract.method.evidence
    fields: dict[str, Any] = dict(
        benchmark=benchmark,
        item_id=item.item_id,
        item_sha256=item.item_sha256,
        matched_ngrams=len(state.grams),
        total_ngrams=item.total_ngrams,
        longest_match_tokens=state.longest,
        hits_total=state.hits_total,
        hits=[h for _, h in sorted(state.hits, key=lambda kh: kh[0])][: contract.max_hits_per_item],
    )
    if rule is None:
        return ContaminatedItem(**fields)
    counted = item.counted_ngrams(state.grams)
    fields.update(counted_ngrams=counted, informative_ngrams=len(item.counted_positions))
    if contract.policy.count_uncounted or rule.counts(counted, len(item.counted_positions)):
        return ContaminatedItem(**fields)
    return UncountedItem(**fields, reason="too-little-evidence" if counted else "low-information")
