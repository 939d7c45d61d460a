"""Issue 34 item 3: a field holding the UTF-8 bytes of a benchmark item (msgpack `bin`, a Parquet
binary column, a list of bytes) is surveyed as text, so a contract that does not scan it is denied
(`UnscannedFieldError`) under the default policy and no approved loader yields it; bytes that are
not UTF-8 stay non-text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import TrainVault, UnscannedFieldError
from trainvault.approval import ApprovalPolicy


@pytest.mark.parametrize(
    ("data_format", "form"),
    [("msgpack.zst", "bytes"), ("parquet", "bytes"), ("msgpack.zst", "list of bytes")],
)
def test_text_stored_as_bytes_is_surveyed_and_denied_as_unscanned(
    build_chain: Callable[..., Any],
    make_records: Callable[..., list[dict[str, Any]]],
    eval_items: list[dict[str, str]],
    tmp_path: Path,
    data_format: str,
    form: str,
) -> None:
    plant = eval_items[1]["text"].encode("utf-8")  # 14 tokens of a test-release item

    def records(shard: int) -> list[dict[str, Any]]:
        out = []
        for i, r in enumerate(make_records(shard, 12)):
            payload = r["text"].encode("utf-8") if i != 3 else plant
            out.append({**r, "payload": [payload] if form == "list of bytes" else payload, "raw": bytes(range(256))})
        return out

    vault = TrainVault()
    chain = build_chain(vault, str(tmp_path), data_format=data_format, shard_records=records)
    assert chain.extra["report"].contaminated_items == []  # the scan reads `text` only
    with pytest.raises(UnscannedFieldError, match=r"'payload' carry text") as caught:
        vault.approve_dataset(chain.request())
    assert caught.value.fields == ("payload",)  # `raw` (not UTF-8) is not text
    # The trainer's explicit exemption is the one way through.
    assert vault.approve_dataset(chain.request(), policy=ApprovalPolicy(unscanned_fields=["payload"]))
