"""msgpack.zst text read as stored (`block_text`): the decoder's results, or the decoder itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvault import DecodeError, TrainVault
from trainvault.contamination import VerifierContract, humaneval_benchmark, load_index, publish_release, scan_records
from trainvault.contamination.block_text import BlockTextReader
from trainvault.contamination.normalize import NormalizationSpec, Normalizer
from trainvault.contamination.scan import _Accumulator, _add_block, scan_shard
from trainvault.formats import get_format
from trainvault.formats.blocks import encode_shard
from trainvault.formats.msgpack_zst import unpack_records
from trainvault.publication.bound import write_document
from trainvault.publication.reader import ShardReader

FMT = get_format("msgpack.zst")


def shaped_records(n: int) -> list[dict[str, Any]]:
    """Records of every shape the decoder turns into string fields: ids of each kind, arrays, nesting."""
    ids: list[Any] = ["r-é", 7, -3, True, 2.5, None, 2**40]
    out = []
    for i in range(n):
        record: dict[str, Any] = {
            "text": f"word{i} straße 中文 x\u200by &amp; \\n end " * 8,  # 256 bytes or more, or under 32:
            "title": "" if i % 5 == 0 else f"Title {i}",  # strings repacking can check
            "tokens": np.arange(i % 7, dtype=np.int32),
            "meta": {"k": [1, "two", 3.0]},
        }
        if i % 8:
            record["id"] = ids[i % len(ids)]
        out.append(record)
    return out


def payloads(records: list[dict[str, Any]]) -> list[bytes]:
    shard = encode_shard(FMT, records, block_bytes=512)
    data = bytes(shard.data)
    return [FMT.inflate_block(data[b.offset : b.offset + b.length], i, None) for i, b in enumerate(shard.blocks)]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = str(tmp_path_factory.mktemp("bt"))
    vault = TrainVault()
    release = publish_release(vault.storage, f"{root}/release", "he", [humaneval_benchmark()])
    contract = VerifierContract(fields=["text", "title"])
    bound = write_document(vault.storage, f"{root}/contract.json", contract)
    return load_index(vault, release, bound)


def read(payload: bytes) -> Any:
    return BlockTextReader(["text", "title"], "id").read(payload)


def test_blocks_read_as_stored_equal_the_decoder(index: Any) -> None:
    blocks = payloads(shaped_records(60))
    assert len(blocks) > 3
    acc = _Accumulator(index)
    reader = BlockTextReader(["text", "title"], "id")
    for payload in blocks:
        decoded = unpack_records(payload)
        block = reader.read(payload)
        assert block is not None
        assert block.fields == [[r["text"].encode() for r in decoded], [r["title"].encode() for r in decoded]]
        assert [block.record_id(i) for i in range(len(decoded))] == [acc._record_id(r) for r in decoded]


def test_after_a_block_repacking_cannot_check_the_shard_is_decoded() -> None:
    reader = BlockTextReader(["text"], "id")
    plain = msgpack.packb({"id": "a", "text": "t" * 300})
    assert reader.read(plain) is not None
    assert reader.read(msgpack.packb({"id": "i" * 40, "text": "t" * 300})) is None  # a 40-byte string
    assert reader.repack is False
    assert reader.read(plain) is None


BIN = {"use_bin_type": True}
RAW = {"use_bin_type": False}


@pytest.mark.parametrize(
    "payload",
    [
        msgpack.packb({"id": "a", "text": b"bin, not str"}, **BIN),
        msgpack.packb({b"text": "x"}, **BIN),  # a bin key
        msgpack.packb({"text": "x", "text2": "y", "title": "z", b"title": "w"}, **BIN),
        msgpack.packb(["not", "a", "map"]),
        msgpack.packb({"id": "a", "title": "t"}),
        msgpack.packb({"id": "a", "text": 5, "title": "t"}),
        msgpack.packb({"id": b"\xc3(", "text": b"x", "title": b"t"}, **RAW),  # an id that is not UTF-8
        msgpack.packb({"id": b"a", "text": b"x", "title": b"t", b"\xc3(": b"k"}, **RAW),  # nor a key
        msgpack.packb({"id": "a", "text": b"x\xff", "title": b"t"}, **RAW),  # 0xFF splits tokeniser batches
        b"\x82\xa4text\xa1x\xa4text\xa1y",  # a repeated key
        msgpack.packb({"id": "a", "text": "x", "title": "t"})[:-1],  # truncated
        msgpack.packb({1: "x"}),
    ],
)
def test_blocks_the_decoder_must_read_are_left_to_it(payload: bytes) -> None:
    assert read(payload) is None


def test_scan_shard_equals_scan_records(index: Any, tmp_path: Path) -> None:
    """Blocks read as stored and blocks left to the decoder (a bytes field) give the in-memory result."""
    item = humaneval_benchmark().items[3]
    records = shaped_records(120)
    records[10]["text"] = "prefix " + item["prompt"] + item["canonical_solution"]
    records[90]["title"] = item["prompt"] + item["canonical_solution"]
    for r in records[80:]:
        r["blob"] = b"\x00\x01"  # stored as bin: from here on the decoder reads the blocks
    vault = TrainVault()
    saver = vault.dataset_saver(str(tmp_path / "ds" / "data-manifest-v1.json"), block_bytes=2048)
    saver.save("train", None, records, shard_id="s0")
    (entry,) = saver.commit_manifest().document.splits["train"].shards
    got = scan_shard(vault.storage, "msgpack.zst", entry, index)
    want = scan_records(index, records, shard_sha256=entry.sha256, size_bytes=entry.size_bytes)
    assert got == want
    assert {(10, "text"), (90, "title")} <= {(h.record_index, h.field) for it in got.items for h in it.hits}


def test_text_that_is_not_utf8_is_a_decode_error(index: Any, tmp_path: Path) -> None:
    vault = TrainVault()
    saver = vault.dataset_saver(str(tmp_path / "ds" / "data-manifest-v1.json"))
    saver.save("train", None, [{"id": "a", "text": "x", "title": "y"}], shard_id="s0")
    (entry,) = saver.commit_manifest().document.splits["train"].shards
    reader = ShardReader(vault.storage, entry, "msgpack.zst")
    # Bytes no check has passed, as a writer without UTF-8 checks would store them.
    for text in (b"ok \xc3( bad", b"bad \xff"):
        payload = msgpack.packb({"id": "a", "text": text, "title": "y"}, use_bin_type=False)
        block = zstandard.ZstdCompressor().compress(payload)
        with pytest.raises(DecodeError, match=rf"{entry.uri}: block 0 "):
            _add_block(_Accumulator(index), reader, BlockTextReader(["text", "title"], "id"), 0, block, entry.uri)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=24).map(lambda b: b.replace(b"\xff", b"")), min_size=1, max_size=4))
def test_tokenising_refuses_bytes_that_are_not_utf8(texts: list[bytes]) -> None:
    """The as-stored path relies on it: malformed UTF-8 raises, well-formed tokenises."""
    valid = all(_is_utf8(t) for t in texts)
    for norm in (Normalizer(), Normalizer(NormalizationSpec(id="tvnorm-v1"))):
        if valid:
            norm.tokenize_batch(texts)
        else:
            with pytest.raises(UnicodeDecodeError):
                norm.tokenize_batch(texts)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
