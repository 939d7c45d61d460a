"""A shard's profile as exact, mergeable state: what a per-shard result stores so a later
profile merges it without reading the shard again.

`to_json` of the accumulators is lossy (distinct values become counts); this state is not:
distinct digests, Welford's mean and squared deviations, kept labels. `from_state` refuses
anything else with `ProfileError`.
"""

from __future__ import annotations

from typing import Any

from trainvault.errors import ProfileError
from trainvault.profile.accumulators import AvgMinMax, CategoricalMetrics, StringMetrics
from trainvault.profile.metrics import DatasetMetrics
from trainvault.profile.sidecar import ShardProfile
from trainvault.profile.validation import OffendingRow

_NUMERIC = ("json_dumped_number_of_words", "number_of_turns", "number_of_tools", "temperature")


def _avg(acc: AvgMinMax) -> dict[str, Any]:
    return {"count": acc.count, "mean": acc.mean, "m2": acc.m2, "min": acc.min, "max": acc.max}


def _avg_from(state: Any) -> AvgMinMax:
    acc = AvgMinMax()
    acc.count, acc.mean, acc.m2, acc.min, acc.max = (
        state["count"],
        float(state["mean"]),
        float(state["m2"]),
        state["min"],
        state["max"],
    )
    if not isinstance(acc.count, int) or acc.count < 0:
        raise ProfileError(f"a numeric metric's count must be a non-negative integer, got {acc.count!r}")
    return acc


def _strings(acc: StringMetrics) -> dict[str, Any]:
    return {"total_count": acc.total_count, "distinct": sorted(d.hex() for d in acc._distinct)}


def _strings_from(state: Any) -> StringMetrics:
    acc = StringMetrics()
    acc.total_count = int(state["total_count"])
    acc._distinct = {bytes.fromhex(d) for d in state["distinct"]}
    return acc


def _labels(acc: CategoricalMetrics) -> dict[str, Any]:
    return {
        "max_labels": acc.max_labels,
        "counts": dict(sorted(acc.counts.items())),
        "other_count": acc.other_count,
        "unique": _strings(acc._unique),
    }


def _labels_from(state: Any) -> CategoricalMetrics:
    acc = CategoricalMetrics(state["max_labels"])
    acc.counts, acc.other_count, acc._unique = (
        dict(state["counts"]),
        int(state["other_count"]),
        _strings_from(state["unique"]),
    )
    return acc


def metrics_state(metrics: DatasetMetrics) -> dict[str, Any]:
    """The exact state of `metrics` as JSON-compatible data."""
    return {
        "number_of_examples": metrics.number_of_examples,
        "number_of_responses_rows": metrics.number_of_responses_rows,
        "max_labels": metrics._max_labels,
        "tasks": _strings(metrics._tasks),
        **{name: _avg(getattr(metrics, name)) for name in _NUMERIC},
        "extra": {
            name: ({"numbers": _avg(acc)} if isinstance(acc, AvgMinMax) else {"labels": _labels(acc)})
            for name, acc in sorted(metrics.extra.items())
        },
    }


def metrics_from_state(state: Any) -> DatasetMetrics:
    """The `DatasetMetrics` `metrics_state` described; `ProfileError` for anything else."""
    try:
        metrics = DatasetMetrics(max_labels=state["max_labels"])
        metrics.number_of_examples = int(state["number_of_examples"])
        metrics.number_of_responses_rows = int(state["number_of_responses_rows"])
        metrics._tasks = _strings_from(state["tasks"])
        for name in _NUMERIC:
            setattr(metrics, name, _avg_from(state[name]))
        metrics.extra = {
            name: _avg_from(acc["numbers"]) if "numbers" in acc else _labels_from(acc["labels"])
            for name, acc in state["extra"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProfileError(f"not a shard profile's metrics state ({type(exc).__name__}: {exc})") from None
    return metrics


def shard_profile_state(profile: ShardProfile) -> dict[str, Any]:
    """A shard's profile (metrics, offending rows and their count) as JSON-compatible data."""
    return {
        "metrics": metrics_state(profile.metrics),
        "offending_count": profile.offending_count,
        "offending": [[o.record_index, o.error] for o in profile.offending],
    }


def shard_profile_from_state(split: str, shard_key: str, state: Any) -> ShardProfile:
    """The `ShardProfile` of shard `shard_key` of `split` that `shard_profile_state` described."""
    try:
        offending = [OffendingRow(split, shard_key, int(index), str(error)) for index, error in state["offending"]]
        count = int(state["offending_count"])
        metrics = state["metrics"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"not a shard profile state ({type(exc).__name__}: {exc})") from None
    return ShardProfile(split, shard_key, metrics_from_state(metrics), offending, count)
