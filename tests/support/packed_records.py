"""Packed long-context records for the component-range tests: documents (components) back to
back in one record, each declaring its frame and the ranges to train on (`declare`)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from trainvault.components import Frame, split_frame

SENTINEL = 999_999


P7 = [11, 12, 13, 14, 15, 21, 22, 23, 24, 25, 26, 0]


P7_SPEC = [["A", 0, 5, 0, [[0, 5]]], ["B", 5, 11, 0, [[0, 3], [3, 3]]]]


def declare(record: dict[str, Any]) -> list[Frame]:
    # The declaration travels in the record, so declare() is a function of the record alone.
    frames = []
    for cid, start, end, cstart, ranges, *rest in record["spec"]:
        frame = Frame(cid, start, end, cstart, tuple((c, n) for c, n in ranges))
        frames.append(split_frame(frame, rest[0]) if rest else frame)
    return frames


def packed(pid: str, tokens: list[int], spec: list[Any], mask: list[bool] | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "packed_record_id": pid,
        "input_ids": np.asarray(tokens, dtype=np.int32),
        "text": f"packed record {pid}",
        "spec": spec,
    }
    if mask is not None:
        rec["loss_mask"] = np.asarray(mask, dtype=np.bool_)
    return rec


def random_record(rng: random.Random, pid: str) -> dict[str, Any]:
    """Components back to back, token = 1000 * component + component offset; tokens that no
    range emits (outside ranges and not a predecessor) are SENTINEL."""
    tokens: list[int] = []
    spec: list[Any] = []
    keep: set[int] = set()
    for k in range(rng.randrange(1, 5)):
        cid, length = f"d{k}", rng.randrange(2, 14)
        cstart = rng.choice([0, 0, rng.randrange(1, 9)]) if k == 0 else 0
        start = len(tokens)
        tokens.extend(1000 * (k + 1) + cstart + i for i in range(length))
        if rng.random() < 0.5:  # whole frame, cut to rows
            spec.append([cid, start, start + length, cstart, [], rng.randrange(2, 6)])
            keep.update(range(start, start + length))  # every token: the first as context or predecessor
        else:  # one explicit range inside the frame, ending before the frame does when it can
            lo = rng.randrange(1 if cstart > 0 else 0, length)
            n = rng.randrange(1, length - lo + 1)
            c = cstart + lo
            spec.append([cid, start, start + length, cstart, [[c, n]]])
            keep.update(range(start + lo - (1 if c > 0 else 0), start + lo + n))
    pad = rng.randrange(0, 3)
    tokens.extend([0] * pad)
    tokens = [t if i in keep else SENTINEL for i, t in enumerate(tokens)]
    return packed(pid, tokens, spec)


def shard_records(i: int) -> list[dict[str, Any]]:
    rng = random.Random(7 + i)
    out = [packed("p7", P7, P7_SPEC)] if i == 0 else []
    out += [random_record(rng, f"s{i}-r{k}") for k in range(24)]
    out.insert(5, packed(f"s{i}-empty", [SENTINEL] * 6, []))  # declares nothing to train on
    out.insert(
        9,
        packed(
            f"s{i}-masked",
            list(range(1, 11)),
            [["m", 0, 10, 0, [[0, 10]]]],
            mask=[True, True, False, False, True, True, True, False, True, True],
        ),
    )
    return out
