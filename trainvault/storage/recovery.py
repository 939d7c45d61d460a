"""Recovery: retrying transient failures with a fresh client, resuming cut streams, backing
off, giving up; the first-contact rule; and the counts that show a flaky link.

Every retry and resume is logged at INFO on the ``trainvault.storage`` logger.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from trainvault.errors import StorageError, StorageTimeoutError, TrainVaultError, TransientStorageError
from trainvault.storage.backend import Backend
from trainvault.storage.clients import Clients
from trainvault.storage.config import S3_ENV_VARS
from trainvault.storage.translate import first_line, translate
from trainvault.uris import Location

log = logging.getLogger("trainvault.storage")

T = TypeVar("T")


class _Contacts:
    """Which S3 endpoints have answered, and since when each other one is being tried.

    An endpoint that never answered is most likely wrong or down, so it gets
    `StorageConfig.first_contact_attempts`; one that answered keeps the recovery window,
    because its failures are then most likely transient. "Answered" holds for this process
    and for the processes it hands a pickled `Storage` to (loader and pool workers).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answered: set[str] = set()
        self._trying: dict[str, float] = {}

    def answered(self, endpoint: str) -> bool:
        return endpoint in self._answered

    def trying(self, endpoint: str) -> None:
        if endpoint not in self._answered:
            with self._lock:
                self._trying.setdefault(endpoint, time.monotonic())

    def heard_from(self, endpoint: str) -> None:
        if endpoint not in self._answered:
            with self._lock:
                self._answered.add(endpoint)
                self._trying.pop(endpoint, None)

    def gave_up(self, endpoint: str) -> None:
        with self._lock:
            self._trying.pop(endpoint, None)

    def waiting(self) -> dict[str, float]:
        """Endpoints being tried that have never answered, with seconds since the first try."""
        now = time.monotonic()
        with self._lock:
            return {endpoint: now - started for endpoint, started in self._trying.items()}


CONTACTS = _Contacts()


class StorageStats:
    """Process-wide counts of recoveries, so a person can see a flaky link."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {"retries": 0, "resumes": 0, "gave_up": 0}

    def add(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


STATS = StorageStats()


class Attempts:
    """One operation's attempts at one object: the backend for each, the answers heard, and
    the pause (or the end) after each failure."""

    def __init__(self, clients: Clients, loc: Location, op: str):
        self.clients, self.loc, self.op = clients, loc, op
        cfg = clients.config
        self.endpoint = cfg.s3_base_url if loc.scheme == "s3" else None
        self.since, self.count = time.monotonic(), 0

    def backend(self) -> Backend:
        """The backend for the next attempt (noting, for S3, that the endpoint is being tried)."""
        backend = self.clients.get(self.loc)
        if self.endpoint:
            CONTACTS.trying(self.endpoint)
        return backend

    def answered(self) -> None:
        if self.endpoint:
            CONTACTS.heard_from(self.endpoint)

    def progressed(self) -> None:
        self.since, self.count = time.monotonic(), 0

    def failed(self, exc: BaseException, offset: int | None = None) -> None:
        """Back off before the next attempt (with a fresh client), or raise once the endpoint
        never answered or the recovery window passed without progress."""
        self.count += 1
        idle = time.monotonic() - self.since
        reason = first_line(exc.__cause__ or exc)
        self._give_up_on_first_contact(exc, reason)
        self._give_up_after_window(exc, reason, idle, offset)
        cfg = self.clients.config
        delay = min(
            cfg.backoff_max_s, cfg.backoff_initial_s * 2 ** min(self.count - 1, 16), cfg.recovery_window_s - idle
        )
        if offset is not None:
            STATS.add("resumes")
            log.info(
                "resuming %s at byte %d in %.1f s (attempt %d): %s", self.loc.uri, offset, delay, self.count, reason
            )
        else:
            STATS.add("retries")
            log.info("retrying %s %s in %.1f s (attempt %d): %s", self.op, self.loc.uri, delay, self.count, reason)
        time.sleep(max(delay, 0.0))
        self.clients.drop(self.loc)

    def _give_up_on_first_contact(self, exc: BaseException, reason: str) -> None:
        cfg, endpoint = self.clients.config, self.endpoint
        if endpoint and not CONTACTS.answered(endpoint) and self.count >= cfg.first_contact_attempts:
            CONTACTS.gave_up(endpoint)
            STATS.add("gave_up")
            raise StorageError(
                f"cannot {self.op} {self.loc.uri}: the S3 endpoint {endpoint} did not answer ({self.count} attempts, "
                f"connect timeout {cfg.connect_timeout_s:g} s, {cfg.client_retries} retries each); last error: "
                f"{reason}. Check {S3_ENV_VARS['s3_base_url']} (s3_base_url) and that the service is up and reachable"
            ) from exc

    def _give_up_after_window(self, exc: BaseException, reason: str, idle: float, offset: int | None) -> None:
        cfg = self.clients.config
        if idle < cfg.recovery_window_s:
            return
        if self.endpoint:
            CONTACTS.gave_up(self.endpoint)
        STATS.add("gave_up")
        where = f" at byte {offset}" if offset is not None else ""
        raise StorageTimeoutError(
            f"cannot {self.op} {self.loc.uri}{where}: no progress for {idle:.0f} s (recovery window "
            f"{cfg.recovery_window_s:.0f} s); last error: {reason}. Check the network and the store"
        ) from exc


def recovering(clients: Clients, loc: Location, op: str, fn: Callable[[Backend], T]) -> T:
    """``fn(backend)``, retrying transient failures with a fresh client."""
    attempts = Attempts(clients, loc, op)
    while True:
        backend = attempts.backend()
        try:
            with translate(loc.uri, op):
                result = fn(backend)
        except TransientStorageError as exc:
            attempts.failed(exc)
            continue
        except TrainVaultError:
            attempts.answered()  # a refusal (missing, denied, changed) is an answer too
            raise
        attempts.answered()
        return result


def resuming(
    clients: Clients, loc: Location, start: int, end: int | None, chunk_size: int, limit: int | None
) -> Iterator[bytes]:
    """The chunks of bytes [start, end) of one version of the object: each transient failure
    reopens a fresh client at the last byte delivered, pinned to the etag first seen."""
    attempts = Attempts(clients, loc, "stream")
    pos, etag, chunks = start, None, None
    while end is None or pos < end:
        try:
            with translate(loc.uri, "stream"):
                if chunks is None:
                    opened = attempts.backend().open_stream(loc.path, pos, end, chunk_size, etag, limit)
                    attempts.answered()
                    etag, chunks = etag or opened.etag, opened.chunks
                chunk = next(chunks, None)
        except TransientStorageError as exc:
            chunks = None
            attempts.failed(exc, offset=pos)
            continue
        if chunk is None:
            return
        pos += len(chunk)
        attempts.progressed()
        yield chunk
