"""Progress of long work (hashing, scanning): a callback value, and a one-line bar for terminals."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class Progress:
    """Where long work stands: items finished and bytes processed, of the totals expected."""

    done: int
    total: int
    bytes_done: int
    bytes_total: int


def terminal_bar(label: str, unit: str, stream: TextIO | None = None) -> Callable[[Any], None] | None:
    """A callback drawing a bar on `stream` (stderr), or None when it is not a terminal."""
    out = stream or sys.stderr
    if not getattr(out, "isatty", lambda: False)():
        return None
    started = time.monotonic()
    last = [0.0]

    def draw(p: Progress) -> None:
        now = time.monotonic()
        finished = p.done == p.total
        if not finished and now - last[0] < 0.2:  # at most 5 redraws a second: callers report per chunk
            return
        last[0] = now
        frac = min(p.bytes_done / p.bytes_total, 1.0) if p.bytes_total else 1.0
        filled = int(frac * 30)
        rate = p.bytes_done / max(now - started, 1e-9) / 1e6
        out.write(
            f"\r{label} [{'#' * filled}{'-' * (30 - filled)}] {frac:6.1%} {unit} {p.done}/{p.total} {rate:8.1f} MB/s"
        )
        if finished:
            out.write("\n")
        out.flush()

    return draw
