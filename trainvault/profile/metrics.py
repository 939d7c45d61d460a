"""DatasetMetrics: what one split holds, computed per row and merged across shards.

For every row: ``number_of_examples``, ``number_of_tasks`` (distinct task ids) and
``json_dumped_number_of_words``. For rows in the OpenAI Responses shape
(``responses_create_params`` with ``input`` turns and ``tools``): ``number_of_turns``,
``number_of_tools`` and ``temperature``. A hook adds dataset-specific metrics.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from trainvault.errors import ProfileError
from trainvault.profile.accumulators import AvgMinMax, CategoricalMetrics, StringMetrics
from trainvault.publication.manifest import validate_name

ExtraValue = int | float | str | bool | None
#: ``hook(row) -> {name: value}``. Numbers feed an `AvgMinMax`, strings and bools a
#: `CategoricalMetrics` (bools as "true"/"false"); None observes nothing. A name keeps the
#: kind of its first value. The hook must be deterministic: its results are published.
ExtraMetricsHook = Callable[[Mapping[str, Any]], Mapping[str, ExtraValue]]

TASK_ID_FIELD = "task_id"


def _json_default(value: Any) -> Any:
    # msgpack and Parquet rows may carry bytes or arrays; they count as one opaque token.
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)}-bytes>"
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"a {type(value).__name__} value")


def _dumps(row: Mapping[str, Any], **options: Any) -> str:
    """``json.dumps(row)`` as the metrics count it; `ProfileError` for a row JSON cannot hold."""
    try:
        return json.dumps(row, default=_json_default, **options)
    except (TypeError, ValueError) as exc:
        raise ProfileError(
            f"a row is not JSON-compatible ({exc}); rows are profiled as JSON: store JSON values, bytes or arrays"
        ) from None


def json_dumped_number_of_words(row: Mapping[str, Any]) -> int:
    """Whitespace-separated words of ``json.dumps(row)`` (default separators, ASCII escapes).

    A size proxy that needs no tokenizer; escapes keep non-ASCII spaces inside one word.
    """
    return len(_dumps(row).split())


def task_identity(row: Mapping[str, Any], task_id_field: str = TASK_ID_FIELD) -> str:
    """The string that identifies a row's task: its ``task_id`` (a string or integer) when present,
    else the row's content, so identical rows (repeats) count as one task."""
    task_id = row.get(task_id_field)
    if isinstance(task_id, str):
        return "id:s:" + task_id
    if isinstance(task_id, int) and not isinstance(task_id, bool):
        return f"id:i:{task_id}"
    content = _dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "row:" + hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def _count_turns(input_: Any) -> int | None:
    """User turns in a Responses ``input``: a plain string is one turn; in a list, each
    message with role "user" is one (assistant, tool-call and tool-output items are not)."""
    if isinstance(input_, str):
        return 1
    if isinstance(input_, list):
        return sum(1 for item in input_ if isinstance(item, Mapping) and item.get("role") == "user")
    return None


