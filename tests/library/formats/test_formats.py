"""Block-framed formats: round trips, determinism, plain-tool readability, single-block reads."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import textwrap

import msgpack
import numpy as np
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvault import EncodeError
from trainvault.formats import FORMATS, get_format
from trainvault.formats.blocks import encode_shard
from trainvault.formats.msgpack_zst import unpack_records


def make_records(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "id": f"{i:016x}",
            "text": " ".join(f"w{int(x)}" for x in rng.integers(0, 500, size=int(rng.integers(5, 60)))) + " é",
            "tokens": rng.integers(0, 50_000, size=int(rng.integers(4, 40)), dtype=np.int32),
            "score": float(i) / 7,
        }
        for i in range(n)
    ]


def as_plain(record: dict) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in record.items()}


def decode_all(fmt_name: str, shard) -> list[dict]:
    fmt = get_format(fmt_name)
    data = bytes(shard.data)
    trailer = data[shard.trailer.offset :] if shard.trailer else None
    ctx = fmt.open_context(trailer, len(data))
    out = []
    for i, b in enumerate(shard.blocks):
        out.extend(fmt.decode_block(data[b.offset : b.offset + b.length], i, ctx))
    return out


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_round_trip_and_block_index(fmt: str) -> None:
    records = make_records(300)
    shard = encode_shard(get_format(fmt), records, block_bytes=4096)
    assert shard.record_count == 300
    assert len(shard.blocks) > 5
    # The index tiles the records without gaps.
    assert [b.first_record for b in shard.blocks] == [
        sum(x.record_count for x in shard.blocks[:i]) for i in range(len(shard.blocks))
    ]
    assert [as_plain(r) for r in decode_all(fmt, shard)] == [as_plain(r) for r in records]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_one_block_decodes_from_its_own_bytes(fmt: str) -> None:
    records = make_records(200)
    shard = encode_shard(get_format(fmt), records, block_bytes=2048)
    data = bytes(shard.data)
    f = get_format(fmt)
    ctx = f.open_context(data[shard.trailer.offset :] if shard.trailer else None, len(data))
    k = len(shard.blocks) // 2
    b = shard.blocks[k]
    # Only the block's bytes (and the footer the descriptor binds) are handed to the decoder.
    got = f.decode_block(data[b.offset : b.offset + b.length], k, ctx)
    want = records[b.first_record : b.first_record + b.record_count]
    assert [as_plain(r) for r in got] == [as_plain(r) for r in want]


_DETERMINISM_SCRIPT = textwrap.dedent(
    """
    import hashlib, sys
    sys.path.insert(0, {tests!r})
    from test_formats import make_records
    from trainvault.formats import get_format
    from trainvault.formats.blocks import encode_shard
    shard = encode_shard(get_format(sys.argv[1]), make_records(400, seed=3), block_bytes=3000)
    print(shard.sha256, len(shard.blocks))
    """
)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_same_records_same_bytes_in_two_processes(fmt: str) -> None:
    import os

    script = _DETERMINISM_SCRIPT.format(tests=os.path.dirname(__file__))
    outs = [
        subprocess.run([sys.executable, "-c", script, fmt], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    here = encode_shard(get_format(fmt), make_records(400, seed=3), block_bytes=3000)
    assert outs[0] == outs[1] == f"{here.sha256} {len(here.blocks)}\n"


def test_msgpack_zst_reads_with_plain_zstd_and_msgpack() -> None:
    records = [{"id": i, "text": f"record {i}", "blob": bytes([i % 256]) * 3} for i in range(500)]
    shard = encode_shard(get_format("msgpack.zst"), records, block_bytes=1000)
    assert len(shard.blocks) > 3
    # No trainvault code: a zstd stream reader across frames, then a msgpack stream reader.
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(shard.data)), read_across_frames=True)
    unpacker = msgpack.Unpacker(reader, raw=False)
    assert list(unpacker) == records


def test_msgpack_arrays_are_ext_type_for_plain_readers() -> None:
    shard = encode_shard(get_format("msgpack.zst"), [{"tokens": np.arange(5, dtype=np.int32)}])
    payload = zstandard.ZstdDecompressor().decompress(bytes(shard.data))
    (rec,) = list(msgpack.Unpacker(io.BytesIO(payload), raw=False))
    assert isinstance(rec["tokens"], msgpack.ExtType) and rec["tokens"].code == 1
    (ours,) = unpack_records(payload)
    assert ours["tokens"].dtype == np.int32 and ours["tokens"].tolist() == [0, 1, 2, 3, 4]


def test_jsonl_gz_reads_as_one_gzip_stream() -> None:
    records = [{"id": i, "text": f"línea {i}", "tokens": np.arange(i % 7, dtype=np.int32)} for i in range(400)]
    shard = encode_shard(get_format("jsonl.gz"), records, block_bytes=1500)
    assert len(shard.blocks) > 3
    with gzip.open(io.BytesIO(bytes(shard.data)), "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    assert lines == [as_plain(r) for r in records]


def test_parquet_reads_with_pyarrow_one_row_group_per_block() -> None:
    records = make_records(300)
    shard = encode_shard(get_format("parquet"), records, block_bytes=4096)
    pf = pq.ParquetFile(io.BytesIO(bytes(shard.data)))
    assert pf.metadata.num_row_groups == len(shard.blocks)
    assert [pf.metadata.row_group(i).num_rows for i in range(len(shard.blocks))] == [
        b.record_count for b in shard.blocks
    ]
    assert pf.read().to_pylist() == [as_plain(r) for r in records]


@pytest.mark.parametrize(
    ("fmt", "bad"),
    [
        ("msgpack.zst", {"x": object()}),
        ("msgpack.zst", {"x": {1, 2}}),
        ("jsonl.gz", {"x": b"bytes"}),
        ("jsonl.gz", {"x": float("nan")}),
        ("msgpack.zst", {1: "non-string key"}),
        ("parquet", {"x": "a string where the first block had an int"}),
    ],
)
def test_unencodable_record_names_its_index(fmt: str, bad: dict) -> None:
    good = [{"x": i} for i in range(50)]
    with pytest.raises(EncodeError, match=r"records? [\d-]*5\d"):
        encode_shard(get_format(fmt), [*good, bad, *good], block_bytes=64 if fmt == "parquet" else 1 << 20)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_non_mapping_record_is_refused(fmt: str) -> None:
    with pytest.raises(EncodeError, match="record 1 is a list"):
        encode_shard(get_format(fmt), [{"a": 1}, [1, 2]])


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=30)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
records_strategy = st.lists(st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=5), max_size=60)


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, block_bytes=st.integers(1, 4096))
def test_hypothesis_round_trip_json_formats(records: list[dict], block_bytes: int) -> None:
    for fmt in ("msgpack.zst", "jsonl.gz"):
        shard = encode_shard(get_format(fmt), records, block_bytes=block_bytes)
        assert shard.record_count == len(records)
        assert decode_all(fmt, shard) == records


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {
                "text": st.text(max_size=40),
                "n": st.integers(-(2**62), 2**62),
                "blob": st.binary(max_size=20),
                # min_size=1: Parquet infers types from the first block, where [] has no item type.
                "tokens": st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=10),
            }
        ),
        min_size=1,
        max_size=50,
    ),
    block_bytes=st.integers(1, 2048),
)
def test_hypothesis_round_trip_binary_formats(rows: list[dict], block_bytes: int) -> None:
    for fmt in ("msgpack.zst", "parquet"):
        shard = encode_shard(get_format(fmt), rows, block_bytes=block_bytes)
        assert decode_all(fmt, shard) == rows
