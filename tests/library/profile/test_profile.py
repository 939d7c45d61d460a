"""Dataset profiles: accumulators, metrics of chat and agent rows, sidecars, validation modes, repeats."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from trainvault import ConflictError, IntegrityError, ManifestError, SelectionError
from trainvault.derivation import SourceDataset, collate_sources
from trainvault.derivation.repeats import resolve_num_repeats
from trainvault.errors import ProfileError, TaskDataValidationError
from trainvault.profile import (
    MetricsSidecar,
    approval_sidecars,
    profile_publication,
    read_metrics_sidecar,
    write_metrics_sidecars,
)
from trainvault.profile.accumulators import MAX_CATEGORICAL_LABELS, AvgMinMax, CategoricalMetrics, StringMetrics
from trainvault.profile.metrics import DatasetMetrics
from trainvault.profile.sidecar import sidecar_uri
from trainvault.profile.validation import TaskDataValidator
from trainvault.publication.manifest import MANIFEST_NAME
from trainvault.publication.saver import DatasetSaver
from trainvault.storage import Storage

# -- realistic rows -----------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}
SEARCH_TOOL = {
    "type": "function",
    "name": "search_docs",
    "description": "Search the product documentation.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    "strict": True,
}
CALC_TOOL = {
    "type": "function",
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    "strict": True,
}


def chat_row(i: int) -> dict[str, Any]:
    """A multi-turn chat row: system prompt, then 1-3 user turns with assistant replies between."""
    turns = 1 + i % 3
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful math tutor."}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"Question {t} of task {i}: what is {i} + {t}?"})
        if t < turns - 1:
            messages.append({"role": "assistant", "content": f"It is {i + t}."})
    return {
        "task_id": f"chat-{i}",
        "responses_create_params": {"input": messages, "temperature": [0.0, 0.7, 1.0][i % 3]},
        "expected_answer": str(i + turns - 1),
        "domain": "math",
    }


def agent_row(i: int) -> dict[str, Any]:
    """An agent row: tools, a user turn, a function call and its output, and a follow-up user turn."""
    tools = [WEATHER_TOOL, SEARCH_TOOL, CALC_TOOL][: 1 + i % 3]
    return {
        "task_id": f"agent-{i}",
        "responses_create_params": {
            "input": [
                {"role": "developer", "content": "Use tools when they help."},
                {"role": "user", "content": f"What's the weather in city {i}?"},
                {
                    "type": "function_call",
                    "call_id": f"c{i}",
                    "name": "get_weather",
                    "arguments": json.dumps({"city": f"city {i}"}),
                },
                {"type": "function_call_output", "call_id": f"c{i}", "output": "sunny, 21 C"},
                {"role": "user", "content": "And tomorrow?"},
            ],
            "tools": tools,
            "temperature": 0.6,
            "parallel_tool_calls": False,
        },
        "domain": "agent",
    }


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant"] | None = None


class ResponsesParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    input: list[dict[str, Any]]
    tools: list[dict[str, Any]] = []
    temperature: float | None = None


class TaskRow(BaseModel):
    """The task-data schema of the test dataset."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    responses_create_params: ResponsesParams
    domain: Literal["math", "agent"]


def publish(root: Path, splits: dict[str, list[list[dict[str, Any]]]], data_format: str = "msgpack.zst") -> str:
    """Save `splits` (split -> shards -> rows) and commit; returns the manifest URI."""
    uri = str(root / MANIFEST_NAME)
    saver = DatasetSaver(Storage(), uri, data_format=data_format, block_bytes=2048)
    for split, shards in splits.items():
        for n, rows in enumerate(shards):
            saver.save(split, None, rows, shard_id=str(n))
    saver.commit_manifest()
    return uri


@pytest.fixture()
def storage() -> Storage:
    return Storage()


# -- accumulators -----------------------------------------------------------------

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
numbers = st.one_of(finite, st.integers(min_value=-(10**6), max_value=10**6))


