"""Progress of a long scan: a callback, and a small stderr bar for terminals."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class ScanProgress:
    """Where a dataset scan stands (bytes are shard bytes read)."""

    shards_done: int
    shards_total: int
    bytes_done: int
    bytes_total: int


ProgressCallback = Callable[[ScanProgress], None]


def terminal_progress(label: str = "contamination scan", stream: TextIO | None = None) -> ProgressCallback | None:
    """A callback drawing a one-line bar on `stream` (stderr), or None when it is not a terminal."""
    out = stream or sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        return None
    started = time.monotonic()
    last = [0.0]

    def draw(p: ScanProgress) -> None:
        now = time.monotonic()
        done = p.shards_done == p.shards_total
        if not done and now - last[0] < 0.2:  # redraw at most 5 times a second
            return
        last[0] = now
        frac = p.bytes_done / p.bytes_total if p.bytes_total else 1.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        rate = p.bytes_done / max(now - started, 1e-9) / 1e6
        out.write(
            f"\r{label} [{bar}] {frac:6.1%} shards {p.shards_done}/{p.shards_total} {rate:7.1f} MB/s"
        )
        if done:
            out.write("\n")
        out.flush()

    return draw
