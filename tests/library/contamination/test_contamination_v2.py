"""tvnorm-v2 / ngram-exact-v2: decoding scraped text, its offset map, the contract ids, and v1 kept verifiable."""

from __future__ import annotations

import html
import json
import subprocess
import sys
import unicodedata
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvault import ManifestError, TrainVault
from trainvault.contamination import (
    ContaminationReport,
    MethodSpec,
    VerifierContract,
    jsonl_benchmark,
    load_index,
    publish_release,
    scan_records,
)
from trainvault.contamination.contract import V1_CONTRACT, V2_CONTRACT
from trainvault.contamination.escapes import decode, decode_utf8, decode_with_map, format_characters
from trainvault.contamination.normalize import NormalizationSpec, Normalizer
from trainvault.publication.bound import read_document, write_document

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
V2 = Normalizer()
V1 = Normalizer(NormalizationSpec(id="tvnorm-v1"))


def test_decode_examples() -> None:
    assert decode("zero\u200bwidth wo\u2060rd soft\u00adhyphen \ufeffbom") == "zerowidth word softhyphen bom"
    assert decode("&lt;pre&gt; &quot;a&quot; &#39;b&#x27; &amp; &eacute;t&eacute; &ltfoo") == (
        "<pre> \"a\" 'b' & été <foo"
    )
    assert decode(r"line\nnext\ttab\r \" \' \/ \\ caf\u00e9 \ud83d\ude00 \ud800") == (
        "line\nnext\ttab\r \" ' / \\ café 😀 \ufffd"
    )
    # Escaped twice decodes like escaped once; text without escapes is left alone.
    assert decode("&amp;lt; &amp;#39; \\\\n \\\\u00e9") == "< ' \n é"
    assert decode("a&b && c; C:\\dir x\\y") == "a&b && c; C:\\dir x\\y"
    # An '&' that starts no reference does not hide what follows it.
    assert decode("a&&b\\n &x\u200by&lt;") == "a&&b\n &xy<"
    assert decode_utf8(b"plain ascii") == b"plain ascii"
    assert decode_utf8("caf\u00e9\u200b".encode()) == "café".encode()
    assert all(unicodedata.category(c) == "Cf" for c in format_characters()) and "\u00ad" in format_characters()


def test_decode_equals_html_unescape_and_json_loads() -> None:
    # Without backslashes or format characters, decode is html.unescape until stable.
    text = "&lt;b&gt;x &amp;amp; &#169;&copy &NotEqualTilde; &#x1F600; &#0; &#150;"
    once, twice = html.unescape(text), html.unescape(html.unescape(text))
    assert decode(text) == html.unescape(twice) and once != twice
    # A JSON string with its quotes is decoded like json.loads decodes it.
    value = 'def f(x):\n\t"""Café 😀 \\ / it\'s"""\r\n'
    assert decode(json.dumps(value)[1:-1]) == decode(value)
    assert decode(json.dumps(value, ensure_ascii=False)[1:-1]) == decode(value)


