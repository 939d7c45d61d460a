"""The planting switch: the example generator with evaluation items copied into one train shard.

Point the dataset spec's `generator` here (``TRAINVAULT_DEMO_PLANT=1 make demo`` does) to
watch the contamination check fail and the approval refuse. The planted shard is
``train/hard/0``: it gets three HumanEval problems (prompt and canonical solution) and
two synthetic word problems, interleaved with its usual records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipelines.examples.benchmarks import synthetic_benchmark
from pipelines.examples.curriculum import generate_records

PLANTED_SHARD = ("train", "hard", "0")
HUMANEVAL_ITEMS = (0, 7, 42)
SYNTHETIC_ITEMS = (3, 11)


def planted_items() -> list[dict[str, Any]]:
    from trainvault.contamination import humaneval_benchmark

    he = humaneval_benchmark()
    syn = synthetic_benchmark()
    out = []
    for i in HUMANEVAL_ITEMS:
        item = he.items[i]
        out.append({"item": item["task_id"], "text": item["prompt"] + item["canonical_solution"]})
    for i in SYNTHETIC_ITEMS:
        item = syn.items[i]
        out.append({"item": item["id"], "text": item["question"] + " " + item["answer"]})
    return out


def planted_records(split: str, stage: str | None, shard_id: str, count: int = 200) -> Iterator[dict[str, Any]]:
    records = generate_records(split, stage, shard_id, count)
    if (split, stage, shard_id) != PLANTED_SHARD:
        yield from records
        return
    planted = planted_items()
    step = max(1, count // (len(planted) + 1))
    for i, record in enumerate(records):
        yield record
        if i % step == step - 1 and planted:
            p = planted.pop(0)
            text = p["text"]
            yield {
                "id": f"planted-{p['item']}",
                "task_id": "planted",
                "text": text,
                "tokens": [ord(c) % 65536 for c in text],
            }
    for p in planted:
        text = p["text"]
        yield {
            "id": f"planted-{p['item']}",
            "task_id": "planted",
            "text": text,
            "tokens": [ord(c) % 65536 for c in text],
        }
