"""The example generator behind a gate a test holds: shards of stage "hard" wait (bounded) for
the file named by TRAINVAULT_TEST_GATE, so a test can act while a shard step is mid-way.
Without the variable (an in-process reference run) nothing waits; the records are the same."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipelines.examples.curriculum import generate_records as example_records

GATE_ENV = "TRAINVAULT_TEST_GATE"
GATED_STAGE = "hard"
MAX_WAIT_S = 300


def generate_records(split: str, stage: str | None, shard_id: str, count: int) -> Iterator[dict[str, Any]]:
    gate = os.environ.get(GATE_ENV)
    if gate and stage == GATED_STAGE:
        deadline = time.monotonic() + MAX_WAIT_S
        while not Path(gate).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{gate} not opened within {MAX_WAIT_S} s: the test holding it is gone")
            time.sleep(0.1)
    yield from example_records(split, stage, shard_id, count)
