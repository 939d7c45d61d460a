"""A block decodes itself: the two decoding steps of every format, and what the readers make of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainvault import DecodeError, EncodeError, TrainVault
from trainvault.formats import FORMATS, get_format
from trainvault.formats.blocks import encode_shard
from trainvault.publication.reader import ShardReader, read_descriptor
from trainvault.storage import Storage


def records(n: int) -> list[dict]:
    rng = np.random.default_rng(7)
    return [
        {"id": f"r{i:05d}", "text": "word " * int(rng.integers(1, 40)), "tokens": rng.integers(0, 999, 12).tolist()}
        for i in range(n)
    ]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_inflate_then_records_is_decode_block(fmt: str) -> None:
    f = get_format(fmt)
    rows = records(200)
    shard = encode_shard(f, rows, block_bytes=2048)
    data = bytes(shard.data)
    ctx = f.open_context(data[shard.trailer.offset :] if shard.trailer else None, len(data))
    decoded = []
    for i, b in enumerate(shard.blocks):
        block = data[b.offset : b.offset + b.length]
        two_steps = f.block_records(f.inflate_block(block, i, ctx), i)
        assert two_steps == f.decode_block(block, i, ctx)
        assert len(two_steps) == b.record_count
        decoded.extend(two_steps)
    assert [r["id"] for r in decoded] == [r["id"] for r in rows]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_block_that_does_not_decode_names_the_shard(fmt: str, tmp_path: Path) -> None:
    manifest_uri = str(tmp_path / "ds" / "data-manifest-v1.json")
    saver = TrainVault().dataset_saver(manifest_uri, data_format=fmt)
    saver.save("train", None, records(50), shard_id="s0")
    manifest = saver.commit_manifest().document
    (entry,) = manifest.splits["train"].shards
    storage = Storage()
    reader = ShardReader(storage, entry, fmt, read_descriptor(storage, entry))
    ((index, data),) = reader.iter_block_bytes([0])
    assert reader.decode(index, data) == reader.records(index, reader.inflate(index, data))
    # Bytes that passed no check: the reader's decoding steps refuse them with the shard's URI.
    with pytest.raises(DecodeError, match=rf"{entry.uri}: block 0 "):
        reader.decode(0, b"\x00" * len(data))


def test_block_bytes_must_be_positive() -> None:
    with pytest.raises(EncodeError, match="block_bytes is 0"):
        encode_shard(get_format("msgpack.zst"), records(3), block_bytes=0)
