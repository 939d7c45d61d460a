"""The approved view of a split, as files a reader without trainvault can read.

An approval with exclusions leaves records of a few shards out; a card that listed those
shards would hand the excluded records to every Croissant reader. So the card lists each
unaffected shard as published, and for each affected shard a clean copy: its records minus
the excluded ones, in the same format, written create-only beside the card and named by
its content (``approved-view/<sha256>.<ext>``). Records are read through the approval's
custody (every block verified), so a copy holds only approved bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainvault.approval.approved import ApprovedDataset
from trainvault.approval.guard import CustodyStorage
from trainvault.cards.fields import FieldSurvey, merge_surveys, survey_fields
from trainvault.errors import ConflictError
from trainvault.formats import get_format
from trainvault.formats.blocks import encode_shard
from trainvault.publication.manifest import ShardEntry
from trainvault.publication.reader import ShardReader
from trainvault.refs import ObjectRef
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import join_uri

VIEW_FOLDER = "approved-view"
#: Rows surveyed at a time while a clean copy is written (the survey holds no rows).
SURVEY_BATCH = 1024

#: A run of records' field surveys and record count (`survey_fields`, `merge_surveys`).
Survey = tuple[list[FieldSurvey], int]


@dataclass(frozen=True)
class ViewShard:
    """One shard of the approved view: the object a reader reads, and how many records it holds."""

    entry: ShardEntry
    #: The published shard, or its clean copy when the approval excludes records of it.
    ref: ObjectRef
    records: int
    #: Records of the published shard the approval excludes (0: `ref` is the published shard).
    excluded: int
    #: The field survey of the clean copy's records, taken as it was written (None: not a copy).
    survey: Survey | None = None


def approved_rows(
    custody: CustodyStorage, data_format: str, entry: ShardEntry, excluded: frozenset[int]
) -> Iterator[dict[str, Any]]:
    """The records of `entry` the approval keeps, in shard order, read through its `custody`."""
    if not entry.record_count:
        return
    reader = ShardReader(custody, entry, data_format)
    for index, row in enumerate(reader.iter_records()):
        if index not in excluded:
            yield row


def excluded_by_shard(approved: ApprovedDataset, split: str) -> Mapping[str, frozenset[int]]:
    """Shard key -> indices of the records the approval excludes from it (empty without exclusions)."""
    exclusions = approved.exclusions
    return exclusions.by_shard(split) if exclusions is not None else {}


def surveyed(rows: Iterator[dict[str, Any]], parts: list[Survey]) -> Iterator[dict[str, Any]]:
    """`rows` as they are, their field survey appended to `parts` batch by batch (one pass serves both)."""
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == SURVEY_BATCH:
            parts.append(survey_fields(batch))
            batch = []
        yield row
    if batch:
        parts.append(survey_fields(batch))


def view_shards(
    storage: StorageSource, approved: ApprovedDataset, split: str, folder: str, *, repair: bool = False
) -> list[ViewShard]:
    """Every shard of `split` in manifest order as the approved view holds it, writing the clean
    copy of each shard with excluded records under `folder` (create-only; the same copy again is a
    no-op) and surveying its records in the same read. `repair`: other bytes under a copy's name
    (its content's digest, so they were swapped) are overwritten with the copy, not a `ConflictError`."""
    manifest = approved.manifest
    fmt = get_format(manifest.data_format)
    excluded = excluded_by_shard(approved, split)
    custody = approved.custody_storage()
    out = []
    for entry in manifest.splits[split].shards:
        dropped = excluded.get(entry.key, frozenset())
        if not dropped:
            ref = ObjectRef(uri=entry.uri, sha256=entry.sha256, size=entry.size_bytes)
            out.append(ViewShard(entry, ref, entry.record_count, 0))
            continue
        parts: list[Survey] = []
        rows = surveyed(approved_rows(custody, manifest.data_format, entry, dropped), parts)
        copy = encode_shard(fmt, rows, name=f"{split}/{entry.key} (approved view)")
        data = bytes(copy.data)
        uri = join_uri(folder, f"{VIEW_FOLDER}/{copy.sha256}.{fmt.extension}")
        _put_copy(storage_of(storage), uri, data, repair)
        ref = ObjectRef(uri=uri, sha256=copy.sha256, size=len(data))
        out.append(ViewShard(entry, ref, copy.record_count, len(dropped), merge_surveys(parts)))
    return out


def _put_copy(storage: Storage, uri: str, data: bytes, repair: bool) -> None:
    try:
        storage.put_create(uri, data)
    except ConflictError:
        if not repair:
            raise
        storage.put(uri, data)  # the name fixes the content: whatever else is there was swapped in