def split_at(values: list[Any], cuts: list[int]) -> list[list[Any]]:
    points = sorted({min(c, len(values)) for c in cuts})
    out, start = [], 0
    for p in [*points, len(values)]:
        out.append(values[start:p])
        start = p
    return out


@settings(max_examples=150, deadline=None)
@given(values=st.lists(numbers, max_size=60), cuts=st.lists(st.integers(0, 60), max_size=6))
def test_avgminmax_merge_equals_single_pass(values: list[float], cuts: list[int]) -> None:
    single = AvgMinMax()
    for v in values:
        single.observe(v)
    merged = AvgMinMax()
    for part in split_at(values, cuts):
        acc = AvgMinMax()
        for v in part:
            acc.observe(v)
        merged.merge(acc)
    assert merged.count == single.count == len(values)
    assert merged.min == single.min and merged.max == single.max
    if values:
        scale = max(1.0, max(abs(v) for v in values))
        assert math.isclose(merged.mean, single.mean, rel_tol=1e-9, abs_tol=1e-9 * scale)
        assert math.isclose(merged.mean, statistics.fmean(values), rel_tol=1e-9, abs_tol=1e-9 * scale)
        assert math.isclose(merged.stddev, statistics.pstdev(values), rel_tol=1e-6, abs_tol=1e-6 * scale)
        assert math.isclose(merged.stddev, single.stddev, rel_tol=1e-6, abs_tol=1e-6 * scale)
    else:
        assert merged.to_json() == {"count": 0, "mean": None, "min": None, "max": None, "stddev": None}


def test_avgminmax_is_stable_far_from_zero() -> None:
    # sum/sum-of-squares would lose every digit here; Welford and Chan keep them.
    acc, parts = AvgMinMax(), [AvgMinMax(), AvgMinMax()]
    values = [1e9 + x for x in (4.0, 7.0, 13.0, 16.0)]
    for i, v in enumerate(values):
        acc.observe(v)
        parts[i % 2].observe(v)
    assert acc.stddev == pytest.approx(statistics.pstdev([4, 7, 13, 16]), rel=1e-9)
    assert parts[0].merge(parts[1]).stddev == pytest.approx(acc.stddev, rel=1e-9)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "3", None])
def test_avgminmax_refuses_non_finite_and_non_numbers(bad: Any) -> None:
    with pytest.raises(ProfileError):
        AvgMinMax().observe(bad)


labels = st.text(alphabet="abcdefghij", min_size=1, max_size=2)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(labels, max_size=80),
    cuts=st.lists(st.integers(0, 80), max_size=6),
    bound=st.sampled_from([3, 10, MAX_CATEGORICAL_LABELS]),
)
def test_categorical_and_string_merge_equals_single_pass(values: list[str], cuts: list[int], bound: int) -> None:
    single, single_s = CategoricalMetrics(bound), StringMetrics()
    for v in values:
        single.observe(v)
        single_s.observe(v)
    parts = split_at(values, cuts)
    merged, merged_s = CategoricalMetrics(bound), StringMetrics()
    # Merge in reverse order too: the kept labels and their counts do not depend on it.
    for part in reversed(parts):
        acc, acc_s = CategoricalMetrics(bound), StringMetrics()
        for v in part:
            acc.observe(v)
            acc_s.observe(v)
        merged.merge(acc)
        merged_s.merge(acc_s)
    assert merged.to_json() == single.to_json()
    assert merged_s.to_json() == single_s.to_json() == {"total_count": len(values), "unique_count": len(set(values))}
    exact = {label: values.count(label) for label in sorted(set(values))[:bound]}
    assert single.counts == exact
    assert single.other_count == len(values) - sum(exact.values())


