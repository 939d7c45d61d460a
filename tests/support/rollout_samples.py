"""Rollout samples as an RL trainer hands them to an archive: tokens, logprobs, a reward, a status,
and transport state (keys starting with "_") that is never archived."""

from __future__ import annotations

from typing import Any

import numpy as np


def make_samples(
    n: int, *, seed: int = 0, index_mod: int | None = None, tasks: int = 3, first: int = 0
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(3, 12))
        out.append(
            {
                "index": i % index_mod if index_mod else first + i,
                "task_id": f"task-{i % tasks}",
                "tokens": rng.integers(0, 50_000, length).astype(np.int32),
                "logprobs": rng.standard_normal(length).astype(np.float32).tolist(),
                "reward": float(i % 10) / 10,
                "status": "completed" if i % 4 else "truncated",
                "_queue_lease": {"task_id": "live", "lock": object()},  # transport state: never archived
            }
        )
    return out