TEXTS = st.lists(
    st.sampled_from(
        [
            "a",
            "B",
            " ",
            "&",
            ";",
            "#",
            "x",
            "lt",
            "amp",
            "39",
            "\\",
            "u",
            "00e9",
            "d83d",
            "de00",
            "n",
            "\u200b",
            "\u00ad",
            "\u2060",
            "\ufeff",
            "é",
            "ﬁ",
            "<",
            "\u0338",
            "\n",
            "quot",
            "ud83d",
        ]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXTS | st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_decode_is_stable_and_maps_every_character(text: str) -> None:
    out = decode(text)
    assert decode(out) == out
    assert not set(out) & set(format_characters())
    decoded, starts, ends = decode_with_map(text)
    assert decoded == out and len(starts) == len(ends) == len(out)
    for j, c in enumerate(out):
        a, b = starts[j], ends[j]
        assert 0 <= a < b <= len(text)
        # Each character comes from a stretch of the original that decodes to text holding it.
        assert c in decode(text[a:b]) or b - a > 1
        assert j == 0 or starts[j - 1] <= a


@settings(max_examples=400, deadline=None)
@given(TEXTS | st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_v2_fast_tokens_equal_the_definition(text: str) -> None:
    assert V2.tokens(text) == V2.reference_tokens(text) == V1.reference_tokens(decode(text))
    batch = V2.tokenize_batch([text.encode(), b"x " + text.encode()])
    assert batch.split() == [V2.tokens(text), [b"x", *V2.tokens(text)]]
    # Without '&' or '\' the batch is not decoded as a whole: format characters go word by word.
    plain = text.replace("&", "").replace("\\", "")
    assert V2.tokenize_batch([plain.encode()]).split() == [V2.reference_tokens(plain)]


def test_v2_spans_index_the_original_text() -> None:
    text = "Caf&eacute; na\\u00efve zero\u200bwidth &quot;quoted&quot;\\nnext ﬁne"
    tokens, spans = V2.tokens_with_spans(text)
    assert tokens == V2.tokens(text) == [b"caf\xc3\xa9", b"na\xc3\xafve", b"zerowidth", b"quoted", b"next", b"fine"]
    assert [text[a:b] for a, b in spans] == ["Caf&eacute;", "na\\u00efve", "zero\u200bwidth", "quoted", "next", "ﬁne"]
    # v1 keeps its own tokens and spans for the same text.
    assert V1.tokens(text)[:3] == [b"caf", b"eacute", b"na"]


def test_contract_ids_are_bound() -> None:
    assert V2_CONTRACT.method.id == "ngram-exact-v2" and V2_CONTRACT.method.normalization.id == "tvnorm-v2"
    assert V1_CONTRACT.method.id == "ngram-exact-v1" and V1_CONTRACT.method.normalization.id == "tvnorm-v1"
    assert MethodSpec(id="ngram-exact-v1", n=8).normalization.id == "tvnorm-v1"
    assert MethodSpec(n=8).normalization.id == "tvnorm-v2"


@pytest.mark.parametrize(("method", "norm"), [("ngram-exact-v1", "tvnorm-v2"), ("ngram-exact-v2", "tvnorm-v1")])
def test_mismatched_method_and_normalisation_fail_closed(method: str, norm: str) -> None:
    vault, uri = TrainVault(), f"memory://{uuid.uuid4().hex}/contract.json"
    doc = json.loads(V2_CONTRACT.to_json_bytes())
    doc["method"]["id"], doc["method"]["normalization"]["id"] = method, norm
    vault.storage.put(uri, json.dumps(doc).encode())
    with pytest.raises(ManifestError, match=f"method {method} normalises with .*not {norm}"):
        read_document(vault.storage, VerifierContract, uri)


def test_v1_report_written_before_v2_stays_verifiable() -> None:
    committed = (GOLDEN / "contamination-report-v1.json").read_bytes()
    report = ContaminationReport.model_validate_json(committed)
    assert report.method.id == "ngram-exact-v1" and report.method.normalization.id == "tvnorm-v1"
    assert report.to_json_bytes() == committed
    assert report.recompute_pass() is False and report.benchmarks[0].n_contaminated == 3
    # Today's code, given the same inputs and the v1 contract, writes the same bytes.
    out = subprocess.run(
        [sys.executable, str(GOLDEN / "build_v1_report.py")], capture_output=True, timeout=120, check=True
    )
    assert out.stdout == committed


def test_v2_scan_finds_scraped_copies_at_their_original_spans() -> None:
    item = (
        'def rolling_max(numbers: List[int]) -> List[int]:\n    """ From a given list of integers, generate a '
        "list of rolling maximum élément found until given moment in the sequence.\n"
    )
    vault, root = TrainVault(), f"memory://{uuid.uuid4().hex}"
    bench = jsonl_benchmark("tiny", json.dumps({"id": "i0", "text": item}).encode() + b"\n")
    release = publish_release(vault.storage, f"{root}/release", "r", [bench])
    forms = [
        json.dumps(item),
        html.escape(item),
        item.replace("ing", "in\u00adg"),
        json.dumps(item).replace("\\n", "\\\\n"),
    ]
    records = [{"id": str(k), "text": f"lead in {text} trail"} for k, text in enumerate(forms)]
    found = {}
    for contract in (V1_CONTRACT, V2_CONTRACT):
        c = write_document(vault.storage, f"{root}/{contract.method.id}.json", contract)
        index = load_index(vault, release, c)
        result = scan_records(index, records, shard_sha256="0" * 64)
        hits = [h for it in result.items for h in it.hits]
        whole = len(index.normalizer.tokens(item))
        found[contract.method.id] = {h.record_index for h in hits if h.token_end - h.token_start == whole}
        for h in hits:
            original = records[h.record_index]["text"][h.char_start : h.char_end]
            want = index.normalizer.tokens(records[h.record_index]["text"])[h.token_start : h.token_end]
            assert index.normalizer.tokens(original) == want
    assert found == {"ngram-exact-v1": set(), "ngram-exact-v2": {0, 1, 2, 3}}