def test_categorical_overflow_is_bounded() -> None:
    acc = CategoricalMetrics()
    labels_seen = [f"label-{n:03d}" for n in range(150)]
    for n, label in enumerate(labels_seen):
        for _ in range(1 + n % 4):
            acc.observe(label)
    out = acc.to_json()
    assert len(out["counts"]) == MAX_CATEGORICAL_LABELS
    assert list(out["counts"]) == labels_seen[:MAX_CATEGORICAL_LABELS]  # the labels that sort first
    assert out["unique_count"] == 150
    assert out["total_count"] == sum(1 + n % 4 for n in range(150))
    assert out["other_count"] == sum(1 + n % 4 for n in range(100, 150))
    assert sum(out["counts"].values()) + out["other_count"] == out["total_count"]
    with pytest.raises(ProfileError):
        acc.merge(CategoricalMetrics(10))


def rows_strategy() -> st.SearchStrategy[list[dict[str, Any]]]:
    row = st.builds(
        lambda i, kind, extra: {**(chat_row(i) if kind == "chat" else agent_row(i)), "score": extra},
        st.integers(0, 20),
        st.sampled_from(["chat", "agent"]),
        st.integers(0, 5),
    )
    return st.lists(row, max_size=30)


def hook(row: dict[str, Any]) -> dict[str, Any]:
    return {"score": row.get("score"), "domain": row.get("domain"), "has_answer": "expected_answer" in row}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy(), cuts=st.lists(st.integers(0, 30), max_size=4))
def test_dataset_metrics_merge_equals_single_pass(rows: list[dict[str, Any]], cuts: list[int]) -> None:
    single = DatasetMetrics()
    for r in rows:
        single.observe(r, hook=hook)
    merged = DatasetMetrics()
    for part in split_at(rows, cuts):
        acc = DatasetMetrics()
        for r in part:
            acc.observe(r, hook=hook)
        merged.merge(acc)
    a, b = merged.to_json(), single.to_json()
    assert a["number_of_examples"] == b["number_of_examples"] == len(rows)
    assert a["number_of_tasks"] == b["number_of_tasks"] == len({r["task_id"] for r in rows})
    for key in ("json_dumped_number_of_words", "number_of_turns", "number_of_tools", "temperature"):
        for stat in ("count", "min", "max"):
            assert a[key][stat] == b[key][stat]
        if b[key]["count"]:
            assert a[key]["mean"] == pytest.approx(b[key]["mean"], rel=1e-12)
            assert a[key]["stddev"] == pytest.approx(b[key]["stddev"], rel=1e-6, abs=1e-9)
    assert a["extra"].keys() == b["extra"].keys()
    for name in ("domain", "has_answer"):
        assert a["extra"].get(name) == b["extra"].get(name)


def test_chat_and_agent_metrics_are_exact() -> None:
    rows = [chat_row(i) for i in range(6)] + [agent_row(i) for i in range(3)]
    m = DatasetMetrics()
    for r in rows:
        m.observe(r, hook=hook)
    out = m.to_json()
    assert out["number_of_examples"] == 9 and out["number_of_tasks"] == 9 and out["number_of_responses_rows"] == 9
    chat_turns = [1 + i % 3 for i in range(6)]
    turns = [*chat_turns, 2, 2, 2]  # an agent row has two user turns; function calls are not turns
    assert out["number_of_turns"]["mean"] == pytest.approx(statistics.fmean(turns))
    assert (out["number_of_turns"]["min"], out["number_of_turns"]["max"]) == (1, 3)
    tools = [0] * 6 + [1, 2, 3]
    assert out["number_of_tools"]["mean"] == pytest.approx(statistics.fmean(tools))
    assert out["number_of_tools"]["stddev"] == pytest.approx(statistics.pstdev(tools))
    temps = [[0.0, 0.7, 1.0][i % 3] for i in range(6)] + [0.6] * 3
    assert out["temperature"]["count"] == 9
    assert out["temperature"]["mean"] == pytest.approx(statistics.fmean(temps))
    assert out["temperature"]["stddev"] == pytest.approx(statistics.pstdev(temps))
    words = [len(json.dumps(r).split()) for r in rows]
    assert out["json_dumped_number_of_words"]["max"] == max(words)
    assert out["json_dumped_number_of_words"]["mean"] == pytest.approx(statistics.fmean(words))
    assert out["extra"]["domain"]["counts"] == {"agent": 3, "math": 6}
    assert out["extra"]["has_answer"]["counts"] == {"false": 3, "true": 6}
    # A row without responses_create_params still counts as an example and a task (by content).
    m.observe({"text": "plain pretraining text"})
    m.observe({"text": "plain pretraining text"})
    assert (m.number_of_examples, m.number_of_tasks, m.number_of_responses_rows) == (11, 10, 9)


