"""A verifier contract that leaves a text-carrying field unscanned is denied (`UnscannedFieldError`
naming the fields) unless the trainer's policy exempts them: top-level, nested and list-of-string
fields, under the default policy and scanner-signed with a full re-scan, in every format, and from
the command line. Fields of short strings (ids, labels) cannot hide an item the contract detects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, TrainVault, UnscannedFieldError
from trainvault.approval import ApprovalPolicy, SigningKey
from trainvault.cli import main
from trainvault.contamination import VerifierContract


@pytest.fixture(scope="session")
def nested_records(
    make_records: Callable[..., Any], eval_items: list[dict[str, str]]
) -> Callable[[int], list[dict[str, Any]]]:
    """`nested_records(shard)`: text in `text` (scanned), and text the default contract does not scan:
    a nested mapping, a list of strings and a list of mappings; plus short labels and ids (not text)."""
    #: A HumanEval-like item of the test release: 14 tokens, well past min_item_tokens (8).
    plant = eval_items[1]["text"]

    def make(shard: int) -> list[dict[str, Any]]:
        out = []
        for i, r in enumerate(make_records(shard, 12)):
            words = r["text"].split()
            out.append(
                {
                    **r,
                    "lang": "en",
                    "labels": ["a", "b"],
                    "meta": {"title": " ".join(words[:10]), "page": i},
                    "tags": words[:9],
                    "messages": [{"role": "user", "content": " ".join(words[-9:])}],
                }
            )
        out[3]["meta"]["title"] = plant  # contaminated, but unscanned: the gate must not call this clean
        return out

    return make


@pytest.mark.parametrize("data_format", ["msgpack.zst", "jsonl.gz", "parquet"])
def test_a_contract_that_skips_the_text_is_denied_under_the_default_policy(
    build_chain: Callable[..., Any], tmp_path: Path, data_format: str
) -> None:
    vault = TrainVault()
    chain = build_chain(
        vault, str(tmp_path), contaminate=True, data_format=data_format, contract=VerifierContract(fields=["id"])
    )
    assert chain.extra["report"].contaminated_items == []  # the scan saw only ids: "0 contaminated items"
    with pytest.raises(UnscannedFieldError, match=r"record field\(s\) 'text' carry text") as caught:
        vault.approve_dataset(chain.request())
    assert caught.value.fields == ("text",)
    assert "unscanned_fields" in str(caught.value) and "contract does not scan (it scans 'id')" in str(caught.value)
    # The trainer's explicit exemption is the one way through.
    assert vault.approve_dataset(chain.request(), policy=ApprovalPolicy(unscanned_fields=["text"]))


@pytest.mark.parametrize("data_format", ["msgpack.zst", "jsonl.gz"])
def test_nested_and_list_fields_are_surveyed_and_exempted_by_dotted_path(
    nested_records: Callable[[int], list[dict[str, Any]]],
    build_chain: Callable[..., Any],
    tmp_path: Path,
    data_format: str,
) -> None:
    vault = TrainVault()
    chain = build_chain(vault, str(tmp_path), data_format=data_format, shard_records=nested_records)
    with pytest.raises(UnscannedFieldError) as caught:
        vault.approve_dataset(chain.request())
    # lang, labels, meta.page, messages.role and the ids hold short strings (or none): not text.
    assert caught.value.fields == ("messages.content", "meta.title", "tags")
    partial = ApprovalPolicy(unscanned_fields=["meta", "tags"])  # `meta` exempts meta.title
    with pytest.raises(UnscannedFieldError, match=r"'messages\.content'") as caught:
        vault.approve_dataset(chain.request(), policy=partial)
    assert caught.value.fields == ("messages.content",)
    assert vault.approve_dataset(
        chain.request(), policy=ApprovalPolicy(unscanned_fields=["meta.title", "tags", "messages.content"])
    )
    with pytest.raises(UnscannedFieldError):  # a prefix of a key's name is not its parent
        vault.approve_dataset(chain.request(), policy=ApprovalPolicy(unscanned_fields=["me", "ta", "messages.c"]))


def test_scanner_signed_with_a_full_rescan_is_denied_too(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    vault, key = TrainVault(), SigningKey.generate()
    chain = build_chain(
        vault, str(tmp_path), contaminate=True, contract=VerifierContract(fields=["id"]), scanner_key=key
    )
    full = {"scanner_keys": [key.public_key], "rescan_min_shards": 0, "rescan_fraction": (1, 1)}
    with pytest.raises(UnscannedFieldError, match="'text'"):
        vault.approve_dataset(chain.request(), policy=ApprovalPolicy(**full))
    assert vault.approve_dataset(chain.request(), policy=ApprovalPolicy(**full, unscanned_fields=["text"]))


@pytest.mark.parametrize("bad", ["text", ["text", 3], [""], [".meta"], ["meta."], None])
def test_unscanned_fields_must_be_a_list_of_names(bad: Any) -> None:
    with pytest.raises(ApprovalError, match="unscanned_fields must be a list of field names"):
        ApprovalPolicy(unscanned_fields=bad)


def test_the_command_line_takes_unscanned_fields(
    build_chain: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = build_chain(
        TrainVault(), str(tmp_path / "data"), shards=2, records_per_shard=10, contract=VerifierContract(fields=["id"])
    )
    assert main(["keygen", "--out", str(tmp_path / "k")]) == 0
    request = tmp_path / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    approve = [
        "approve",
        str(request),
        "--signing-key",
        str(tmp_path / "k.key"),
        "--out",
        str(tmp_path / "approval.json"),
    ]
    capsys.readouterr()
    assert main(approve) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "'text' carry text" in err and "--unscanned-field" in err
    assert not (tmp_path / "approval.json").exists()
    assert main([*approve, "--unscanned-field", "text"]) == 0, capsys.readouterr().err
    sha = capsys.readouterr().out.split("sha256")[1].split()[0]
    verify = ["verify", str(tmp_path / "approval.json"), "--sha256", sha, "--trusted-key", str(tmp_path / "k.pub")]
    # The approver's exemption is in the signed record: a trainer that does not exempt 'text' is refused.
    err = capsys.readouterr().err if main(verify) == 1 else ""
    assert "let record field(s) 'text' go unscanned (found carrying text: 'text')" in err and "--unscanned-field" in err
    assert main([*verify, "--unscanned-field", "text"]) == 0, capsys.readouterr().err
