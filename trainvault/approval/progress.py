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


def continued(progress: HashProgressCallback | None, files: int, nbytes: int) -> HashProgressCallback | None:
    """`progress` for work that follows `files` files and `nbytes` bytes already hashed, so
    the counts it shows are those of the whole job."""
    if progress is None:
        return None
    report = progress

    def after(p: HashProgress) -> None:
        report(HashProgress(p.done + files, p.total + files, p.bytes_done + nbytes, p.bytes_total + nbytes))

    return after
