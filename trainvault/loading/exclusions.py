"""Records a loader never deals: manifest shard key -> 0-based record indices in that shard.

The loader skips them where the order is computed (`block_plan`), so positions, epochs,
``len()``, the resume state, ranks and workers all count the remaining records, and the
digest of the set is part of the order's identity.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import ConfigurationError
from trainvault.publication.manifest import DataManifest, ShardEntry


class ExclusionSet:
    """A checked exclusion set: for each shard key, its excluded record indices, sorted."""

    def __init__(self, exclude: Mapping[str, Collection[int]], manifest: DataManifest):
        if not isinstance(exclude, Mapping):
            raise ConfigurationError(f"exclude must map shard keys to record indices, got {type(exclude).__name__}")
        known = {s.key for split in manifest.splits.values() for s in split.shards}
        self.by_key: dict[str, tuple[int, ...]] = {}
        for key, indices in exclude.items():
            if key not in known:
                raise ConfigurationError(
                    f"exclude names shard {key!r}, which is not in the manifest; give manifest shard keys "
                    "(<stage or _>/<shard_id>)"
                )
            if isinstance(indices, (str, bytes, Mapping)) or not isinstance(indices, Collection):
                raise ConfigurationError(f"exclude[{key!r}] must be a collection of record indices, got {indices!r}")
            bad = [i for i in indices if not isinstance(i, int) or isinstance(i, bool) or i < 0]
            if bad:
                raise ConfigurationError(f"exclude[{key!r}] holds {bad[:5]!r}: record indices are ints >= 0")
            if indices:
                self.by_key[key] = tuple(sorted(set(indices)))

    def for_shards(self, shards: tuple[ShardEntry, ...]) -> list[tuple[int, ...]]:
        """The excluded indices of each shard, checked against its record count."""
        out = []
        for s in shards:
            indices = self.by_key.get(s.key, ())
            if indices and indices[-1] >= s.record_count:
                raise ConfigurationError(
                    f"exclude[{s.key!r}] holds record {indices[-1]}, but the shard holds {s.record_count} records "
                    "(indices are 0-based)"
                )
            out.append(indices)
        return out

    def sha256(self, shards: tuple[ShardEntry, ...]) -> str | None:
        """Digest of the exclusions within `shards` (None when none of them has any)."""
        mine = {s.key: list(self.by_key[s.key]) for s in shards if s.key in self.by_key}
        return sha256_hex(canonical_json(mine)) if mine else None

    def __repr__(self) -> str:
        return f"ExclusionSet({sum(map(len, self.by_key.values()))} records in {len(self.by_key)} shard(s))"


def check_exclude(exclude: Any, manifest: DataManifest) -> ExclusionSet | None:
    """`exclude` as given to the loader, checked (None: nothing excluded)."""
    return None if exclude is None else ExclusionSet(exclude, manifest)
