"""``trainvault read``: a split through the training loader, with a live line on a terminal."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

pytest.importorskip("torch")

from trainvault import TrainVault
from trainvault.cli import main


@pytest.fixture
def uri(tmp_path) -> str:
    uri = str(tmp_path / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri, block_bytes=1000)
    saver.save("train", None, [{"id": i, "tokens": np.full(30, i, dtype=np.int32)} for i in range(300)], shard_id="a")
    saver.commit_manifest()
    return uri


def test_read_reports_every_record(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["read", uri, "--batch-size", "16"]) == 0
    out = capsys.readouterr()
    assert re.fullmatch(
        r"read 300 records of split 'train' in [\d.]+ s \([\d,]+ rec/s\), every block verified; "
        r"waited [\d.]+ s for data\n",
        out.out,
    )
    assert out.err == ""  # not a terminal: no live line


def test_read_takes_repeated_stages_as_their_union(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(uri)
    for stage, n in (("a", 3), ("b", 5), ("c", 7)):
        saver.save("train", stage, [{"id": f"{stage}{i}"} for i in range(n)], shard_id=stage)
    saver.commit_manifest()
    assert main(["read", uri, "--stage", "a", "--stage", "c"]) == 0
    assert capsys.readouterr().out.startswith("read 10 records of split 'train'")  # a and c, not b


def _drain(leader: int) -> bytes:
    """Everything written to the pty: one read may return only part of it; EIO once the writer is closed."""
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def test_read_draws_a_live_line_on_a_terminal(
    uri: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    leader, follower = os.openpty()
    terminal = os.fdopen(follower, "w")
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr("trainvault.cli.read.REDRAWS_PER_S", 1e9)  # draw at every step
    assert main(["read", uri, "--batch-size", "16", "--steps", "5", "--window", "3"]) == 0
    terminal.flush()
    terminal.close()
    shown = _drain(leader).decode()
    os.close(leader)
    lines = [part for part in shown.split("\r\x1b[K") if part]
    assert len(lines) == 5
    assert re.match(
        r"step 5  80 records  [\d,]+ rec/s  data wait \d+% of the last 3 steps  \| s: fetch [\d.]+ "
        r"verify [\d.]+ decompress [\d.]+ decode [\d.]+ collate [\d.]+  [\d.]+ MB",
        lines[-1],
    )
    assert capsys.readouterr().out.startswith("read 80 records of split 'train'")
