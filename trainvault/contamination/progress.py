"""Progress of a dataset scan, counted in shards (bytes are shard bytes read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from trainvault.progress import Progress, terminal_bar


class ScanProgress(Progress):
    """Shards finished and shard bytes read, of the totals expected."""

    @property
    def shards_done(self) -> int:
        return self.done

    @property
    def shards_total(self) -> int:
        return self.total


ProgressCallback = Callable[[ScanProgress], None]


def terminal_progress(label: str = "contamination scan", stream: TextIO | None = None) -> ProgressCallback | None:
    """A callback drawing a one-line bar on `stream` (stderr), or None when it is not a terminal."""
    return terminal_bar(label, "shards", stream)
