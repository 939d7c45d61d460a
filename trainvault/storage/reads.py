"""Process-wide counts of what reads return: bytes and requests, so a benchmark (or a person)
can see how often a lifecycle reads each stored byte.

Counted where `Storage` hands bytes back, after recovery: a retried read counts once, a
resumed stream counts the bytes it delivered. `head` and `list` are requests of no bytes.
Nothing is reset: take a `snapshot` before and after and subtract.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadCounts:
    """Bytes returned by reads and read requests made (get, range, stream, head, list)."""

    bytes: int = 0
    requests: int = 0

    def __sub__(self, other: ReadCounts) -> ReadCounts:
        return ReadCounts(self.bytes - other.bytes, self.requests - other.requests)


class ReadCounter:
    """Adds up `ReadCounts` from every thread of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = self._requests = 0

    def add(self, nbytes: int, requests: int = 0) -> None:
        with self._lock:
            self._bytes += nbytes
            self._requests += requests

    def snapshot(self) -> ReadCounts:
        with self._lock:
            return ReadCounts(self._bytes, self._requests)


#: Every read of every `Storage` in this process.
READS = ReadCounter()
