"""A small synthetic benchmark for the example evaluation release (next to HumanEval).

Word problems in a vocabulary the curriculum generator never uses, so the clean example
dataset is not contaminated by them; the planting switch copies some into a train shard.
"""

from __future__ import annotations

import random

from trainvault.contamination import BenchmarkItems

_SUBJECTS = ["a lighthouse keeper", "the orchard cooperative", "a glassblower", "the river ferry", "a beekeeper"]
_OBJECTS = ["lanterns", "crates of quinces", "blue vases", "passengers", "jars of heather honey"]
_VERBS = ["polishes", "ships", "fires", "carries", "sells"]


def synthetic_benchmark(name: str = "synthetic-wordprob", count: int = 24) -> BenchmarkItems:
    rng = random.Random("trainvault-example/synthetic-benchmark")
    items = []
    for i in range(count):
        s, o, v = rng.choice(_SUBJECTS), rng.choice(_OBJECTS), rng.choice(_VERBS)
        a, b, c = rng.randint(2, 90), rng.randint(2, 90), rng.randint(2, 9)
        text = (
            f"Every morning {s} {v} {a} {o} and every evening {b} more; after {c} days, "
            f"how many {o} has {s} handled in total, counting both mornings and evenings?"
        )
        items.append({"id": f"wordprob/{i}", "question": text, "answer": str((a + b) * c)})
    return BenchmarkItems(
        name=name,
        split="test",
        id_field="id",
        text_fields=("question", "answer"),
        items=tuple(items),
        source={
            "generator": "pipelines.examples.benchmarks:synthetic_benchmark",
            "seed": "trainvault-example/synthetic-benchmark",
        },
    )
