"""Collating source datasets into training splits, with ``num_repeats``.

Each source is a split of a published dataset (pinned by its manifest's sha256 if you
like). Collation copies its shards, record by record, into a target split of a new
publication through a `DatasetSaver`, repeating every record ``num_repeats`` times in a
row. Repeats are adjacent on purpose: RL trainers that sample several rollouts per task
(group-relative baselines) expect a task's copies together, and the saved shards stay a
pure function of the sources and the repeat counts, so a rerun reuses every shard.

``num_repeats`` is an integer for every source, or a mapping whose keys are source
dataset names or target split names. A source named in the mapping takes that value;
else its target split's; else 1. A key that names no source and no target split is
refused (a typo would otherwise silently train on one copy).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainvault.errors import ManifestError
from trainvault.publication.manifest import NO_STAGE, ShardEntry, validate_name
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import ShardReader
from trainvault.publication.saver import DatasetSaver

NumRepeats = int | Mapping[str, int] | None


@dataclass(frozen=True)
class SourceDataset:
    """One source: split `split` of the publication at `manifest_uri`, collated into split `into`.

    `name` identifies the source in ``num_repeats`` and in the target shard ids
    (``<name>.<stage or _>.<shard_id>``); `manifest_sha256` pins the manifest's bytes.
    """

    name: str
    manifest_uri: str
    split: str
    into: str
    manifest_sha256: str | None = None

    def __post_init__(self) -> None:
        validate_name("source dataset name", self.name)
        validate_name("split", self.split)
        validate_name("split", self.into)


@dataclass(frozen=True)
class CollatedShard:
    """A target shard and where it came from."""

    source: str
    source_shard_key: str
    source_sha256: str
    num_repeats: int
    split: str
    entry: ShardEntry


def _check_count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ManifestError(f"num_repeats for {what} must be an integer >= 1, got {value!r}")
    return value


def resolve_num_repeats(sources: Sequence[SourceDataset], num_repeats: NumRepeats) -> dict[str, int]:
    """Repeats per source name: a source's own entry, else its target split's, else 1."""
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ManifestError(f"source dataset name {dup!r} is used twice; give each source its own name")
    if num_repeats is None:
        return {n: 1 for n in names}
    if not isinstance(num_repeats, Mapping):
        count = _check_count(num_repeats, "every source")
        return {n: count for n in names}
    known = set(names) | {s.into for s in sources}
    unknown = sorted(k for k in num_repeats if k not in known)
    if unknown:
        raise ManifestError(
            f"num_repeats names {unknown}, which are neither source dataset names ({', '.join(sorted(names))}) "
            f"nor target splits ({', '.join(sorted({s.into for s in sources}))})"
        )
    out: dict[str, int] = {}
    for s in sources:
        if s.name in num_repeats:
            out[s.name] = _check_count(num_repeats[s.name], f"source {s.name!r}")
        elif s.into in num_repeats:
            out[s.name] = _check_count(num_repeats[s.into], f"split {s.into!r}")
        else:
            out[s.name] = 1
    return out


def _repeated(reader: ShardReader, n: int) -> Iterator[dict[str, Any]]:
    for record in reader.iter_records():
        for _ in range(n):
            yield record


def collate_sources(
    saver: DatasetSaver,
    sources: Sequence[SourceDataset],
    *,
    num_repeats: NumRepeats = None,
) -> list[CollatedShard]:
    """Save every shard of every source into the saver's publication, repeated as resolved.

    Source blocks are verified before their records are copied. Target shards have no
    curriculum stage; their descriptors record the source shard (by sha256) and the repeat
    count. Commit the saver's manifest afterwards. Idempotent: a rerun finds
    each complete target shard and reuses it without reading the source.
    """
    repeats = resolve_num_repeats(sources, num_repeats)
    out: list[CollatedShard] = []
    for source in sources:
        publication = Publication.load(saver.storage, source.manifest_uri, sha256=source.manifest_sha256)
        manifest, split = publication.manifest, publication.split(source.split)
        n = repeats[source.name]
        for entry in split.shards:
            shard_id = f"{source.name}.{entry.curriculum_stage or NO_STAGE}.{entry.shard_id}"
            if len(shard_id) > 128:
                raise ManifestError(
                    f"target shard id {shard_id[:40]}... is over 128 characters; use a shorter source name"
                )
            reader = ShardReader(saver.storage, entry, manifest.data_format)
            # The descriptor records where the shard came from and how often each record repeats,
            # binding the source shard by sha256; a rerun with other settings is a ConflictError.
            provenance = {
                "collated_from": {
                    "source": source.name,
                    "manifest_sha256": publication.sha256,
                    "split": source.split,
                    "shard_key": entry.key,
                    "shard_sha256": entry.sha256,
                    "num_repeats": n,
                }
            }
            saved = saver.save(
                source.into, None, _repeated(reader, n), shard_id=shard_id, curriculum_metadata=provenance
            )
            if saved.record_count != entry.record_count * n:
                # A target shard saved earlier with another repeat count (or other data).
                raise ManifestError(
                    f"{source.into}/{saved.key} holds {saved.record_count} records, expected "
                    f"{entry.record_count} x {n}; it was collated with other settings: use a new publication"
                )
            out.append(CollatedShard(source.name, entry.key, entry.sha256, n, source.into, saved))
    return out
