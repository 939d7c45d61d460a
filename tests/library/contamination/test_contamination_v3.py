"""ngram-exact-v3 (issue 41): the evidence rule, uncounted items kept in the report, the
approver's choice to count them, a verdict independent of sharding, and v1/v2 bytes kept."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from trainvault import ManifestError, TrainVault
from trainvault.canonical import sha256_hex
from trainvault.contamination import (
    ContaminationReport,
    MethodSpec,
    VerifierContract,
    humaneval_benchmark,
    load_index,
    publish_release,
    scan_dataset,
)
from trainvault.contamination.contract import DEFAULT_CONTRACT, METHOD_V3, V2_CONTRACT, BenchmarkLimits
from trainvault.contamination.evidence import EvidenceRule
from trainvault.contamination.normalize import Normalizer
from trainvault.publication.bound import write_document

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SCAN_SHA = sha256_hex(b"training-scan-manifest")
PINS_SHA = sha256_hex(b"producer-pins")
NORM = Normalizer()
RULE = EvidenceRule()
#: What ngram-exact-v2 flagged in installed packages (issue 41): none of it is a copy.
COINCIDENCES = {
    "HumanEval/40": "for i in range(len(l)):\n            for j in range(i+1, len(l)):",
    "HumanEval/78": "".join(f"    '\\u{c:04X}'\n" for c in range(0x30, 0x50)),
    "HumanEval/105": "".join(
        f"    '{d}':    '{w}',\n"
        for d, w in enumerate(["ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE"], 1)
    ),
    "HumanEval/115": "0,\n 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1",
}
V2_CONTRACT_BYTES = (
    b'{"fields":["text"],"format":"trainvault.verifier-contract","max_hits_per_item":100,"method":{"exhaustive":true,'
    b'"hash":"blake2b64+poly64","id":"ngram-exact-v2","max_item_df":10,"min_item_tokens":8,"n":13,"normalization":'
    b'{"casefold":true,"id":"tvnorm-v2","map_digits":false,"nfkc":true,"strip_categories":["P","S"],'
    b'"strip_diacritics":false},"tokenizer_sha256":null,"unit":"word"},"policy":{"max_contaminated_fraction":'
    b'{"*":[0,1]},"max_uncheckable_fraction":[1,20]},"record_id_field":"id","version":1}'
)


def grams(text: str) -> list[tuple[bytes, ...]]:
    toks = NORM.tokens(text)
    return [tuple(toks[p : p + 13]) for p in range(len(toks) - 12)]


def test_earlier_contracts_and_reports_keep_their_bytes() -> None:
    # The v3 fields are omitted when absent: a v2 contract, a v1 report and a v2 policy hash as before.
    assert V2_CONTRACT.to_json_bytes() == V2_CONTRACT_BYTES
    # New contracts get v3.
    assert VerifierContract() == DEFAULT_CONTRACT and DEFAULT_CONTRACT.method.id == METHOD_V3
    golden = (GOLDEN / "contamination-report-v1.json").read_bytes().rstrip(b"\n")
    report = ContaminationReport.from_json_bytes(golden)
    assert report.uncounted_items is None and report.to_json_bytes() == golden
    assert b"count_uncounted" not in BenchmarkLimits().model_dump_json().encode()
    assert b"count_uncounted" in BenchmarkLimits(count_uncounted=True).model_dump_json().encode()


def test_v3_contract_binds_its_rule_and_refuses_mixed_ids() -> None:
    body = json.loads(DEFAULT_CONTRACT.to_json_bytes())
    assert body["method"]["id"] == METHOD_V3 and body["method"]["normalization"]["id"] == "tvnorm-v2"
    assert body["method"]["evidence"] == RULE.model_dump(mode="json")
    assert VerifierContract.from_json_bytes(DEFAULT_CONTRACT.to_json_bytes()) == DEFAULT_CONTRACT
    bad = [
        {**body["method"], "id": "ngram-exact-v2"},  # an evidence rule on v2
        {**body["method"], "evidence": None},  # v3 without one
        {**body["method"], "evidence": {**body["method"]["evidence"], "max_trivial_fraction": [0, 2]}},
        {**body["method"], "evidence": {**body["method"]["evidence"], "common_tokens": "my-list"}},
    ]
    for method in bad:
        with pytest.raises(ManifestError, match="verifier-contract"):
            VerifierContract.from_json_bytes(json.dumps({**body, "method": method}), source="verifier-contract.json")
    assert MethodSpec(id=METHOD_V3).evidence == RULE


def test_low_information_grams_are_the_coincidences_not_the_items() -> None:
    for item_id, text in COINCIDENCES.items():
        assert grams(text) and all(RULE.is_low_information(g) for g in grams(text)), item_id
    # Every HumanEval item keeps grams that count, each item's own prose and code among them.
    for item in humaneval_benchmark().items:
        text = item["prompt"] + item["canonical_solution"]
        assert any(not RULE.is_low_information(g) for g in grams(text)), item["task_id"]
    # The rule reads the gram alone: lowering the bar for informative tokens counts the loop idiom.
    loop = grams(COINCIDENCES["HumanEval/40"])[0]
    assert RULE.is_low_information(loop) and not EvidenceRule(min_informative_tokens=0).is_low_information(loop)


def _records(rng: random.Random, planted: dict[int, str], n: int) -> list[dict[str, Any]]:
    words = ["zukar", "velmo", "qixtor", "nepsa", "rukfy", "drowen"]
    out = []
    for i in range(n):
        filler = " ".join(rng.choice(words) for _ in range(40))
        out.append({"id": f"r{i}", "text": f"{filler}\n{planted.get(i, '')}\n{filler}"})
    return out


def _scan(tmp_path: Path, name: str, shards: list[list[dict[str, Any]]], contract: VerifierContract) -> Any:
    vault = TrainVault()
    root = str(tmp_path / name)
    saver = vault.dataset_saver(f"{root}/ds/data-manifest-v1.json", block_bytes=4 << 10)
    for k, records in enumerate(shards):
        saver.save("train", None, records, shard_id=f"s{k}")
    saver.commit_manifest()
    release = publish_release(vault.storage, f"{root}/release", "evals", [humaneval_benchmark()])
    index = load_index(vault, release, write_document(vault.storage, f"{root}/contract.json", contract))
    return scan_dataset(
        vault,
        f"{root}/ds/data-manifest-v1.json",
        index,
        scan_manifest_sha256=SCAN_SHA,
        producer_pins_sha256=PINS_SHA,
        progress=False,
    )


def _verdict(report: ContaminationReport) -> tuple[Any, ...]:
    return (
        [(it.item_id, it.counted_ngrams, it.matched_ngrams, it.hits_total) for it in report.contaminated_items],
        [(it.item_id, it.reason, it.counted_ngrams, it.hits_total) for it in report.uncounted_items or []],
        [(b.n_contaminated, b.n_uncounted, b.passed) for b in report.benchmarks],
        report.passed,
    )


@pytest.fixture(scope="module")
def planted() -> list[dict[str, Any]]:
    item2 = next(i for i in humaneval_benchmark().items if i["task_id"] == "HumanEval/2")
    texts = {3: COINCIDENCES["HumanEval/105"], 7: COINCIDENCES["HumanEval/40"], 11: COINCIDENCES["HumanEval/78"]}
    return _records(random.Random(1), {**texts, 15: item2["prompt"] + item2["canonical_solution"]}, 20)


def test_v3_counts_the_copy_and_lists_the_coincidences_with_their_reason(
    tmp_path: Path, planted: list[dict[str, Any]]
) -> None:
    v2 = _scan(tmp_path, "v2", [planted], V2_CONTRACT)
    assert [it.item_id for it in v2.contaminated_items] == [
        "HumanEval/2",
        "HumanEval/40",
        "HumanEval/78",
        "HumanEval/105",
    ]
    v3 = _scan(tmp_path, "v3", [planted], DEFAULT_CONTRACT)
    assert [it.item_id for it in v3.contaminated_items] == ["HumanEval/2"]
    assert [(it.item_id, it.reason, it.counted_ngrams) for it in v3.uncounted_items or []] == [
        ("HumanEval/40", "low-information", 0),
        ("HumanEval/78", "low-information", 0),
        ("HumanEval/105", "low-information", 0),
    ]
    # Nothing hidden: each uncounted item keeps its training coordinates, as v2 reported them.
    by_id = {it.item_id: it for it in v2.contaminated_items}
    for it in v3.uncounted_items or []:
        assert [h.record_index for h in it.hits] == [h.record_index for h in by_id[it.item_id].hits]
    assert v3.benchmarks[0].n_uncounted == 3 and not v3.passed
    assert ContaminationReport.from_json_bytes(v3.to_json_bytes()).to_json_bytes() == v3.to_json_bytes()
    # Without the copy the data passes v3, and fails when the approver counts what v3 leaves out.
    clean = [r for r in planted if r["id"] != "r15"]
    assert _scan(tmp_path, "v3-clean", [clean], DEFAULT_CONTRACT).passed
    counting = VerifierContract(method=MethodSpec(id=METHOD_V3), policy=BenchmarkLimits(count_uncounted=True))
    strict = _scan(tmp_path, "v3-strict", [clean], counting)
    assert [it.item_id for it in strict.contaminated_items] == ["HumanEval/40", "HumanEval/78", "HumanEval/105"]
    assert strict.uncounted_items == [] and not strict.passed


def test_v3_verdict_is_the_same_however_the_data_is_sharded(tmp_path: Path, planted: list[dict[str, Any]]) -> None:
    one = _verdict(_scan(tmp_path, "one", [planted], DEFAULT_CONTRACT))
    cuts = [planted[:5], planted[5:12], planted[12:]]
    assert _verdict(_scan(tmp_path, "three", cuts, DEFAULT_CONTRACT)) == one
    assert _verdict(_scan(tmp_path, "reversed", cuts[::-1], DEFAULT_CONTRACT))[1:] == one[1:]
    # A minimum of k informative grams per item is judged over the union of every shard's
    # matches: each half of a copy alone is too little evidence, both halves anywhere are enough.
    item2 = planted[15]["text"]
    mid = item2.find(" ", len(item2) // 2)
    halves = [{"id": "h0", "text": item2[:mid]}, {"id": "h1", "text": item2[mid:]}]
    counted = [
        _scan(tmp_path, f"half{k}", [[h]], DEFAULT_CONTRACT).contaminated_items[0].counted_ngrams
        for k, h in enumerate(halves)
    ]
    k = max(c or 0 for c in counted) + 1
    rule = VerifierContract(method=MethodSpec(id=METHOD_V3, evidence=EvidenceRule(min_counted_ngrams=k)))
    alone = _scan(tmp_path, "alone", [[halves[0]]], rule)
    assert alone.contaminated_items == [] and [(it.item_id, it.reason) for it in alone.uncounted_items or []] == [
        ("HumanEval/2", "too-little-evidence")
    ]
    both = [
        _verdict(_scan(tmp_path, f"both{j}", shards, rule))
        for j, shards in enumerate([[halves], [[h] for h in halves]])
    ]
    assert both[0] == both[1] and [it[0] for it in both[0][0]] == ["HumanEval/2"]


def test_forged_v3_reports_are_refused(tmp_path: Path, planted: list[dict[str, Any]]) -> None:
    report = json.loads(_scan(tmp_path, "forge", [planted], DEFAULT_CONTRACT).to_json_bytes())
    v2 = json.loads(_scan(tmp_path, "forge-v2", [planted], V2_CONTRACT).to_json_bytes())
    hidden = json.loads(json.dumps(report))  # a counted item moved to the uncounted list
    moved = hidden["contaminated_items"].pop(0)
    hidden["uncounted_items"].insert(0, {**moved, "reason": "low-information"})
    hidden["benchmarks"][0].update(n_contaminated=0, contaminated_fraction=[0, 164], n_uncounted=4)
    understated = json.loads(json.dumps(report))  # its evidence count lowered to hide it
    understated["contaminated_items"][0]["counted_ngrams"] = 0
    miscounted = json.loads(json.dumps(report))
    miscounted["benchmarks"][0]["n_uncounted"] = 2
    v3_in_v2 = {**v2, "uncounted_items": []}
    v2_in_v3 = {**report, "uncounted_items": None}
    for forged, why in [
        (hidden, "other list"),
        (understated, "other list"),
        (miscounted, "n_uncounted"),
        (v3_in_v2, "belong to ngram-exact-v3"),
        (v2_in_v3, "belong to ngram-exact-v3"),
    ]:
        with pytest.raises(ManifestError, match=why):
            ContaminationReport.from_obj(forged, source="forged-report.json")
