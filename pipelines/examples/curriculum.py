"""A synthetic curriculum dataset: arithmetic tasks whose difficulty grows by stage.

Deterministic: every shard's records are a pure function of (split, stage, shard id),
so re-deriving a shard gives identical bytes and a rebuild reuses completed shards.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any, TypedDict


class Stage(TypedDict):
    """How hard a stage's tasks are."""

    family: str
    operands: int
    max_value: int


STAGES: dict[str, Stage] = {
    "easy": {"family": "arithmetic", "operands": 2, "max_value": 10},
    "medium": {"family": "arithmetic", "operands": 3, "max_value": 100},
    "hard": {"family": "composition", "operands": 5, "max_value": 1000},
}


def stage_metadata(split: str, stage: str) -> dict[str, Any]:
    """Curriculum metadata recorded with every shard of a stage."""
    return {"name": stage, **STAGES[stage]}


def generate_records(split: str, stage: str | None, shard_id: str, count: int = 200) -> Iterator[dict[str, Any]]:
    """`count` task records for one shard."""
    spec = STAGES[stage or "medium"]
    rng = random.Random(f"trainvault-example/{split}/{stage}/{shard_id}")
    for i in range(count):
        values = [rng.randint(1, spec["max_value"]) for _ in range(spec["operands"])]
        question = " + ".join(map(str, values))
        answer = str(sum(values))
        text = f"Question: what is {question}? Answer: {answer}"
        yield {
            "id": f"{split}-{stage or 'none'}-{shard_id}-{i:05d}",
            "task_id": f"{stage or split}/{i % 50}",
            "text": text,
            "tokens": [ord(c) for c in text],
        }
