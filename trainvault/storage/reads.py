"""Process-wide counts of what reads return: bytes and requests, so a benchmark (or a person)
can see how often a lifecycle reads each stored byte.

Counted where `Storage` hands bytes back, after recovery: a retried read counts once, a
resumed stream counts the bytes it delivered. `head` and `list` are requests of no bytes.
Streamed bytes are also counted apart: whole objects read without being kept (shards, as
hashing and scanning read them), as opposed to documents read whole with `get`.
Nothing is reset: take a `snapshot` before and after and subtract.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadCounts:
    """Bytes returned by reads, read requests made (get, range, stream, head, list), and the bytes
    of those that `stream` returned."""

    bytes: int = 0
    requests: int = 0
    streamed: int = 0

    def __sub__(self, other: ReadCounts) -> ReadCounts:
        return ReadCounts(self.bytes - other.bytes, self.requests - other.requests, self.streamed - other.streamed)


class ReadCounter:
    """Adds up `ReadCounts` from every thread of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes = self._requests = self._streamed = 0

    def add(self, nbytes: int, requests: int = 0, *, streamed: bool = False) -> None:
        with self._lock:
            self._bytes += nbytes
            self._requests += requests
            if streamed:
                self._streamed += nbytes

    def snapshot(self) -> ReadCounts:
        with self._lock:
            return ReadCounts(self._bytes, self._requests, self._streamed)


#: Every read of every `Storage` in this process.
READS = ReadCounter()
