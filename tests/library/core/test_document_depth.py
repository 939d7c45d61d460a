"""JSON nested past `MAX_JSON_DEPTH`: every document parser refuses it with a `TrainVaultError`
(a raw `RecursionError` escaped from `open_approved` for an approval record a few thousand
levels deep), and a document within the limit still parses."""

from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any

import pytest

import trainvault
from trainvault import ManifestError, TrainVault, TrainVaultError
from trainvault.approval import SigningKey
from trainvault.approval.dsse import Envelope, sign_envelope
from trainvault.canonical import MAX_JSON_DEPTH, canonical_json, loads_strict, sha256_hex
from trainvault.contamination import jsonl_benchmark
from trainvault.documents import Document
from trainvault.errors import EncodeError
from trainvault.rollouts.samples import checked_metadata

DEEP = 5000


def nested(depth: int, leaf: Any = 0) -> bytes:
    """A JSON object whose field ``a`` nests `depth` levels of arrays and objects in all."""
    inner = "[" * (depth - 1) + json.dumps(leaf) + "]" * (depth - 1)
    return ('{"a":' + inner + "}").encode()


def all_documents() -> list[type[Document]]:
    for mod in pkgutil.walk_packages(trainvault.__path__, "trainvault."):
        if not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)
    out, stack = [], [Document]
    while stack:
        cls = stack.pop()
        stack += cls.__subclasses__()
        if "KIND" in cls.__dict__:
            out.append(cls)
    return out


def test_open_approved_refuses_a_deeply_nested_record(tmp_path: Any) -> None:
    vault = TrainVault()
    key = SigningKey.generate()
    payload = b'{"_type":"https://in-toto.io/Statement/v1","predicate":' + nested(DEEP) + b"}"
    for name, data in {
        "envelope": nested(DEEP),  # the envelope itself
        "statement": sign_envelope(payload, [key]).to_json_bytes(),  # the signed statement inside it
    }.items():
        uri = str(tmp_path / f"{name}.dsse.json")
        vault.storage.put_create(uri, data)
        with pytest.raises(TrainVaultError, match=f"deeper than {MAX_JSON_DEPTH}"):
            vault.open_approved(uri, sha256_hex(data), trusted_keys=[key.public_key])


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, DEEP])
def test_every_document_kind_refuses_excessive_depth(depth: int) -> None:
    kinds = all_documents()
    assert len(kinds) >= 20  # every kind the library publishes was found
    for cls in kinds:
        doc = json.loads(nested(2))
        doc.update(format=cls.KIND, version=cls.VERSION)
        data = canonical_json(doc).replace(b'"a":[0]', b'"a":' + nested(depth)[5:-1])
        with pytest.raises(ManifestError, match=f"deeper than {MAX_JSON_DEPTH}"):
            cls.from_json_bytes(data, source=f"deep {cls.KIND}")
    with pytest.raises(ManifestError, match="deeper"):
        Envelope.from_json_bytes(nested(depth))
    with pytest.raises(TrainVaultError, match="deeper"):
        jsonl_benchmark("deep", b'{"id":"x","text":"t"}\n' + nested(depth) + b"\n")


def test_depth_at_the_limit_parses_and_strings_do_not_count() -> None:
    assert loads_strict(nested(MAX_JSON_DEPTH), source="x")["a"]
    many = json.dumps({"text": "[{" * 10_000, "list": [[1]] * 10_000}).encode()
    assert loads_strict(many, source="x")["text"] == "[{" * 10_000


def test_writers_refuse_values_nested_past_the_recursion_limit() -> None:
    deep: Any = 0
    for _ in range(DEEP):
        deep = [deep]
    with pytest.raises(ManifestError, match="deeper"):
        canonical_json({"a": deep})
    with pytest.raises(EncodeError, match="sample 3"):
        checked_metadata({"a": deep}, 3)
    with pytest.raises(EncodeError, match="sample 4"):
        checked_metadata(json.loads(nested(MAX_JSON_DEPTH + 1)), 4)