def test_extra_metric_keeps_one_kind() -> None:
    m = DatasetMetrics()
    m.observe({"a": 1}, hook=lambda r: {"x": 1.5})
    with pytest.raises(ProfileError, match="'x'"):
        m.observe({"a": 2}, hook=lambda r: {"x": "label"})


# -- profiles and sidecars ----------------------------------------------------------


def test_profile_publication_writes_sidecars_bound_by_digest(tmp_path: Path, storage: Storage) -> None:
    uri = publish(
        tmp_path / "pub",
        {
            "train": [[chat_row(i) for i in range(40)], [agent_row(i) for i in range(25)], []],
            "valid": [[chat_row(i) for i in range(100, 110)]],
        },
    )
    profile = profile_publication(storage, uri, schema=TaskRow, validation="warn", hook=hook, workers=3)
    assert profile.offending_count == 0
    train = profile.splits["train"]
    assert train.shards == ["_/0", "_/1", "_/2"] and train.records == 65
    assert train.metrics.number_of_tasks == 65

    # One pass over all rows gives the same numbers as the per-shard merge.
    single = DatasetMetrics()
    for r in [chat_row(i) for i in range(40)] + [agent_row(i) for i in range(25)]:
        single.observe(r, hook=hook)
    assert train.metrics.to_json()["number_of_turns"] == pytest.approx(single.to_json()["number_of_turns"])

    refs = write_metrics_sidecars(storage, profile)
    assert set(refs) == {"train", "valid"} and all(r.written for r in refs.values())
    assert refs["train"].uri == sidecar_uri(uri, "train")
    assert refs["train"].uri.endswith("/pub/train_metrics.json")
    doc = read_metrics_sidecar(storage, refs["train"].uri, refs["train"].sha256)
    assert doc.data_manifest_sha256 == profile.manifest_sha256
    assert doc.metrics["number_of_examples"] == 65
    assert doc.validation.mode == "warn" and doc.validation.schema_ref.endswith(":TaskRow")
    assert MetricsSidecar.from_json_bytes(doc.to_json_bytes()) == doc

    # Profiling again gives the same bytes: nothing is written, the digests are unchanged.
    again = write_metrics_sidecars(
        storage, profile_publication(storage, uri, schema=TaskRow, validation="warn", hook=hook)
    )
    assert {s: r.sha256 for s, r in again.items()} == {s: r.sha256 for s, r in refs.items()}
    assert not any(r.written for r in again.values())

    sidecars = approval_sidecars(refs)
    assert sidecars == {"train_metrics": refs["train"].artifact(), "valid_metrics": refs["valid"].artifact()}

    with pytest.raises(IntegrityError):
        read_metrics_sidecar(storage, refs["train"].uri, "0" * 64)
    with pytest.raises(IntegrityError):
        profile_publication(storage, uri, manifest_sha256="0" * 64)
    with pytest.raises(SelectionError, match="published splits"):
        profile_publication(storage, uri, splits=["nope"])


