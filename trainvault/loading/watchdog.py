"""The watchdog: when no batch comes for a while, say where every thread of the process is.

One runs in each process that forms or waits for batches (each DataLoader worker, and
the trainer's process). It counts only time the process is asked for a batch (`busy` to
`idle`), so a worker left idle by a slow trainer never looks stalled. After `after_s`
seconds without a batch it logs, on the ``trainvault.loading`` logger, the Python stack of
every thread of the process and the reads in flight (which shard, which blocks, for how
long), then again each time the stall has doubled. With ``on_stall="raise"`` the
wait for a read then ends with `LoaderStallError` instead of going on.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

from trainvault.errors import ConfigurationError, LoaderStallError

log = logging.getLogger("trainvault.loading")

ON_STALL = ("log", "raise")


def check_settings(after_s: float | None, on_stall: str) -> None:
    """Refuse a watchdog time that is not a number of seconds > 0 (None: off) or an unknown `on_stall`."""
    if after_s is not None and (not isinstance(after_s, (int, float)) or isinstance(after_s, bool) or not after_s > 0):
        raise ConfigurationError(f"watchdog_s must be a number of seconds > 0 or None, got {after_s!r}")
    if on_stall not in ON_STALL:
        raise ConfigurationError(f"on_stall must be one of {', '.join(ON_STALL)}, got {on_stall!r}")


class Watchdog:
    """Watches one process's batches; `start` its thread once, `busy`/`idle` around each batch."""

    def __init__(self, after_s: float, on_stall: str, where: str, reads: Callable[[], list[str]] | None = None):
        check_settings(after_s, on_stall)
        self.after_s = float(after_s)
        self.on_stall = on_stall
        self.where = where
        self.reads = reads
        #: How often a waiting thread looks whether the watchdog gave up.
        self.poll_s = min(1.0, self.after_s / 4)
        self._since: float | None = None
        self._dumps = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self._run, name="trainvault-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def busy(self) -> None:
        """A batch is wanted from now on."""
        self._since, self._dumps = time.monotonic(), 0

    def idle(self) -> None:
        """The batch came (or nothing is wanted)."""
        self._since = None

    def stalled_for(self) -> float | None:
        since = self._since
        return None if since is None else time.monotonic() - since

    def check(self) -> None:
        """Raise `LoaderStallError` if this watchdog raises on a stall and one has lasted `after_s`."""
        waited = self.stalled_for()
        if self.on_stall == "raise" and waited is not None and waited >= self.after_s:
            if not self._dumps:
                self.dump(waited)
            raise LoaderStallError(
                f"trainvault loader ({self.where}): no batch for {waited:.1f} s (watchdog_s={self.after_s:g}); "
                f"{'; '.join(self.reads() if self.reads else []) or 'no read in flight'}. The stacks were logged on "
                "the 'trainvault.loading' logger: check the storage, or raise watchdog_s"
            )

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            waited = self.stalled_for()
            # Again after 2x, 4x, ... the time: a long stall is shown, not flooded.
            if waited is not None and waited >= self.after_s * 2**self._dumps:
                self.dump(waited)

    def dump(self, waited: float) -> None:
        """Log every thread's stack and the reads in flight."""
        self._dumps += 1
        reads = self.reads() if self.reads else []
        log.warning(
            "trainvault loader (%s, pid %d): no batch for %.1f s (watchdog_s=%g, on_stall=%s)\nwaiting on: %s\n%s",
            self.where,
            os.getpid(),
            waited,
            self.after_s,
            self.on_stall,
            "\n  ".join(["", *reads]) if reads else "no read in flight",
            format_stacks(),
        )


def format_stacks() -> str:
    """The Python stack of every thread of this process, innermost call last."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"--- thread {names.get(ident, ident)} ---\n{''.join(traceback.format_stack(frame))}")
    return "\n".join(out)
