"""The per-shard scan: stream one shard's records, return its candidate hits and totals.

A `ShardScanResult` is a pure function of (shard sha256, contract sha256, release sha256):
it names no split, key or URI, so it can be cached under those three digests and shards
can be scanned in any order, in parallel, by different processes.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from trainvault.contamination.block_text import BlockText, BlockTextReader
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.text_fields import TextFieldSurvey
from trainvault.documents import Document, StrictModel
from trainvault.errors import ContaminationError, DecodeError, IntegrityError, TrainVaultError
from trainvault.formats.cutter import BlockCutter
from trainvault.formats.msgpack_zst import MsgpackZstFormat
from trainvault.publication.manifest import ShardDescriptor, ShardEntry
from trainvault.publication.reader import ShardReader
from trainvault.refs import Sha256
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of

#: Bytes requested per streamed chunk while reading a shard.
STREAM_CHUNK = 8 << 20
#: Records tokenised together: enough to amortise the numpy calls per batch, few enough
#: that the batch's arrays stay in cache (measured best at 512-768 records of ~1 KiB).
BATCH_RECORDS = 512


class ShardHit(StrictModel):
    """Where in a shard a benchmark item's text was found.

    Token offsets index the field's normalised tokens; character offsets index the
    field's original text, both as half-open ranges.
    """

    record_index: int = Field(ge=0)
    record_id: str | None
    field: str
    token_start: int = Field(ge=0)
    token_end: int = Field(ge=0)
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)


class ShardItemHits(StrictModel):
    """One item's matches in one shard: the first hits in record order, and exact totals."""

    benchmark: str
    item_id: str
    #: Positions (in the item) of the distinct item n-grams found in this shard.
    matched_grams: list[int]
    hits_total: int = Field(ge=1)
    longest_match_tokens: int = Field(ge=1)
    hits: list[ShardHit]


class ShardScanResult(Document):
    """contamination-shard-scan-v1: one shard's totals and hits under one contract and release."""

    KIND = "trainvault.contamination-shard-scan"

    format: Literal["trainvault.contamination-shard-scan"] = "trainvault.contamination-shard-scan"
    version: Literal[1] = 1
    shard_sha256: Sha256
    contract_sha256: Sha256
    release_sha256: Sha256
    records: int = Field(ge=0)
    #: Normalised tokens over the scanned fields.
    tokens: int = Field(ge=0)
    #: Bytes of the shard object read (and hashed).
    bytes: int = Field(ge=0)
    #: UTF-8 bytes of the scanned field text.
    text_bytes: int = Field(ge=0)
    items: list[ShardItemHits]


def _shifted(record_id: Callable[[int], str | None], lo: int) -> Callable[[int], str | None]:
    """`record_id` of positions counted from `lo`."""
    return lambda i: record_id(lo + i)


