"""What the command shows while it works: waits announced after a second, storage retries, the hashing bar."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

#: Seconds of waiting before the command says what it waits for.
NOTICE_AFTER_S = 1.0


def vault_from_env() -> Any:
    from trainvault.client import TrainVault

    return TrainVault.from_env()


def say(text: str) -> None:
    print(f"trainvault: {text}", file=sys.stderr, flush=True)


@contextmanager
def waiting(text: str) -> Iterator[None]:
    """Say ``text ...`` on stderr if the block still runs after `NOTICE_AFTER_S`."""
    timer = threading.Timer(NOTICE_AFTER_S, say, (f"{text} ...",))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@contextmanager
def announcing_storage_waits() -> Iterator[None]:
    """While the command runs, say which S3 endpoint it is still connecting to after a second,
    and show storage retries and resumes (logged at INFO, never with credentials)."""
    from trainvault.storage.recovery import CONTACTS

    stop, announced = threading.Event(), set()

    def watch() -> None:
        while not stop.wait(0.1):
            for endpoint, seconds in CONTACTS.waiting().items():
                if seconds >= NOTICE_AFTER_S and endpoint not in announced:
                    announced.add(endpoint)
                    say(f"connecting to {endpoint} ...")

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("trainvault: %(message)s"))
    logger = logging.getLogger("trainvault.storage")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    watcher = threading.Thread(target=watch, name="trainvault-connecting", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        logger.removeHandler(handler)
        logger.setLevel(level)


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} B"


@contextmanager
def gate_progress(quiet: bool, text: str) -> Iterator[Any]:
    """The hashing bar on a terminal; elsewhere `text` once, if the gate runs over a second."""
    from trainvault.approval.hashing import terminal_hash_progress

    bar = None if quiet else terminal_hash_progress("hashing")
    with waiting(text) if bar is None and not quiet else nullcontext():
        yield bar
