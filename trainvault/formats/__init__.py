"""Shard formats: one module per format over the shared block writer in `blocks`."""

from __future__ import annotations

from trainvault.errors import ManifestError
from trainvault.formats.blocks import ShardFormat
from trainvault.formats.jsonl_gz import JsonlGzFormat
from trainvault.formats.msgpack_zst import MsgpackZstFormat
from trainvault.formats.parquet import ParquetFormat

FORMATS: dict[str, ShardFormat] = {f.name: f for f in (MsgpackZstFormat(), JsonlGzFormat(), ParquetFormat())}


def get_format(name: str) -> ShardFormat:
    """The format named `name` (``msgpack.zst``, ``jsonl.gz`` or ``parquet``)."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ManifestError(f"unknown data format {name!r}; known formats: {', '.join(FORMATS)}") from None


__all__ = [
    "FORMATS",
]
