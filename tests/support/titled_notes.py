"""The example notes with a nested text field the verifier contract cannot scan (``meta.title``):
a catalog must exempt it (policy ``unscanned_fields``) or its approval is denied."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipelines.examples.notes import generate_notes


def generate_titled_notes(split: str, stage: str | None, shard_id: str, count: int) -> Iterator[dict[str, Any]]:
    for record in generate_notes(split, stage, shard_id, count):
        yield {**record, "meta": {"title": f"Field notes, {split} shard {shard_id}: {record['text']}"}}