def test_sidecar_conflict_names_differing_keys(tmp_path: Path, storage: Storage) -> None:
    uri = publish(tmp_path / "pub", {"train": [[chat_row(i) for i in range(12)]], "valid": [[chat_row(50)]]})
    first = write_metrics_sidecars(storage, profile_publication(storage, uri))
    changed = profile_publication(storage, uri, hook=lambda r: {"domain": r["domain"]})
    with pytest.raises(ConflictError) as info:
        write_metrics_sidecars(storage, changed)
    message = str(info.value)
    assert "train_metrics.json" in message and "metrics.extra.domain.counts.math" in message
    assert "overwrite=True" in message
    # Nothing was replaced.
    assert read_metrics_sidecar(storage, first["train"].uri, first["train"].sha256)

    replaced = write_metrics_sidecars(storage, changed, overwrite=True)
    assert replaced["train"].written and replaced["train"].sha256 != first["train"].sha256
    with pytest.raises(IntegrityError):
        read_metrics_sidecar(storage, first["train"].uri, first["train"].sha256)


# -- validation modes -----------------------------------------------------------------


def bad_rows() -> list[dict[str, Any]]:
    rows = [chat_row(i) for i in range(8)]
    rows[2] = {**rows[2], "domain": "poetry"}  # not an allowed domain
    del rows[5]["task_id"]  # required field missing
    return rows


def publish_with_bad_rows(root: Path) -> str:
    return publish(root, {"train": [[agent_row(i) for i in range(4)], bad_rows()], "valid": [[chat_row(99)]]})


def test_validation_warn_records_offending_rows(tmp_path: Path, storage: Storage) -> None:
    uri = publish_with_bad_rows(tmp_path / "pub")
    profile = profile_publication(storage, uri, schema=TaskRow, validation="warn")
    assert profile.offending_count == 2
    coords = [(o.split, o.shard_key, o.record_index) for o in profile.offending]
    assert coords == [("train", "_/1", 2), ("train", "_/1", 5)]
    assert "domain" in profile.offending[0].error and "task_id" in profile.offending[1].error
    refs = write_metrics_sidecars(storage, profile)
    doc = read_metrics_sidecar(storage, refs["train"].uri)
    assert doc.validation.offending_count == 2
    assert doc.validation.offending_rows[0] == {
        "split": "train",
        "shard_key": "_/1",
        "record_index": 2,
        "error": profile.offending[0].error,
    }
    assert read_metrics_sidecar(storage, refs["valid"].uri).validation.offending_count == 0


def test_validation_error_fails_and_publishes_nothing(tmp_path: Path, storage: Storage) -> None:
    uri = publish_with_bad_rows(tmp_path / "pub")
    with pytest.raises(TaskDataValidationError, match=r"2 row\(s\).*train/_/1 record 2"):
        profile_publication(storage, uri, schema=TaskRow, validation="error")
    # auto with a schema is error mode.
    with pytest.raises(TaskDataValidationError):
        profile_publication(storage, uri, schema=f"{__name__}:TaskRow", validation="auto")
    assert not storage.exists(sidecar_uri(uri, "train"))
    # Deferred: the profile is computed, the caller decides (the Dagster check does this).
    profile = profile_publication(storage, uri, schema=TaskRow, validation="error", raise_on_invalid=False)
    assert profile.validator.mode == "error" and profile.offending_count == 2
    with pytest.raises(TaskDataValidationError):
        profile.raise_if_invalid()


def test_validation_off_and_auto_without_schema(tmp_path: Path, storage: Storage) -> None:
    uri = publish_with_bad_rows(tmp_path / "pub")
    for mode, schema in (("off", TaskRow), ("auto", None)):
        profile = profile_publication(storage, uri, schema=schema, validation=mode)
        assert profile.offending_count == 0 and profile.validator.mode == "off"
    with pytest.raises(ProfileError, match="needs a schema"):
        TaskDataValidator(None, "warn")
    with pytest.raises(ProfileError, match="needs a schema"):
        TaskDataValidator(None, "error")
    with pytest.raises(ProfileError, match="not one of"):
        TaskDataValidator(TaskRow, "strict")
    with pytest.raises(ProfileError, match="cannot be imported"):
        TaskDataValidator("no_such_module:Row", "auto")


# -- repeats ------------------------------------------------------------------------


