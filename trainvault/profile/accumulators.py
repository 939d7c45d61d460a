"""Mergeable accumulators: summaries computed per shard and combined per split.

Every accumulator has ``observe`` (one value), ``merge`` (fold another accumulator of the
same kind into this one) and ``to_json`` (the published summary). Merging is how shards
computed in different threads or processes become one split: the profile merges them in
manifest order, so the published numbers are a pure function of the publication.

How each one merges, exactly:

- `AvgMinMax`: count, min and max are exact. Mean and the sum of squared deviations use
  Welford's update per value and Chan et al.'s pairwise formula per merge, so a merged
  result equals a single pass up to floating-point rounding (no catastrophic
  cancellation, unlike sum / sum-of-squares). ``stddev`` is the population standard
  deviation (divides by the count).
- `StringMetrics` / `CategoricalMetrics` ``unique_count``: distinct values are kept as
  128-bit BLAKE2b digests and merged by set union, so unique counts are exact (up to a
  digest collision, below 2**-60 for fewer than 2**34 distinct values). Memory grows with
  the number of distinct values (about 100 bytes each). Published sidecars carry only the
  counts, so two sidecars cannot be merged into one unique count: merge accumulators.
- `CategoricalMetrics` labels: at most `MAX_CATEGORICAL_LABELS` labels are kept with
  counts; when more distinct labels are seen, the ones that sort first (Python string
  order) are kept and every other observation goes to ``other_count``. Unlike "first
  seen" or "most frequent", this rule is exactly mergeable: a kept label's count is exact
  and does not depend on how the rows were split into shards or in which order they merge.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from trainvault.errors import ProfileError

MAX_CATEGORICAL_LABELS = 100


def _digest(value: str) -> bytes:
    return hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _same_kind(a: object, b: object) -> None:
    if type(a) is not type(b):
        raise ProfileError(f"cannot merge {type(b).__name__} into {type(a).__name__}")


class AvgMinMax:
    """count, mean, min, max and population stddev of numbers."""

    __slots__ = ("count", "m2", "max", "mean", "min")

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0  # sum of squared deviations from the mean
        self.min: int | float | None = None
        self.max: int | float | None = None

    def observe(self, x: int | float) -> None:
        """Add one number; NaN, infinities, bools and non-numbers raise `ProfileError`."""
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ProfileError(f"AvgMinMax observes numbers, got {type(x).__name__} {x!r}")
        if isinstance(x, float) and not math.isfinite(x):
            # No JSON spelling, and one NaN would poison the mean of the whole split.
            raise ProfileError(f"AvgMinMax observes finite numbers, got {x!r}")
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)
        if self.min is None or x < self.min:
            self.min = x
        if self.max is None or x > self.max:
            self.max = x

    def merge(self, other: AvgMinMax) -> AvgMinMax:
        """Fold `other` into this one (Chan et al.); returns self."""
        _same_kind(self, other)
        if other.count == 0:
            return self
        if self.count == 0:
            self.count, self.mean, self.m2, self.min, self.max = other.count, other.mean, other.m2, other.min, other.max
            return self
        n = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * other.count / n
        self.m2 += other.m2 + delta * delta * self.count * other.count / n
        self.count = n
        # Both counts are positive here, so every bound is set; the None checks only narrow the types.
        if other.min is not None and (self.min is None or other.min < self.min):
            self.min = other.min
        if other.max is not None and (self.max is None or other.max > self.max):
            self.max = other.max
        return self

    @property
    def stddev(self) -> float | None:
        if self.count == 0:
            return None
        return math.sqrt(max(self.m2, 0.0) / self.count)

    def to_json(self) -> dict[str, Any]:
        """``{count, mean, min, max, stddev}``; all but count are null when nothing was observed."""
        empty = self.count == 0
        return {
            "count": self.count,
            "mean": None if empty else self.mean,
            "min": self.min,
            "max": self.max,
            "stddev": self.stddev,
        }

    def __repr__(self) -> str:
        return f"AvgMinMax({self.to_json()})"


class StringMetrics:
    """total and exact unique counts of strings."""

    __slots__ = ("_distinct", "total_count")

    def __init__(self) -> None:
        self.total_count = 0
        self._distinct: set[bytes] = set()

    def observe(self, value: str) -> None:
        if not isinstance(value, str):
            raise ProfileError(f"StringMetrics observes strings, got {type(value).__name__}")
        self.total_count += 1
        self._distinct.add(_digest(value))

    def merge(self, other: StringMetrics) -> StringMetrics:
        """Fold `other` into this one (set union of distinct digests); returns self."""
        _same_kind(self, other)
        self.total_count += other.total_count
        self._distinct |= other._distinct
        return self

    @property
    def unique_count(self) -> int:
        return len(self._distinct)

    def to_json(self) -> dict[str, Any]:
        return {"total_count": self.total_count, "unique_count": self.unique_count}

    def __repr__(self) -> str:
        return f"StringMetrics({self.to_json()})"


class CategoricalMetrics:
    """A bounded distribution of string labels: counts of at most `max_labels` labels plus ``other_count``."""

    __slots__ = ("_unique", "counts", "max_labels", "other_count")

    def __init__(self, max_labels: int = MAX_CATEGORICAL_LABELS) -> None:
        if isinstance(max_labels, bool) or not isinstance(max_labels, int) or max_labels < 1:
            raise ProfileError(f"max_labels must be a positive integer, got {max_labels!r}")
        self.counts: dict[str, int] = {}
        self.other_count = 0
        self.max_labels = max_labels
        self._unique = StringMetrics()

    @property
    def total_count(self) -> int:
        return self._unique.total_count

    @property
    def unique_count(self) -> int:
        return self._unique.unique_count

    def observe(self, value: str) -> None:
        if not isinstance(value, str):
            raise ProfileError(f"CategoricalMetrics observes string labels, got {type(value).__name__}")
        self._unique.observe(value)
        if value in self.counts:
            self.counts[value] += 1
        else:
            self.counts[value] = 1
            self._bound()

    def _bound(self) -> None:
        # Evict the labels that sort last: once a label is evicted it can never sort among
        # the kept ones again, which is what makes kept counts exact under any merge order.
        if len(self.counts) <= self.max_labels:
            return
        keep = sorted(self.counts)[: self.max_labels]
        kept = {label: self.counts[label] for label in keep}
        self.other_count += sum(self.counts.values()) - sum(kept.values())
        self.counts = kept

    def merge(self, other: CategoricalMetrics) -> CategoricalMetrics:
        """Fold `other` into this one; returns self. Both must have the same `max_labels`."""
        _same_kind(self, other)
        if other.max_labels != self.max_labels:
            raise ProfileError(f"cannot merge categorical metrics bounded at {other.max_labels} into {self.max_labels}")
        self._unique.merge(other._unique)
        self.other_count += other.other_count
        for label, n in other.counts.items():
            self.counts[label] = self.counts.get(label, 0) + n
        self._bound()
        return self

    def to_json(self) -> dict[str, Any]:
        """``{total_count, unique_count, other_count, counts}``; counts hold at most `max_labels` labels."""
        return {
            "total_count": self.total_count,
            "unique_count": self.unique_count,
            "other_count": self.other_count,
            "counts": dict(sorted(self.counts.items())),
        }

    def __repr__(self) -> str:
        return f"CategoricalMetrics(total={self.total_count}, unique={self.unique_count}, labels={len(self.counts)})"
