"""Progress of approval hashing, counted in files."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from trainvault.progress import Progress, terminal_bar


class HashProgress(Progress):
    """Files finished and bytes hashed, of the totals expected."""

    @property
    def files_done(self) -> int:
        return self.done

    @property
    def files_total(self) -> int:
        return self.total


HashProgressCallback = Callable[[HashProgress], None]


def terminal_hash_progress(label: str = "hashing", stream: TextIO | None = None) -> HashProgressCallback | None:
    """A callback drawing a bar on `stream` (stderr), or None when it is not a terminal."""
    return terminal_bar(label, "files", stream)