def test_collate_sources_with_num_repeats(tmp_path: Path, storage: Storage) -> None:
    chat_uri = publish(
        tmp_path / "chat", {"train": [[chat_row(i) for i in range(5)], [chat_row(i) for i in range(5, 8)]]}
    )
    agent_uri = publish(tmp_path / "agent", {"train": [[agent_row(i) for i in range(4)]], "valid": [[agent_row(9)]]})
    sources = [
        SourceDataset("chat", chat_uri, "train", into="train"),
        SourceDataset("agent", agent_uri, "train", into="train"),
        SourceDataset("agent-valid", agent_uri, "valid", into="valid"),
    ]
    num_repeats = {"chat": 3, "train": 2}  # chat by name; agent by its target split; valid: 1
    assert resolve_num_repeats(sources, num_repeats) == {"chat": 3, "agent": 2, "agent-valid": 1}

    out_uri = str(tmp_path / "mix" / MANIFEST_NAME)
    saver = DatasetSaver(storage, out_uri)
    collated = collate_sources(saver, sources, num_repeats=num_repeats)
    assert [(c.source, c.source_shard_key, c.num_repeats, c.entry.key) for c in collated] == [
        ("chat", "_/0", 3, "_/chat._.0"),
        ("chat", "_/1", 3, "_/chat._.1"),
        ("agent", "_/0", 2, "_/agent._.0"),
        ("agent-valid", "_/0", 1, "_/agent-valid._.0"),
    ]
    manifest = saver.commit_manifest().document
    assert manifest.splits["train"].record_count == 8 * 3 + 4 * 2

    profile = profile_publication(storage, out_uri, schema=TaskRow, validation="auto")
    train = profile.splits["train"].metrics
    assert (train.number_of_examples, train.number_of_tasks) == (32, 12)
    # Repeats are adjacent: each task's copies sit together.
    from trainvault.publication.reader import iter_shard

    first = [r["task_id"] for r in iter_shard(manifest.data_format, manifest.splits["train"].shard("_/chat._.0"))]
    assert first[:6] == ["chat-0"] * 3 + ["chat-1"] * 3

    # A rerun reuses every shard; other repeat counts are refused, not mixed in.
    assert [c.entry for c in collate_sources(DatasetSaver(storage, out_uri), sources, num_repeats=num_repeats)] == [
        c.entry for c in collated
    ]
    with pytest.raises(ConflictError):
        collate_sources(DatasetSaver(storage, out_uri), sources, num_repeats=4)


def test_num_repeats_refuses_unknown_keys_and_bad_counts(tmp_path: Path) -> None:
    sources = [SourceDataset("chat", str(tmp_path / MANIFEST_NAME), "train", into="train")]
    with pytest.raises(ManifestError, match="trian"):
        resolve_num_repeats(sources, {"trian": 2})
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ManifestError):
            resolve_num_repeats(sources, bad)
    with pytest.raises(ManifestError, match="twice"):
        resolve_num_repeats(sources * 2, 2)


def test_approval_request_binds_profile_sidecars(tmp_path: Path, storage: Storage) -> None:
    approval = pytest.importorskip("trainvault.approval")
    uri = publish(tmp_path / "pub", {"train": [[chat_row(i) for i in range(3)]]})
    refs = write_metrics_sidecars(storage, profile_publication(storage, uri))
    ref = {"uri": uri, "sha256": "a" * 64}
    request = approval.ApprovalRequest.model_validate(
        {
            "data_manifest": ref,
            "training_scan_manifest": ref,
            "evaluation_release": ref,
            "contamination_report": ref,
            "verifier_contract": ref,
            "producer_pins": ref,
            "sidecars": approval_sidecars(refs),
        }
    )
    assert request.bindings()["train_metrics"].sha256 == refs["train"].sha256


def test_import_trainvault_profile_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, trainvault, trainvault.profile; print(sorted(m for m in ('dagster','torch','numpy','pyarrow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
