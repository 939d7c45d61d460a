"""Contamination scan end to end: HumanEval items planted in synthetic shards on real stores."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trainvault import ContaminationError, IntegrityError, ManifestError, TrainVault
from trainvault.canonical import sha256_hex
from trainvault.contamination import (
    ContaminationReport,
    ShardScanResult,
    VerifierContract,
    humaneval_benchmark,
    jsonl_benchmark,
    load_index,
    publish_release,
    reduce_report,
    scan_dataset,
    write_report,
)
from trainvault.contamination.contract import BenchmarkLimits
from trainvault.contamination.dataset import ScanProgress, read_report
from trainvault.contamination.index import EvalIndex, gram_fingerprint, token_fingerprint
from trainvault.contamination.normalize import Normalizer
from trainvault.contamination.scan import scan_shard
from trainvault.publication.bound import write_document

SCAN_SHA = sha256_hex(b"training-scan-manifest")
PINS_SHA = sha256_hex(b"producer-pins")
NORM = Normalizer()
_SYLLABLES = ["zu", "kar", "vel", "mo", "qix", "tor", "nep", "sa", "ruk", "fy", "dro", "wen"]

TINY_JSONL = b"\n".join(
    json.dumps(x).encode()
    for x in [
        # 10 tokens: shorter than n, so matched whole.
        {"id": "short-10", "text": "Quorbly flenches 7 mirgled paxons over the dwindling vosk yarrow"},
        # 5 tokens: under min_item_tokens, so uncheckable.
        {"id": "tiny-5", "text": "zelf mabbo quint orrel 42"},
        {
            "id": "long-16",
            "text": "glimmer sprocket tandem ossify plinth carom dirge fable welkin yonder "
            "zephyr quaff bivouac cairn doff ergot",
        },
    ]
)


def filler(rng: random.Random, words: int) -> str:
    """Pseudo-words that are in no benchmark's vocabulary."""
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(words))


def item_text(item: dict[str, str]) -> str:
    return item["prompt"] + item["canonical_solution"]


def perturb(text: str) -> str:
    """Upper case, other punctuation, other whitespace: the tokens stay the same."""
    swap = str.maketrans({"(": "[", ")": "]", ":": ";", ",": " , ", '"': "'", "_": "-", ".": "!"})
    return re.sub(r"\s+", lambda m: "\t \n  "[: 1 + len(m.group()) % 4], text.upper().translate(swap))


def oracle_spans(text: str) -> list[tuple[int, int]]:
    """Token spans of ASCII text without the implementation: runs of letters and digits."""
    assert text.isascii()
    return [m.span() for m in re.finditer(r"[A-Za-z0-9]+", text)]


def isolated_items(bench: Any) -> list[str]:
    """ASCII HumanEval items sharing no 13-gram with any other item (a naive set oracle)."""
    grams = {}
    for it in bench.items:
        toks = NORM.reference_tokens(it["prompt"]) + NORM.reference_tokens(it["canonical_solution"])
        grams[it["task_id"]] = {tuple(toks[i : i + 13]) for i in range(len(toks) - 12)}
    counts = Counter(g for s in grams.values() for g in s)
    return [
        it["task_id"]
        for it in bench.items
        if item_text(it).isascii() and all(counts[g] == 1 for g in grams[it["task_id"]])
    ]


@pytest.fixture(scope="module")
def humaneval() -> Any:
    return humaneval_benchmark()


