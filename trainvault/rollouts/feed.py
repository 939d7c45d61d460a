"""Rollout archives as training input: stream their samples into a derivation (the saver)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from trainvault.rollouts.archive import RolloutArchive
from trainvault.rollouts.samples import Sample
from trainvault.storage.store import StorageSource, storage_or_default


def iter_archive_samples(
    uris: str | Iterable[str],
    *,
    storage: StorageSource | None = None,
    where: Callable[[Mapping[str, Any]], bool] | None = None,
    source_field: str | None = None,
) -> Iterator[Sample]:
    """Samples of each archive in turn, in archive order, one chunk in memory at a time.

    `where(sample)` keeps a sample when true (e.g. a reward threshold). `source_field`, if
    given, adds ``{"archive", "rollout_id", "sample_key"}`` under that name, so a derived
    dataset records where each record came from. Every chunk is checked against its digest.
    """
    st = storage_or_default(storage)
    for uri in [uris] if isinstance(uris, str) else list(uris):
        archive = RolloutArchive(uri, storage=st)
        for entry, sample in archive.iter_samples():
            if where is not None and not where(sample):
                continue
            if source_field is not None:
                sample[source_field] = {
                    "archive": archive.uri,
                    "rollout_id": archive.rollout_id,
                    "sample_key": entry.sample_key,
                }
            yield sample
