"""What the loader spends its time on: per-stage figures, per step, over a window of steps.

A worker (or the trainer's process, without workers) adds the seconds each read stage
takes, and the bytes, records and blocks it decodes, to a `StageTimes`; each batch it
yields carries what was added since the previous one (a tuple of numbers, cheap to pickle).
The trainer's process adds the time it waited for each batch (the exposed data wait) and
keeps running sums over the last `window` steps, per worker, so `figures()` costs the same
however long the run is. No clock in here decides anything: the figures only report.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainvault.errors import ConfigurationError
from trainvault.loading.watchdog import check_settings

#: The read stages, in pipeline order, then the counts; `StageTimes.take` returns them in this order.
STAGES = ("fetch", "verify", "decompress", "decode", "collate")
FIELDS = (*(f"{s}_s" for s in STAGES), "bytes", "records", "blocks")
_INDEX = {name: i for i, name in enumerate(FIELDS)}
_STAGE_INDEX = {s: _INDEX[f"{s}_s"] for s in STAGES}

#: What the trainer's process is called among the workers when it reads itself (num_workers=0).
IN_PROCESS = "main"


class StageTimes:
    """Seconds per stage, and bytes, records and blocks, added since the last `take`.

    Read threads and the batch-forming thread add to it at once, hence the lock (taken
    a few times per block, never per record).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = [0.0] * len(FIELDS)

    def clock(self, stage: str, seconds: float) -> None:
        """Add `seconds` to `stage` (one of `STAGES`); the signature `ShardReader.read_blocks` calls."""
        i = _STAGE_INDEX[stage]
        with self._lock:
            self._values[i] += seconds

    def count(self, nbytes: int, records: int, blocks: int) -> None:
        with self._lock:
            v = self._values
            v[-3] += nbytes
            v[-2] += records
            v[-1] += blocks

    def take(self) -> tuple[float, ...]:
        """Everything added since the last take, in `FIELDS` order; starts again from zero."""
        with self._lock:
            out, self._values = tuple(self._values), [0.0] * len(FIELDS)
        return out


@dataclass(frozen=True)
class StepFigures:
    """One step as the trainer's process saw it: which worker formed the batch, how long the
    trainer waited for it, and what that worker spent since its previous batch (`FIELDS`)."""

    step: int
    worker: int | str
    wait_s: float
    stages: tuple[float, ...]
    #: When the trainer got the batch (`time.perf_counter`).
    at: float


class WindowFigures:
    """Running sums over the last `window` steps, in total and per worker."""

    def __init__(self, window: int):
        self.window = window
        self._steps: deque[StepFigures] = deque()
        self._total = [0.0] * (len(FIELDS) + 1)  # data wait first, then FIELDS
        self._workers: dict[int | str, list[float]] = {}
        self._steps_of: dict[int | str, int] = {}

    def add(self, step: StepFigures) -> None:
        self._apply(step, 1.0)
        self._steps.append(step)
        if len(self._steps) > self.window:
            self._apply(self._steps.popleft(), -1.0)

    def _apply(self, step: StepFigures, sign: float) -> None:
        row = self._workers.setdefault(step.worker, [0.0] * (len(FIELDS) + 1))
        for sums in (self._total, row):
            sums[0] += sign * step.wait_s
            for i, v in enumerate(step.stages, 1):
                sums[i] += sign * v
        self._steps_of[step.worker] = self._steps_of.get(step.worker, 0) + int(sign)
        if self._steps_of[step.worker] == 0:
            del self._steps_of[step.worker], self._workers[step.worker]

    @property
    def steps(self) -> int:
        return len(self._steps)

    def last(self) -> StepFigures | None:
        return self._steps[-1] if self._steps else None

    def total(self) -> dict[str, float]:
        """Sums over the window; ``wall_s`` runs from when the trainer asked for its first batch to its last."""
        out = _named(self._total, self.steps)
        first = self._steps[0] if self._steps else None
        out["wall_s"] = 0.0 if first is None else self._steps[-1].at - first.at + first.wait_s
        return out

    def per_worker(self) -> dict[str, dict[str, float]]:
        return {str(w): _named(sums, self._steps_of[w]) for w, sums in sorted(self._workers.items(), key=str)}


def _named(sums: list[float], steps: int) -> dict[str, float]:
    out: dict[str, float] = {"steps": steps, "data_wait_s": max(0.0, sums[0])}
    for name, v in zip(FIELDS, sums[1:], strict=False):
        # Sums of floats added and taken away drift by ~1e-17; counts are whole.
        out[name] = max(0.0, v) if name.endswith("_s") else round(v)
    return out


class SlowestRank:
    """Every `every` steps, one all-gather of each rank's window data wait; remembers the largest.

    Only when torch.distributed is initialised; `every=0` never gathers.
    """

    def __init__(self, every: int, gather: Callable[[float], list[float]] | None = None):
        self.every = every
        self._gather = gather
        self.latest: dict[str, Any] | None = None

    def maybe_gather(self, step: int, wait_s: float) -> None:
        if not self.every or (step + 1) % self.every:
            return
        gather = self._gather or _torch_gather()
        if gather is None:
            return
        waits = gather(wait_s)
        rank = max(range(len(waits)), key=waits.__getitem__)
        self.latest = {"rank": rank, "data_wait_s": waits[rank], "at_step": step, "ranks": len(waits)}


def _torch_gather() -> Callable[[float], list[float]] | None:
    """An all-gather of one float per rank over the default process group, if there is one."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")

    def gather(value: float) -> list[float]:
        mine = torch.tensor([value], dtype=torch.float64, device=device)
        out = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(out, mine)
        return [float(t.item()) for t in out]

    return gather


@dataclass(frozen=True)
class Observability:
    """What the loader reports and watches.

    `window_steps`: steps the windowed figures sum over. `gather_every`: every this many
    steps, one all-gather of each rank's window data wait names the slowest rank (only when
    torch.distributed is initialised; 0, the default, never gathers; every rank must
    iterate in lockstep when it is on). `watchdog_s`: log every thread's stack and the reads in flight
    when no batch comes for this long (None: no watchdog); `on_stall`: "log" keeps waiting,
    "raise" ends the wait for a read with `LoaderStallError`.
    """

    window_steps: int = 100
    gather_every: int = 0
    watchdog_s: float | None = None
    on_stall: str = "log"

    def __post_init__(self) -> None:
        for name, least in (("window_steps", 1), ("gather_every", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigurationError(f"Observability.{name} must be an int >= {least}, got {value!r}")
        check_settings(self.watchdog_s, self.on_stall)
