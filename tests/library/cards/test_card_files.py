"""A swapped approved-view copy must not reach a Croissant reader: the card step checks each clean copy
before it reuses a card and writes a swapped one again; `trainvault croissant-check` hashes every file
a card lists against what it states (issue 34 item 8)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import TrainVault
from trainvault.approval import ApprovalPolicy, SigningKey, write_approval
from trainvault.cards import reuse_croissant, write_croissant
from trainvault.cards.card_files import check_card
from trainvault.cli import main
from trainvault.contamination import exclusions_from_report

mlc = pytest.importorskip("mlcroissant")


@pytest.fixture
def card(build_chain: Callable[..., Any], eval_items: list[dict[str, str]], tmp_path: Path) -> Any:
    """A jsonl.gz approval excluding record 3 of train/hard/s2 (an evaluation item), and its card."""
    chain = build_chain(TrainVault(), str(tmp_path / "data"), shards=3, data_format="jsonl.gz", contaminate=True)
    ex = exclusions_from_report(chain.extra["report"], report_sha256=chain.refs["contamination_report"].sha256)
    allow = ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 10))
    approved = chain.vault.approve_dataset(chain.with_exclusions(ex), policy=allow)
    key = SigningKey.generate()
    record = write_approval(chain.vault, f"{chain.root}/ds/approval-v1.dsse.json", approved, signing_keys=[key])
    opened = chain.vault.open_approved(record.uri, record.sha256, trusted_keys=[key.public_key], policy=allow)
    written = write_croissant(chain.vault, opened, name="t")
    doc = json.loads(Path(written.uri.removeprefix("file://")).read_bytes())
    node = next(n for n in doc["distribution"] if n["@id"] == "files/train/hard/s2")
    copy = Path(written.uri.removeprefix("file://")).parent / node["contentUrl"]
    published = Path(opened.manifest.splits["train"].shard("hard/s2").uri.removeprefix("file://"))
    return chain, opened, written, copy, published


def croissant_ids(card_uri: str) -> set[str]:
    dataset = mlc.Dataset(jsonld=card_uri.removeprefix("file://"))
    return {r["train/id"].decode() for r in dataset.records("train")}


def test_a_swapped_copy_is_written_again_before_the_card_is_reused(card: Any, caplog: pytest.LogCaptureFixture) -> None:
    chain, opened, written, copy, published = card
    excluded = f"s2-{len(chain.records['s2']) // 2}"
    assert excluded not in croissant_ids(written.uri)
    copy.write_bytes(published.read_bytes())  # the attack: the original shard under the clean copy's name
    assert excluded in croissant_ids(written.uri)  # mlcroissant reads it unchecked
    bad = [f for f in check_card(chain.vault, written.uri) if not f.ok]
    assert [f.uri for f in bad] == [f"file://{copy}"]
    with caplog.at_level(logging.WARNING, logger="trainvault.cards.card_files"):
        reused, rewritten = reuse_croissant(chain.vault, opened, written.uri)
    assert (reused, rewritten) == (written, True) and str(copy) in caplog.text
    assert all(f.ok for f in check_card(chain.vault, written.uri))
    assert excluded not in croissant_ids(written.uri)
    assert reuse_croissant(chain.vault, opened, written.uri) == (written, False)  # nothing to do now


def test_croissant_check_names_each_file_that_differs(card: Any, capsys: pytest.CaptureFixture[str]) -> None:
    chain, _, written, copy, published = card
    assert main(["croissant-check", written.uri]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out and all(line.startswith("ok\t") for line in out) and any(str(copy) in line for line in out)
    copy.write_bytes(published.read_bytes())
    other = Path(chain.vault.load_manifest(chain.manifest_uri).splits["train"].shard("easy/s0").uri[7:])
    other.write_bytes(other.read_bytes()[:-1])  # a published shard truncated after the card was written
    assert main(["croissant-check", written.uri]) == 1
    captured = capsys.readouterr()
    mismatches = [line for line in captured.out.splitlines() if line.startswith("MISMATCH")]
    assert {line.split("\t")[1] for line in mismatches} == {f"file://{copy}", f"file://{other}"}
    assert captured.err.count("\n") == 1 and "2 of " in captured.err and "do not hand this card out" in captured.err
