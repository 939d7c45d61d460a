"""One artifact's bytes: a safetensors file with a canonical header.

Tensors: ``block_ids`` int64[B], ``row_offsets`` int64[B+1], and ``input_ids`` int32[R]
(tokens) or ``rows`` [R, dim] (states); ``__metadata__`` repeats the artifact's identity.
Any safetensors reader loads it. trainvault writes the header itself, as canonical JSON,
because safetensors serialises ``__metadata__`` in hash-map order (different bytes on every
run), and parses it itself so that a header over `HEADER_LIMIT` is refused before it is
decoded and tensors are views of the one buffer rather than a second copy.
"""

from __future__ import annotations

import itertools
import struct
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from trainvault.canonical import canonical_json, loads_strict
from trainvault.errors import EncodeError, IntegrityError, ManifestError
from trainvault.extras import require
from trainvault.representations.documents import HEADER_LIMIT, ArtifactEntry

#: Our dtype names -> (safetensors dtype code, bytes per element, torch dtype name).
DTYPES: dict[str, tuple[str, int, str]] = {
    "int32": ("I32", 4, "int32"),
    "int64": ("I64", 8, "int64"),
    "bfloat16": ("BF16", 2, "bfloat16"),
    "float16": ("F16", 2, "float16"),
    "float32": ("F32", 4, "float32"),
}

_ITEMSIZE = {code: size for code, size, _ in DTYPES.values()}


def data_name(kind: str) -> str:
    return "input_ids" if kind == "tokens" else "rows"


def check_little_endian() -> None:
    # safetensors is little-endian; the tables are packed and read in native order.
    if sys.byteorder != "little":
        raise RuntimeError("representation artifacts are little-endian; this host is big-endian")


def encode(
    entry_metadata: dict[str, str],
    kind: str,
    dtype: str,
    shape: list[int],
    block_ids: list[int],
    row_offsets: list[int],
    data: list[bytes],
) -> bytes:
    """The artifact's bytes: deterministic for the same arguments."""
    check_little_endian()
    itemsize = DTYPES[dtype][1]
    tables = struct.pack(f"<{len(block_ids)}q", *block_ids), struct.pack(f"<{len(row_offsets)}q", *row_offsets)
    nbytes = sum(len(d) for d in data)
    count = 1
    for n in shape:
        count *= n
    if nbytes != count * itemsize:
        raise EncodeError(f"artifact data is {nbytes} bytes, shape {shape} of {dtype} needs {count * itemsize}")
    a, b = len(tables[0]), len(tables[0]) + len(tables[1])
    header: dict[str, Any] = {
        "__metadata__": entry_metadata,
        "block_ids": {"dtype": "I64", "shape": [len(block_ids)], "data_offsets": [0, a]},
        "row_offsets": {"dtype": "I64", "shape": [len(row_offsets)], "data_offsets": [a, b]},
        data_name(kind): {"dtype": DTYPES[dtype][0], "shape": list(shape), "data_offsets": [b, b + nbytes]},
    }
    text = canonical_json(header)
    text += b" " * (-len(text) % 8)  # as safetensors pads: tensor data starts 8-byte aligned
    return b"".join([struct.pack("<Q", len(text)), text, *tables, *data])


@dataclass
class ParsedArtifact:
    """Views into one artifact buffer: valid only while the buffer is alive."""

    block_ids: list[int]
    row_offsets: list[int]
    data: Any  # torch.Tensor view, [R] or [R, dim]


def parse(buf: memoryview, entry: ArtifactEntry, uri: str) -> ParsedArtifact:
    """Check the header against `entry` and return views of the tables and data.

    Raises `IntegrityError` naming `uri` for a header over the limit, unlike its entry,
    or inconsistent with the buffer.
    """
    torch = require("torch", "representation")
    check_little_endian()
    header, base = _read_header(buf, uri)
    specs = _check_specs(header, entry, uri)
    _check_layout(specs, base, buf.nbytes, uri)

    def table(key: str) -> list[int]:
        begin, end = specs[key]["data_offsets"]
        return list(buf[base + begin : base + end].cast("q"))

    block_ids, row_offsets = table("block_ids"), table("row_offsets")
    rows = entry.shape[0]
    if any(b <= a for a, b in itertools.pairwise(block_ids)):
        raise IntegrityError(f"{uri}: block_ids are not strictly ascending; the artifact is damaged")
    if row_offsets[0] != 0 or row_offsets[-1] != rows or any(b <= a for a, b in itertools.pairwise(row_offsets)):
        raise IntegrityError(
            f"{uri}: row_offsets do not split its {rows} rows into non-empty blocks; the artifact is damaged"
        )
    begin, end = specs[data_name(entry.kind)]["data_offsets"]
    with warnings.catch_warnings():
        # The buffer is read-only and stays so: rows are copied out, never written in place.
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        view = torch.frombuffer(
            buf,
            dtype=getattr(torch, DTYPES[entry.dtype][2]),
            count=(end - begin) // DTYPES[entry.dtype][1],
            offset=base + begin,
        )
    return ParsedArtifact(block_ids, row_offsets, view.view(entry.shape))


