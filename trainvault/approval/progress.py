"""Progress of approval hashing: a callback type, and a one-line bar for terminals."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class HashProgress:
    """Where hashing stands: files finished and bytes hashed, of the totals expected."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int


HashProgressCallback = Callable[[HashProgress], None]


def terminal_hash_progress(label: str = "hashing", stream: TextIO | None = None) -> HashProgressCallback | None:
    """A callback drawing a bar on `stream` (stderr), or None when it is not a terminal."""
    out = stream or sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        return None
    started = time.monotonic()
    last = [0.0]

    def draw(p: HashProgress) -> None:
        now = time.monotonic()
        done = p.files_done == p.files_total
        if not done and now - last[0] < 0.2:  # at most 5 redraws a second: hashing calls this per chunk
            return
        last[0] = now
        frac = min(p.bytes_done / p.bytes_total, 1.0) if p.bytes_total else 1.0
        filled = int(frac * 30)
        rate = p.bytes_done / max(now - started, 1e-9) / 1e6
        out.write(
            f"\r{label} [{'#' * filled}{'-' * (30 - filled)}] {frac:6.1%} "
            f"files {p.files_done}/{p.files_total} {rate:8.1f} MB/s"
        )
        if done:
            out.write("\n")
        out.flush()

    return draw
