"""`parquet`: one row group per block (extra `parquet`).

Any Parquet reader reads the shard. The schema is inferred from the first block and
every later block must fit it. Writer options are fixed (zstd level 3, statistics on,
no page index, no dictionary for speed-insensitive columns left to defaults) so the
bytes depend only on the records, these settings and the pyarrow version.

A single block decodes from its own bytes plus the footer, which the descriptor binds
as the shard's trailer.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainvault.errors import DecodeError, EncodeError
from trainvault.extras import require
from trainvault.formats.blocks import ShardFormat, check_record_keys
from trainvault.formats.columns import ColumnBlock, from_arrow

ZSTD_LEVEL = 3


def _pa() -> Any:
    return require("pyarrow", "parquet")


def _pq() -> Any:
    require("pyarrow", "parquet")
    import pyarrow.parquet as pq

    return pq


def _approx_size(value: Any) -> int:
    if isinstance(value, (str, bytes, bytearray)):
        return len(value)
    if isinstance(value, Mapping):
        return sum(len(k) + _approx_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(_approx_size(v) for v in value) + 4
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    return 8


class _Encoder:
    def __init__(self) -> None:
        self._records: list[Mapping[str, Any]] = []
        self._sink = io.BytesIO()
        self._writer: Any = None
        self._schema: Any = None
        self._emitted = 0

    def add(self, record: Mapping[str, Any]) -> int:
        check_record_keys(record)
        self._records.append(record)
        return _approx_size(record)

    def _take(self) -> bytes:
        data = self._sink.getbuffer()[self._emitted :].tobytes()
        self._emitted += len(data)
        return data

    def flush_block(self) -> bytes:
        pa, pq = _pa(), _pq()
        records, self._records = self._records, []
        try:
            table = pa.Table.from_pylist(records, schema=self._schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            where = (
                "these records do not fit the schema of the shard's first block"
                if self._schema
                else "cannot build a table"
            )
            raise EncodeError(f"parquet: {where}: {exc}") from None
        if self._writer is None:
            self._schema = table.schema
            self._writer = pq.ParquetWriter(
                self._sink,
                table.schema,
                compression="zstd",
                compression_level=ZSTD_LEVEL,
                write_statistics=True,
                write_page_index=False,
                use_dictionary=True,
                store_schema=True,
            )
            head = self._take()  # the leading "PAR1" magic belongs to no block
            self._prefix = head
        self._writer.write_table(table, row_group_size=max(len(records), 1))
        data = self._take()
        if self._prefix:
            data, self._prefix = self._prefix + data, b""
        return data

    def finish(self) -> bytes:
        if self._writer is None:
            return b""
        self._writer.close()
        return self._take()


class _Sparse(io.RawIOBase):
    """A read-only file of `size` bytes of which only some regions are known (rest reads as zeros)."""

    def __init__(self, size: int, regions: list[tuple[int, bytes | memoryview]]):
        self._size, self._regions, self._pos = size, regions, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), self._size - self._pos))
        view = memoryview(buffer)
        view[:n] = b"\0" * n
        for start, data in self._regions:
            lo, hi = max(start, self._pos), min(start + len(data), self._pos + n)
            if lo < hi:
                view[lo - self._pos : hi - self._pos] = data[lo - start : hi - start]
        self._pos += n
        return n


@dataclass(frozen=True)
class _Footer:
    """A shard's verified footer and its parsed metadata: what any one block needs to decode."""

    size_bytes: int
    trailer: bytes
    metadata: Any

    def block_end(self, block_index: int) -> int:
        # A block ends where its row group's last column chunk ends (block 0 also
        # carries the leading magic), so place the bytes by their end.
        rg = self.metadata.row_group(block_index)
        end: int = max(
            (c.dictionary_page_offset or c.data_page_offset) + c.total_compressed_size
            for c in (rg.column(i) for i in range(rg.num_columns))
        )
        return end


class ParquetFormat(ShardFormat):
    name = "parquet"
    extension = "parquet"

    def settings(self) -> dict[str, Any]:
        return {"compression": "zstd", "zstd_level": ZSTD_LEVEL, "pyarrow": _pa().__version__}

    def new_encoder(self) -> _Encoder:
        _pa()
        return _Encoder()

    def open_context(self, trailer: bytes | None, size_bytes: int) -> _Footer:
        pq = _pq()
        if not trailer:
            raise DecodeError("a parquet shard needs its footer (trailer) to decode blocks")
        try:
            meta = pq.ParquetFile(_Sparse(size_bytes, [(size_bytes - len(trailer), trailer)])).metadata
        except Exception as exc:
            raise DecodeError(f"the parquet footer does not parse: {exc}") from None
        return _Footer(size_bytes, trailer, meta)

    def inflate_block(self, data: bytes | memoryview, block_index: int, context: _Footer) -> Any:
        """The block's row group as an Arrow table (Arrow decodes without the GIL)."""
        pq = _pq()
        size, trailer = context.size_bytes, context.trailer
        try:
            start = context.block_end(block_index) - len(data)
            source = _Sparse(size, [(start, data), (size - len(trailer), trailer)])
            return pq.ParquetFile(source, metadata=context.metadata).read_row_group(block_index)
        except Exception as exc:
            raise DecodeError(f"block {block_index} is not a valid parquet row group: {exc}") from None

    def block_records(self, inflated: Any, block_index: int) -> list[dict[str, Any]]:
        pa = _pa()
        try:
            records: list[dict[str, Any]] = inflated.to_pylist()
        except pa.ArrowException as exc:
            raise DecodeError(f"block {block_index} is not a valid parquet row group: {exc}") from None
        return records

    def block_columns(self, inflated: Any, block_index: int) -> ColumnBlock:
        """The row group's columns straight from its Arrow table, no record built."""
        pa = _pa()
        try:
            return from_arrow(inflated)
        except pa.ArrowException as exc:
            raise DecodeError(f"block {block_index} is not a valid parquet row group: {exc}") from None