def _read_header(buf: memoryview, uri: str) -> tuple[dict[str, Any], int]:
    """The safetensors header as a JSON object, and the offset where tensor data begins."""
    size = buf.nbytes
    if size < 8:
        raise IntegrityError(f"{uri}: {size} bytes is too short for a safetensors file (truncated)")
    hlen = struct.unpack_from("<Q", buf, 0)[0]
    if hlen > HEADER_LIMIT:
        raise IntegrityError(
            f"{uri}: safetensors header of {hlen} bytes exceeds the {HEADER_LIMIT >> 20} MiB limit; refusing to parse it"
        )
    if 8 + hlen > size:
        raise IntegrityError(
            f"{uri}: header says {hlen} bytes but the object has {size - 8} after its length (truncated)"
        )
    try:
        header = loads_strict(bytes(buf[8 : 8 + hlen]), source=f"{uri} (safetensors header)")
    except ManifestError:
        raise
    except ValueError:  # UnicodeDecodeError too
        raise IntegrityError(f"{uri}: the safetensors header is not valid JSON; the artifact is damaged") from None
    if not isinstance(header, dict):
        raise IntegrityError(f"{uri}: the safetensors header is not a JSON object; the artifact is damaged")
    return header, 8 + hlen


def _check_specs(header: dict[str, Any], entry: ArtifactEntry, uri: str) -> dict[str, dict[str, Any]]:
    """The header's tensor specs, well formed and as `entry` declares them (`__metadata__` removed)."""

    def unlike(what: str) -> IntegrityError:
        return IntegrityError(
            f"{uri}: header {what}, unlike its artifact manifest entry {entry.artifact_id!r}; the artifact is not the one published"
        )

    meta = header.pop("__metadata__", None)
    if meta != entry.metadata():
        raise unlike(f"identity {meta!r}")
    name = data_name(entry.kind)
    if set(header) != {"block_ids", "row_offsets", name}:
        raise unlike(f"tensors {sorted(header)}")
    specs = {}
    for key, spec in header.items():
        if (
            not isinstance(spec, dict)
            or set(spec) != {"dtype", "shape", "data_offsets"}
            or not isinstance(spec["shape"], list)
            or not all(type(n) is int and n >= 0 for n in spec["shape"])
            or not isinstance(spec["data_offsets"], list)
            or len(spec["data_offsets"]) != 2
            or not all(type(n) is int and n >= 0 for n in spec["data_offsets"])
        ):
            raise IntegrityError(f"{uri}: malformed safetensors header entry for {key!r}; the artifact is damaged")
        specs[key] = spec
    if specs["block_ids"]["dtype"] != "I64" or specs["row_offsets"]["dtype"] != "I64":
        raise unlike("block tables that are not int64")
    if specs[name]["dtype"] != DTYPES[entry.dtype][0] or specs[name]["shape"] != entry.shape:
        raise unlike(f"{name} {specs[name]['dtype']}{specs[name]['shape']} (entry: {entry.dtype}{entry.shape})")
    count = specs["block_ids"]["shape"]
    if len(count) != 1 or count[0] < 1 or specs["row_offsets"]["shape"] != [count[0] + 1]:
        raise unlike(f"block tables of shapes {specs['block_ids']['shape']} and {specs['row_offsets']['shape']}")
    return specs


def _check_layout(specs: dict[str, dict[str, Any]], base: int, size: int, uri: str) -> None:
    """Tensor data tiles the rest of the buffer exactly, each range as long as its shape needs."""
    pos = 0
    for key in sorted(specs, key=lambda k: specs[k]["data_offsets"]):
        begin, end = specs[key]["data_offsets"]
        numel = 1
        for n in specs[key]["shape"]:
            numel *= n
        itemsize = _ITEMSIZE[specs[key]["dtype"]]
        if begin != pos or end - begin != numel * itemsize:
            raise IntegrityError(
                f"{uri}: safetensors data offsets of {key!r} are inconsistent; the artifact is damaged"
            )
        pos = end
    if base + pos != size:
        raise IntegrityError(
            f"{uri}: tensor data ends at byte {base + pos}, the object has {size} bytes; the artifact is damaged"
        )