def _merge(windows: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Merge (field, start, end) windows of one record into maximal overlapping runs."""
    out: list[tuple[int, int, int]] = []
    for f, s, e in sorted(windows):
        if out and out[-1][0] == f and s <= out[-1][2]:
            if e > out[-1][2]:
                out[-1] = (f, out[-1][1], e)
        else:
            out.append((f, s, e))
    return out


class _Texts:
    """The texts of one batch, field-major as tokenised, built into tuples only on a hit.

    A text is a `str`, or the UTF-8 `bytes` of one (`BlockTextReader`), decoded only on a hit.
    """

    def __init__(self, first_record: int, fields: list[tuple[int, list[Any]]], record_id: Callable[[int], str | None]):
        self.first, self.fields, self.record_id = first_record, fields, record_id
        self.n = len(fields[0][1])

    def __len__(self) -> int:
        return self.n * len(self.fields)

    def where(self, t: int) -> tuple[int, int]:
        """(record index in the shard, field position) of text `t`."""
        f, i = divmod(t, self.n)
        return self.first + i, self.fields[f][0]

    def __getitem__(self, t: int) -> tuple[int, int, str, str | None]:
        """(record index in the shard, field position, text, record id) of text `t`."""
        f, i = divmod(t, self.n)
        field, values = self.fields[f]
        value = values[i]
        return self.first + i, field, value if type(value) is str else value.decode("utf-8"), self.record_id(i)


@dataclass
class _ItemTally:
    """One item's matches in one shard so far: matched gram positions, totals, the capped hits."""

    grams: set[int] = field(default_factory=set)
    hits_total: int = 0
    longest: int = 0
    hits: list[ShardHit] = field(default_factory=list)


class _Accumulator:
    """Per-shard state: totals, and per item the matched grams and the capped hit list."""

    def __init__(self, index: EvalIndex):
        self.index = index
        c = index.contract
        self.fields = list(c.fields)
        self.record_id_field = c.record_id_field
        self.cap = c.max_hits_per_item
        self.records = 0
        self.tokens = 0
        self.text_bytes = 0
        #: (benchmark index, item index) -> the item's tally.
        self.items: dict[tuple[int, int], _ItemTally] = {}

    def add(self, records: Iterable[Mapping[str, Any]], where: str) -> None:
        """Scan records (typically one block) in shard order, in batches of `BATCH_RECORDS`."""
        records = records if isinstance(records, list) else list(records)
        first = self.records
        for lo in range(0, len(records), BATCH_RECORDS):
            chunk = records[lo : lo + BATCH_RECORDS]
            raws: list[bytes] = []
            texts: list[tuple[int, list[Any]]] = []
            for f, name in enumerate(self.fields):
                try:
                    values = [record[name] for record in chunk]
                    raws_f = [v.encode("utf-8") for v in values if type(v) is str]
                except (KeyError, TypeError):
                    values, raws_f = [], []
                if len(raws_f) != len(chunk):
                    bad = next(
                        i
                        for i, rec in enumerate(chunk)
                        if not isinstance(rec, Mapping) or type(rec.get(name)) is not str
                    )
                    value = chunk[bad].get(name) if isinstance(chunk[bad], Mapping) else None
                    raise ContaminationError(
                        f"{where}: record {first + lo + bad} has no string field {name!r} (got "
                        f"{type(value).__name__}); every scanned field must be text: fix the records or the "
                        "contract's fields"
                    )
                raws.extend(raws_f)
                texts.append((f, values))
            self._scan(raws, _Texts(first + lo, texts, self._ids_of(chunk)))
        self.records = first + len(records)

    def add_text(self, block: BlockText) -> None:
        """Scan a block read by `BlockTextReader`: its fields' UTF-8 bytes and record ids, as `add` would."""
        first = self.records
        n = len(block.raw_ids)
        for lo in range(0, n, BATCH_RECORDS):
            hi = min(lo + BATCH_RECORDS, n)
            texts = [(f, values[lo:hi]) for f, values in enumerate(block.fields)]
            raws = [raw for _, values in texts for raw in values]
            self._scan(raws, _Texts(first + lo, texts, _shifted(block.record_id, lo)))
        self.records = first + n

    def _scan(self, raws: list[bytes], texts: _Texts) -> None:
        index = self.index
        self.text_bytes += sum(map(len, raws))
        batch = index.normalizer.tokenize_batch(raws)
        self.tokens += len(batch) - (len(texts) - 1)
        found = index.find_stream(batch.data, batch.starts, batch.ends)
        if found:
            self._collect(found, batch.text_starts(), texts)

    def _collect(self, found: list[tuple[int, int]], first_token: list[int], texts: _Texts) -> None:
        """Group verified windows by (item, text) and record merged hits in shard order."""
        index = self.index
        windows: dict[tuple[int, int], dict[int, list[tuple[int, int, int]]]] = {}
        grams_found: dict[tuple[int, int], set[int]] = {}
        for pos, g in found:
            t = bisect_right(first_token, pos) - 1
            start = pos - first_token[t]
            k = len(index.grams[g])
            for b, i, gram_pos in index.postings[g]:
                key = (b, i)
                windows.setdefault(key, {}).setdefault(t, []).append((texts.where(t)[1], start, start + k))
                grams_found.setdefault(key, set()).add(gram_pos)
        spans_cache: dict[int, list[tuple[int, int]]] = {}
        for key in sorted(windows):
            state = self.items.get(key)
            if state is None:
                state = self.items[key] = _ItemTally()
            state.grams |= grams_found[key]
            for t in sorted(windows[key], key=texts.where):  # shard order: record, field
                r, _, value, record_id = texts[t]
                for f, s, e in _merge(windows[key][t]):
                    state.hits_total += 1
                    state.longest = max(state.longest, e - s)
                    if len(state.hits) >= self.cap:
                        continue
                    spans = spans_cache.get(t)
                    if spans is None:
                        spans = spans_cache[t] = index.normalizer.tokens_with_spans(value)[1]
                    state.hits.append(
                        ShardHit(
                            record_index=r,
                            record_id=record_id,
                            field=self.fields[f],
                            token_start=s,
                            token_end=e,
                            char_start=spans[s][0],
                            char_end=spans[e - 1][1],
                        )
                    )

    def _ids_of(self, chunk: list[Mapping[str, Any]]) -> Callable[[int], str | None]:
        """Record id of the record at each position of `chunk`."""
        return lambda i: self._record_id(chunk[i])

    def _record_id(self, record: Mapping[str, Any]) -> str | None:
        if self.record_id_field is None:
            return None
        value = record.get(self.record_id_field)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return None
        return str(value)

    def result(self, shard_sha256: str, size: int) -> ShardScanResult:
        index = self.index
        items = []
        for (b, i), tally in sorted(self.items.items(), key=lambda kv: (index.benchmarks[kv[0][0]].name, kv[0][1])):
            bench = index.benchmarks[b]
            items.append(
                ShardItemHits(
                    benchmark=bench.name,
                    item_id=bench.items[i].item_id,
                    matched_grams=sorted(tally.grams),
                    hits_total=tally.hits_total,
                    longest_match_tokens=tally.longest,
                    hits=tally.hits,
                )
            )
        return ShardScanResult(
            shard_sha256=shard_sha256,
            contract_sha256=index.contract_sha256,
            release_sha256=index.release_sha256,
            records=self.records,
            tokens=self.tokens,
            bytes=size,
            text_bytes=self.text_bytes,
            items=items,
        )


def scan_records(
    index: EvalIndex, records: Iterable[Mapping[str, Any]], *, shard_sha256: str, size_bytes: int = 0, batch: int = 4096
) -> ShardScanResult:
    """Scan records already in memory (tests, benchmarks, data not yet published).

    `shard_sha256` and `size_bytes` describe the bytes the records came from.
    """
    acc = _Accumulator(index)
    buf: list[Mapping[str, Any]] = []
    for record in records:
        buf.append(record)
        if len(buf) >= batch:
            acc.add(buf, f"shard {shard_sha256[:12]}")
            buf = []
    if buf:
        acc.add(buf, f"shard {shard_sha256[:12]}")
    return acc.result(shard_sha256, size_bytes)


def scan_shard(
    storage: StorageSource,
    data_format: str,
    entry: ShardEntry,
    index: EvalIndex,
    *,
    on_bytes: Callable[[int], None] | None = None,
    descriptor: ShardDescriptor | None = None,
    survey: TextFieldSurvey | None = None,
    on_records: Callable[[list[dict[str, Any]]], None] | None = None,
) -> ShardScanResult:
    """Scan one published shard: read it once, verify it, and match every record.

    The whole object is streamed and hashed; each block is checked against its
    descriptor digest before it is decoded, and the object's SHA-256 and size must
    equal the manifest entry's (`IntegrityError` otherwise). `on_bytes` receives the
    number of shard bytes read since its last call; `survey` observes every block's records;
    `on_records` gets each verified block's decoded records, in order (other per-record work
    over the same single read). `descriptor`: the shard's descriptor, already read and checked
    against `entry` (else it is read from storage).
    """
    storage = storage_of(storage)
    reader = ShardReader(storage, entry, data_format, descriptor)
    acc = _Accumulator(index)
    text = BlockTextReader(acc.fields, acc.record_id_field) if isinstance(reader.format, MsgpackZstFormat) else None
    for k, data in _verified_blocks(storage, entry, reader, on_bytes):
        _add_block(acc, reader, text, k, data, entry.uri, survey, on_records)
    if acc.records != entry.record_count:
        raise IntegrityError(f"{entry.uri}: decoded {acc.records} records, the manifest says {entry.record_count}")
    return acc.result(entry.sha256, entry.size_bytes)


def _add_block(
    acc: _Accumulator,
    reader: ShardReader,
    text: BlockTextReader | None,
    k: int,
    data: bytes,
    uri: str,
    survey: TextFieldSurvey | None = None,
    on_records: Callable[[list[dict[str, Any]]], None] | None = None,
) -> None:
    """Decode block `k`'s verified bytes and scan its records (msgpack.zst text as stored, by `text`);
    `survey` observes them; `on_records` gets them decoded."""
    payload = block = None
    if text is not None:
        payload = reader.inflate(k, data)
        block = text.read(payload)
        if block is not None:
            reader.check_count(k, len(block.records))
    if block is None:
        records = reader.decode(k, data) if payload is None else reader.records(k, payload)
        acc.add(records, uri)
    else:
        try:
            acc.add_text(block)
        except UnicodeDecodeError as exc:
            reader.records(k, payload)  # raises the decoder's own error for a string that is not UTF-8
            raise DecodeError(f"{uri}: block {k} holds text that is not UTF-8 ({exc}); re-publish the shard") from None
        records = block.records
    if survey is not None:
        survey.observe(records, raw=block is not None)
    if on_records is not None:
        on_records(records if block is None else reader.records(k, payload))


def _verified_blocks(
    storage: Storage, entry: ShardEntry, reader: ShardReader, on_bytes: Callable[[int], None] | None
) -> Iterator[tuple[int, bytes]]:
    """Stream the shard once and yield (block number, bytes) of each block, checked against its
    descriptor digest; once the stream ends, the object's size and SHA-256 must be the entry's."""
    size = entry.size_bytes
    whole = hashlib.sha256()
    seen = 0
    cutter = BlockCutter(entry.uri, reader.blocks)
    chunks = storage.stream(entry.uri, chunk_size=STREAM_CHUNK) if size else iter(())
    for chunk in chunks:
        whole.update(chunk)
        seen += len(chunk)
        if seen > size:
            break
        yield from cutter.feed(chunk)
        if on_bytes is not None:
            on_bytes(len(chunk))
    if seen != size or whole.hexdigest() != entry.sha256 or not cutter.done:
        raise IntegrityError(
            f"{entry.uri}: read {seen} bytes with sha256 {whole.hexdigest()}, the manifest binds {size} bytes "
            f"with sha256 {entry.sha256}; the shard is truncated, extended or replaced: rebuild the publication"
        )


class ScanFeed:
    """Scans one shard from its bytes as another reader streams them in order (the gate's hash
    pass, as a `ChunkConsumer`), so the shard is read once for both. Keeps the first error
    instead of raising, so the reader that owns the stream reports a changed shard first;
    `result` raises it."""

    def __init__(
        self,
        storage: Storage,
        data_format: str,
        entry: ShardEntry,
        index: EvalIndex,
        survey: TextFieldSurvey | None = None,
        descriptor: ShardDescriptor | None = None,
    ):
        self.entry, self.survey = entry, survey
        self.error: TrainVaultError | None = None
        self._acc = _Accumulator(index)
        self._text: BlockTextReader | None = None
        self._cutter: BlockCutter | None = None
        try:
            self._reader = ShardReader(storage, entry, data_format, descriptor)
            self._cutter = BlockCutter(entry.uri, self._reader.blocks)
        except TrainVaultError as exc:
            self.error = exc
            return
        if isinstance(self._reader.format, MsgpackZstFormat):
            self._text = BlockTextReader(self._acc.fields, self._acc.record_id_field)

    def feed(self, chunk: bytes) -> None:
        if self.error is not None or self._cutter is None:
            return
        try:
            for k, data in self._cutter.feed(chunk):
                _add_block(self._acc, self._reader, self._text, k, data, self.entry.uri, self.survey)
        except TrainVaultError as exc:
            self.error = exc

    def close(self) -> None:
        if self.error is None and self._cutter is not None and not self._cutter.done:
            self.error = IntegrityError(
                f"{self.entry.uri}: the object ended before block {self._cutter.next}; it is "
                "truncated: rebuild the publication"
            )

    def result(self) -> ShardScanResult:
        """The shard's scan once every byte was fed (the first error seen, raised, otherwise)."""
        if self.error is not None:
            raise self.error
        if self._acc.records != self.entry.record_count:
            raise IntegrityError(
                f"{self.entry.uri}: decoded {self._acc.records} records, the manifest says {self.entry.record_count}"
            )
        return self._acc.result(self.entry.sha256, self.entry.size_bytes)
