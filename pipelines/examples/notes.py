"""A second, different example dataset: short field notes, no curriculum stages.

Deterministic like the curriculum generator: a shard's records are a pure function of
(split, shard id), so a rebuild reuses every completed shard.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

_PLACES = ["the north meadow", "the tidal flats", "the beech wood", "the old quarry", "the reed bed"]
_BIRDS = ["curlews", "wagtails", "goldcrests", "ravens", "sandpipers", "nuthatches"]
_WEATHER = ["under low cloud", "in a steady drizzle", "in bright sun", "against a west wind"]


def generate_notes(split: str, stage: str | None, shard_id: str, count: int = 100) -> Iterator[dict[str, Any]]:
    """`count` field-note records for one shard (`stage` is unused: the dataset has none)."""
    rng = random.Random(f"trainvault-example-notes/{split}/{shard_id}")
    for i in range(count):
        n, place, birds, weather = rng.randint(2, 40), rng.choice(_PLACES), rng.choice(_BIRDS), rng.choice(_WEATHER)
        yield {
            "id": f"{split}-{shard_id}-{i:05d}",
            "text": f"Counted {n} {birds} at {place} {weather}.",
            "count": n,
        }