@pytest.fixture(scope="module")
def corpus(humaneval: Any) -> dict[str, Any]:
    """Two shards of filler records with planted items, and the hits expected, exactly."""
    rng = random.Random(7)
    items = {it["task_id"]: it for it in humaneval.items}
    iso = isolated_items(humaneval)
    verbatim, changed = iso[0], iso[5]
    tiny = {json.loads(line)["id"]: json.loads(line)["text"] for line in TINY_JSONL.splitlines()}
    shards: dict[str, list[dict[str, Any]]] = {
        "s0": [{"id": f"s0-{i}", "text": filler(rng, 150), "meta": ""} for i in range(40)],
        "s1": [{"id": f"s1-{i}", "text": filler(rng, 150), "meta": ""} for i in range(40)],
    }
    expected: dict[tuple[str, str], list[tuple[Any, ...]]] = {}

    def plant(shard: str, index: int, text: str, bench: str | None, item_id: str | None, field: str = "text") -> None:
        before, after = filler(rng, 20), filler(rng, 5)
        record = shards[shard][index]
        record[field] = f"{before} {text} {after}"
        if bench is None:
            return
        n_before = len(before.split())
        n_item = len(NORM.reference_tokens(text))
        spans = oracle_spans(record[field])
        hit = (
            "train",
            f"_/{shard}",
            index,
            record["id"],
            field,
            n_before,
            n_before + n_item,
            spans[n_before][0],
            spans[n_before + n_item - 1][1],
        )
        expected.setdefault((bench, item_id), []).append(hit)

    plant("s0", 3, item_text(items[verbatim]), "humaneval", verbatim)
    plant("s1", 7, item_text(items[verbatim]), "humaneval", verbatim)
    plant("s1", 5, perturb(item_text(items[changed])), "humaneval", changed)
    # Split across two records: each half under 13 tokens, so nothing matches.
    toks = [t.decode() for t in NORM.tokens(item_text(items["HumanEval/23"]))]
    assert 13 < len(toks) < 26
    plant("s0", 10, " ".join(toks[: len(toks) // 2]), None, None)
    plant("s0", 11, " ".join(toks[len(toks) // 2 :]), None, None)
    # Cut below 13 tokens: not found.
    cut = [t.decode() for t in NORM.tokens(item_text(items[iso[9]]))][:12]
    plant("s1", 20, " ".join(cut), None, None)
    # A planted item in a field the contract does not scan: not found.
    plant("s1", 21, item_text(items[iso[12]]), None, None, field="meta")
    # Short items: whole is found, a cut is not; the 5-token item is uncheckable.
    plant("s0", 30, tiny["short-10"], "tiny", "short-10")
    plant("s1", 30, " ".join(tiny["short-10"].split()[:9]), None, None)
    plant("s0", 31, tiny["tiny-5"], None, None)
    return {"shards": shards, "expected": expected, "verbatim": verbatim, "changed": changed, "in_meta": iso[12]}


def setup(
    vault: TrainVault,
    root: str,
    corpus: dict[str, Any],
    *,
    contract: VerifierContract | None = None,
    order: tuple[str, ...] = ("s0", "s1"),
    data_format: str = "msgpack.zst",
) -> dict[str, Any]:
    saver = vault.dataset_saver(f"{root}/ds/data-manifest-v1.json", data_format=data_format, block_bytes=16 << 10)
    for sid in order:
        saver.save("train", None, corpus["shards"][sid], shard_id=sid)
    saver.commit_manifest()
    release = publish_release(
        vault.storage,
        f"{root}/release",
        "evals-test",
        [humaneval_benchmark(), jsonl_benchmark("tiny", TINY_JSONL)],
    )
    bound = write_document(vault.storage, f"{root}/verifier-contract-v1.json", contract or VerifierContract())
    index = load_index(vault, release, bound)
    return {"manifest_uri": f"{root}/ds/data-manifest-v1.json", "index": index, "release": release}


def scan(vault: TrainVault, env: dict[str, Any], **kw: Any) -> ContaminationReport:
    return scan_dataset(
        vault,
        env["manifest_uri"],
        env["index"],
        scan_manifest_sha256=SCAN_SHA,
        producer_pins_sha256=PINS_SHA,
        progress=False,
        **kw,
    )


def found(report: ContaminationReport) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
    return {
        (it.benchmark, it.item_id): [
            (
                h.split,
                h.shard,
                h.record_index,
                h.record_id,
                h.field,
                h.token_start,
                h.token_end,
                h.char_start,
                h.char_end,
            )
            for h in it.hits
        ]
        for it in report.contaminated_items
    }


def test_planted_items_exact_recall_and_precision(vault_root: tuple[TrainVault, str], corpus: dict[str, Any]) -> None:
    vault, root = vault_root
    env = setup(vault, root, corpus)
    report = scan(vault, env)
    # Exactly the planted items, at exactly the planted coordinates: nothing more, nothing less.
    assert found(report) == corpus["expected"]
    by_id = {it.item_id: it for it in report.contaminated_items}
    verbatim = by_id[corpus["verbatim"]]
    assert verbatim.hits_total == 2 and verbatim.matched_ngrams == verbatim.total_ngrams
    assert verbatim.longest_match_tokens == verbatim.hits[0].token_end - verbatim.hits[0].token_start
    assert by_id[corpus["changed"]].matched_ngrams == by_id[corpus["changed"]].total_ngrams
    assert by_id["short-10"].total_ngrams == 1 and by_id["short-10"].longest_match_tokens == 10
    assert [(u.benchmark, u.item_id, u.reason, u.tokens) for u in report.uncheckable_items] == [
        ("tiny", "tiny-5", "too-short", 5)
    ]
    he, tiny = report.benchmarks
    assert (he.name, he.n_items, he.n_checkable, he.n_contaminated, he.contaminated_fraction) == (
        "humaneval",
        164,
        164,
        2,
        [2, 164],
    )
    assert (tiny.n_items, tiny.n_checkable, tiny.n_uncheckable, tiny.uncheckable_fraction) == (3, 2, 1, [1, 3])
    assert not he.passed and not tiny.passed and not report.passed and not report.recompute_pass()
    records = sum(len(v) for v in corpus["shards"].values())
    tokens = sum(len(NORM.reference_tokens(r["text"])) for v in corpus["shards"].values() for r in v)
    manifest = vault.load_manifest(env["manifest_uri"])
    assert report.coverage.model_dump() == {
        "shards": 2,
        "records": records,
        "tokens": tokens,
        "bytes": manifest.splits["train"].size_bytes,
    }
    # The report binds its inputs by the digests of their stored bytes.
    assert report.training.data_manifest_sha256 == sha256_hex(vault.storage.get(env["manifest_uri"]))
    assert report.eval_release.sha256 == env["release"].sha256
    assert report.verifier_contract.sha256 == env["index"].contract_sha256
    assert (report.training.scan_manifest_sha256, report.producer_pins.sha256) == (SCAN_SHA, PINS_SHA)
    assert report.bound_digests() == {
        "data_manifest": report.training.data_manifest_sha256,
        "scan_manifest": SCAN_SHA,
        "eval_release": env["release"].sha256,
        "verifier_contract": env["index"].contract_sha256,
        "producer_pins": PINS_SHA,
    }


def test_clean_data_passes_and_policy_is_recomputed(tmp_path: Any, corpus: dict[str, Any]) -> None:
    vault = TrainVault()
    clean = {k: [r for r in v if len(r["text"]) > 0] for k, v in corpus["shards"].items()}
    rng = random.Random(3)
    clean = {"shards": {k: [{"id": r["id"], "text": filler(rng, 50)} for r in v] for k, v in clean.items()}}
    policy = BenchmarkLimits(max_uncheckable_fraction=[1, 3])
    env = setup(vault, str(tmp_path), clean, contract=VerifierContract(policy=policy))
    report = scan(vault, env)
    assert report.contaminated_items == [] and report.passed and report.recompute_pass()
    # A stricter policy (the one a gate trusts) fails the same counts; the stored flag is not trusted.
    assert not report.recompute_pass(BenchmarkLimits())
    forged = json.loads(report.to_json_bytes())
    forged["benchmarks"][1]["n_uncheckable"] = 0
    with pytest.raises(ManifestError, match="counts disagree"):
        ContaminationReport.from_obj(forged, source="forged.json")
    # A forged pass flag parses (it is only for people) but the recomputed verdict ignores it.
    failing = json.loads(report.to_json_bytes())
    failing["policy"]["max_uncheckable_fraction"] = [1, 20]  # stored flags still say pass
    assert failing["pass"] is True and failing["benchmarks"][1]["pass"] is True
    assert not ContaminationReport.from_obj(failing).recompute_pass()


def test_reports_are_byte_identical_across_runs_and_shard_orders(tmp_path: Any, corpus: dict[str, Any]) -> None:
    vault = TrainVault()
    a = setup(vault, str(tmp_path / "a"), corpus)
    b = setup(vault, str(tmp_path / "b"), corpus, order=("s1", "s0"))
    first = scan(vault, a).to_json_bytes()
    assert scan(vault, a).to_json_bytes() == first
    # The same shards saved in the other order: the same report, but for its own manifest digest.
    second = json.loads(scan(vault, b).to_json_bytes())
    expected = json.loads(first)
    for doc in (second, expected):
        doc["training"].pop("data_manifest_sha256")
    assert second == expected
    # Shard results reduced in every order give the same bytes.
    manifest = vault.load_manifest(a["manifest_uri"])
    entries = manifest.splits["train"].shards
    results = [scan_shard(vault.storage, manifest.data_format, e, a["index"]) for e in entries]
    digest = sha256_hex(vault.storage.get(a["manifest_uri"]))
    outs = {
        reduce_report(
            a["index"],
            manifest,
            rs,
            data_manifest_sha256=digest,
            scan_manifest_sha256=SCAN_SHA,
            producer_pins_sha256=PINS_SHA,
        ).to_json_bytes()
        for rs in (results, results[::-1])
    }
    assert outs == {first}
    # A result survives a round trip through its canonical JSON (it can be cached).
    assert ShardScanResult.from_json_bytes(results[0].to_json_bytes()) == results[0]
    # The written report reads back with the digest of its bytes.
    bound = write_report(vault, str(tmp_path / "report.json"), ContaminationReport.from_json_bytes(first))
    assert bound.sha256 == sha256_hex(first)
    assert read_report(vault, bound.uri, sha256=bound.sha256).document.to_json_bytes() == first


def test_hits_are_capped_with_exact_totals(tmp_path: Any, corpus: dict[str, Any]) -> None:
    vault = TrainVault()
    env = setup(vault, str(tmp_path), corpus, contract=VerifierContract(max_hits_per_item=1), data_format="jsonl.gz")
    report = scan(vault, env)
    item = next(it for it in report.contaminated_items if it.item_id == corpus["verbatim"])
    assert item.hits_total == 2
    assert [(h.shard, h.record_index) for h in item.hits] == [("_/s0", 3)]  # the first in shard order


def test_hash_collision_never_reaches_the_report(humaneval: Any) -> None:
    """A candidate whose fingerprint matches but whose tokens differ is dropped by verification."""
    import numpy as np

    from trainvault.contamination.release import BenchmarkEntry, EvaluationRelease, ItemFile, LoadedRelease
    from trainvault.publication.bound import Bound
    from trainvault.refs import ObjectRef

    entry = BenchmarkEntry(
        name="humaneval",
        text_fields=["prompt", "canonical_solution"],
        id_field="task_id",
        items=ItemFile(uri="x", size_bytes=0, sha256="0" * 64, n_items=164),
    )
    release = LoadedRelease(
        Bound(ObjectRef(uri="memory://x/r", sha256="1" * 64), EvaluationRelease(id="r", benchmarks=[entry])),
        (humaneval,),
    )
    index = EvalIndex(VerifierContract(), release, contract_sha256="2" * 64)
    gram = index.grams[0]
    other = tuple(reversed(gram))  # in-vocabulary tokens, but not an indexed n-gram
    assert other not in set(index.grams)
    # Corrupt the index so the other window's fingerprint points at `gram`: a forced collision.
    keys, starts, gids = index.tables[13]
    forged = gram_fingerprint([token_fingerprint(t) for t in other])
    pairs = sorted(
        [(int(keys[i]), int(g)) for i in range(len(keys)) for g in gids[starts[i] : starts[i + 1]]] + [(forged, 0)]
    )
    k = np.array([p[0] for p in pairs], dtype=np.uint64)
    ukeys, ustarts = np.unique(k, return_index=True)
    index.tables[13] = (ukeys, np.append(ustarts, len(k)), np.array([p[1] for p in pairs], dtype=np.int64))
    stream = [*other, b"", *gram, b""]
    ids = index.token_ids(stream)
    assert index.find(stream, ids) == [(14, 0)]  # only the true window; the forged candidate is rejected
    # The pre-filtered stream search agrees, on the same stream as a token batch.
    text = " ".join(t.decode() for t in other) + " . " + " ".join(t.decode() for t in gram)
    batch = index.normalizer.tokenize_batch([b"x y " + text.encode(), text.encode()])
    expected = index.find(batch, index.stream_ids(batch.data, batch.starts, batch.ends))
    assert index.find_stream(batch.data, batch.starts, batch.ends) == expected
    assert [g for _, g in expected] == [0, 0]


def test_progress_callback_and_no_numpy_on_import(tmp_path: Any, corpus: dict[str, Any]) -> None:
    vault = TrainVault()
    env = setup(vault, str(tmp_path), corpus)
    seen: list[ScanProgress] = []
    scan_dataset(
        vault,
        env["manifest_uri"],
        env["index"],
        scan_manifest_sha256=SCAN_SHA,
        producer_pins_sha256=PINS_SHA,
        progress=seen.append,
    )
    total = vault.load_manifest(env["manifest_uri"]).splits["train"].size_bytes
    assert seen[-1] == ScanProgress(2, 2, total, total)
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)
    code = "import sys, trainvault, trainvault.contamination; print(sorted({'numpy','torch','pyarrow','dagster'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_scan_fails_closed(tmp_path: Any, corpus: dict[str, Any]) -> None:
    vault = TrainVault()
    env = setup(vault, str(tmp_path), corpus)
    manifest = vault.load_manifest(env["manifest_uri"])
    digest = sha256_hex(vault.storage.get(env["manifest_uri"]))
    s0, s1 = manifest.splits["train"].shards
    r0 = scan_shard(vault.storage, manifest.data_format, s0, env["index"])
    kw = dict(data_manifest_sha256=digest, scan_manifest_sha256=SCAN_SHA, producer_pins_sha256=PINS_SHA)
    with pytest.raises(ContaminationError, match=r"shard train/_/s1 .* was not scanned"):
        reduce_report(env["index"], manifest, [r0], **kw)
    other = r0.model_copy(update={"contract_sha256": "3" * 64})
    with pytest.raises(ContaminationError, match="rescan it"):
        reduce_report(env["index"], manifest, [other], **kw)
    with pytest.raises(ContaminationError, match="scan_manifest_sha256"):
        reduce_report(env["index"], manifest, [r0], **{**kw, "scan_manifest_sha256": "nope"})
    # A record without the scanned field fails the scan, naming the record.
    saver = vault.dataset_saver(str(tmp_path / "bad" / "data-manifest-v1.json"))
    saver.save("train", None, [{"id": "a", "text": "x"}, {"id": "b", "body": "y"}], shard_id="b0")
    bad = saver.commit_manifest().document
    with pytest.raises(ContaminationError, match="record 1 has no string field 'text'"):
        scan_shard(vault.storage, bad.data_format, bad.splits["train"].shards[0], env["index"])
    # A shard changed after publication is refused before any of it is trusted.
    path = s1.uri.removeprefix("file://")
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="changed after it was published"):
        scan_shard(vault.storage, manifest.data_format, s1, env["index"])


def test_memory_store_with_uuid_root(corpus: dict[str, Any]) -> None:
    vault = TrainVault()
    env = setup(vault, f"memory://{uuid.uuid4().hex}", corpus)
    assert found(scan(vault, env)) == corpus["expected"]


def test_every_contract_field_is_scanned_on_its_own(tmp_path: Any, corpus: dict[str, Any], humaneval: Any) -> None:
    vault = TrainVault()
    env = setup(vault, str(tmp_path), corpus, contract=VerifierContract(fields=["text", "meta"]))
    item_id = corpus["in_meta"]
    record = corpus["shards"]["s1"][21]
    n = len(NORM.reference_tokens(item_text(next(it for it in humaneval.items if it["task_id"] == item_id))))
    spans = oracle_spans(record["meta"])
    expected = dict(corpus["expected"])
    expected[("humaneval", item_id)] = [
        ("train", "_/s1", 21, "s1-21", "meta", 20, 20 + n, spans[20][0], spans[20 + n - 1][1])
    ]
    report = scan(vault, env)
    assert found(report) == expected
    assert report.fields == ["text", "meta"]