class DatasetMetrics:
    """Metrics of one split (or of one shard before merging)."""

    def __init__(self, *, max_labels: int | None = None) -> None:
        self.number_of_examples = 0
        self._tasks = StringMetrics()
        self.json_dumped_number_of_words = AvgMinMax()
        self.number_of_responses_rows = 0  # rows with a well-formed responses_create_params
        self.number_of_turns = AvgMinMax()
        self.number_of_tools = AvgMinMax()
        self.temperature = AvgMinMax()
        # Checked now, not at the first label: a bad bound is refused even when no hook yields labels.
        self._max_labels = None if max_labels is None else CategoricalMetrics(max_labels).max_labels
        self.extra: dict[str, AvgMinMax | CategoricalMetrics] = {}

    @property
    def number_of_tasks(self) -> int:
        return self._tasks.unique_count

    def observe(
        self,
        row: Mapping[str, Any],
        *,
        hook: ExtraMetricsHook | None = None,
        task_id_field: str = TASK_ID_FIELD,
    ) -> None:
        """Add one row. Parts of ``responses_create_params`` that are not the documented
        shape are not observed (schema validation is where malformed rows are reported)."""
        if not isinstance(row, Mapping):
            raise ProfileError(f"a row must be a mapping, got {type(row).__name__}")
        self.number_of_examples += 1
        self._tasks.observe(task_identity(row, task_id_field))
        self.json_dumped_number_of_words.observe(json_dumped_number_of_words(row))
        params = row.get("responses_create_params")
        if isinstance(params, Mapping):
            turns = _count_turns(params.get("input"))
            if turns is not None:
                self.number_of_responses_rows += 1
                self.number_of_turns.observe(turns)
                tools = params.get("tools")
                self.number_of_tools.observe(len(tools) if isinstance(tools, list) else 0)
                temperature = params.get("temperature")
                if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
                    self.temperature.observe(temperature)
        if hook is not None:
            self._observe_extra(hook(row))

    def _observe_extra(self, values: Mapping[str, ExtraValue]) -> None:
        if not isinstance(values, Mapping):
            raise ProfileError(f"the extra-metrics hook must return a mapping, got {type(values).__name__}")
        for name, value in values.items():
            if value is None:
                continue
            validate_name("extra metric name", name)
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not numeric and not isinstance(value, (str, bool)):
                raise ProfileError(
                    f"extra metric {name!r}: value must be a number, string, bool or None, got {type(value).__name__}"
                )
            acc = self.extra.get(name)
            if acc is None:
                acc = self.extra[name] = AvgMinMax() if numeric else self._categorical()
            if isinstance(acc, AvgMinMax) != numeric:
                kind = "numbers" if isinstance(acc, AvgMinMax) else "labels"
                raise ProfileError(f"extra metric {name!r} held {kind} and now got {value!r}; a metric keeps one kind")
            if isinstance(acc, AvgMinMax) and isinstance(value, (int, float)):
                acc.observe(value)
            elif isinstance(acc, CategoricalMetrics) and isinstance(value, (str, bool)):
                acc.observe(("true" if value else "false") if isinstance(value, bool) else value)

    def _categorical(self) -> CategoricalMetrics:
        return CategoricalMetrics() if self._max_labels is None else CategoricalMetrics(self._max_labels)

    def merge(self, other: DatasetMetrics) -> DatasetMetrics:
        """Fold `other` (a later shard) into this one; returns self."""
        if not isinstance(other, DatasetMetrics):
            raise ProfileError(f"cannot merge {type(other).__name__} into DatasetMetrics")
        self.number_of_examples += other.number_of_examples
        self._tasks.merge(other._tasks)
        self.json_dumped_number_of_words.merge(other.json_dumped_number_of_words)
        self.number_of_responses_rows += other.number_of_responses_rows
        self.number_of_turns.merge(other.number_of_turns)
        self.number_of_tools.merge(other.number_of_tools)
        self.temperature.merge(other.temperature)
        for name, acc in other.extra.items():
            mine = self.extra.get(name)
            if mine is None:
                mine = self.extra[name] = AvgMinMax() if isinstance(acc, AvgMinMax) else self._categorical()
            if isinstance(mine, AvgMinMax) and isinstance(acc, AvgMinMax):
                mine.merge(acc)
                continue
            if isinstance(mine, CategoricalMetrics) and isinstance(acc, CategoricalMetrics):
                mine.merge(acc)
                continue
            raise ProfileError(
                f"extra metric {name!r} is numeric in one shard and labels in another; a metric keeps one kind"
            )
        return self

    def to_json(self) -> dict[str, Any]:
        """The published summary (JSON-compatible, canonical once serialised)."""
        return {
            "number_of_examples": self.number_of_examples,
            "number_of_tasks": self.number_of_tasks,
            "json_dumped_number_of_words": self.json_dumped_number_of_words.to_json(),
            "number_of_responses_rows": self.number_of_responses_rows,
            "number_of_turns": self.number_of_turns.to_json(),
            "number_of_tools": self.number_of_tools.to_json(),
            "temperature": self.temperature.to_json(),
            "extra": {name: acc.to_json() for name, acc in sorted(self.extra.items())},
        }

    def __repr__(self) -> str:
        return f"DatasetMetrics(examples={self.number_of_examples}, tasks={self.number_of_tasks})"
