"""Rollout samples as an archive stores them: keys, stored fields, metadata, and chunks.

`encode_samples` turns samples into content-addressed chunks before anything is written,
so bad input leaves nothing on storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from trainvault.canonical import canonical_json, loads_strict
from trainvault.errors import EncodeError, ManifestError
from trainvault.formats import get_format
from trainvault.formats.blocks import DEFAULT_BLOCK_BYTES, encode_shard
from trainvault.rollouts.documents import ArchiveChunk, ArchiveEntry

#: The shard format of archive chunks.
FORMAT = "msgpack.zst"
#: Per-sample metadata lives in the index; this keeps an index inspectable.
MAX_METADATA_BYTES = 4096

Sample = dict[str, Any]


def strip_transport(sample: Mapping[str, Any]) -> Sample:
    """The archivable fields: names starting with ``_`` are live transport state, never stored."""
    return {k: v for k, v in sample.items() if not (isinstance(k, str) and k.startswith("_"))}


def sample_key_of(sample: Mapping[str, Any], offset: int) -> str:
    """``sample:<index>`` when the sample has an index, else ``position:<offset>``."""
    index = sample.get("index")
    if index is None:
        return f"position:{offset}"
    if isinstance(index, bool) or not isinstance(index, (int, str)) or index == "":
        raise EncodeError(f"sample {offset}: field 'index' must be an int or a non-empty str, got {index!r}")
    return f"sample:{index}"


def default_task_key(sample: Mapping[str, Any]) -> str | None:
    """The sample's ``task_id`` field (ints become strings), or None."""
    task = sample.get("task_id")
    if task is None:
        return None
    if isinstance(task, bool) or not isinstance(task, (int, str)):
        raise EncodeError(f"field 'task_id' must be an int or a str, got {task!r}")
    return str(task)


def describe_sample(sample: Mapping[str, Any]) -> dict[str, Any]:
    """Default per-sample metadata: index, task, reward (finite numbers only), status and the
    lengths of list and array fields."""
    reward = sample.get("reward")
    if reward is not None and not isinstance(reward, bool) and hasattr(reward, "__float__"):
        reward = float(reward)
        reward = reward if math.isfinite(reward) else None
    else:
        reward = None
    status = sample.get("status")
    status = getattr(status, "value", status)  # enums record their value
    lengths = {}
    for name, value in sample.items():
        if isinstance(value, (list, tuple)):
            lengths[name] = len(value)
        elif hasattr(value, "shape") and hasattr(value, "dtype") and len(value.shape) >= 1:
            lengths[name] = int(value.shape[0])
    index = sample.get("index")
    return {
        "index": index if isinstance(index, (int, str)) and not isinstance(index, bool) else None,
        "task": default_task_key(sample),
        "reward": reward,
        "status": None if status is None else str(status),
        "lengths": lengths,
    }


def checked_metadata(value: Any, offset: int) -> dict[str, Any]:
    """`describe_sample`'s result for sample `offset`, checked: a small JSON object."""
    if not isinstance(value, Mapping):
        raise EncodeError(f"sample {offset}: describe_sample returned a {type(value).__name__}, not a mapping")
    try:
        data = canonical_json(dict(value))
    except (TypeError, ValueError) as exc:  # ManifestError too: nested past the recursion limit
        raise EncodeError(f"sample {offset}: metadata must be JSON-compatible (no NaN): {exc}") from None
    if len(data) > MAX_METADATA_BYTES:
        raise EncodeError(
            f"sample {offset}: metadata is {len(data)} bytes, over {MAX_METADATA_BYTES}; metadata is for "
            "inspection, so return fewer or shorter fields"
        )
    try:
        metadata: dict[str, Any] = loads_strict(data, source=f"sample {offset} metadata")
    except ManifestError as exc:  # nested deeper than a document may be
        raise EncodeError(str(exc)) from None
    return metadata


def batches(samples: Iterable[Any], size: int) -> Iterator[tuple[int, list[Any]]]:
    if isinstance(samples, (str, bytes, Mapping)):
        raise EncodeError(f"samples must be an iterable of mappings, got a {type(samples).__name__}")
    try:
        it = iter(samples)
    except TypeError:
        raise EncodeError(f"samples must be an iterable of mappings, got a {type(samples).__name__}") from None
    batch: list[Any] = []
    start = 0
    for sample in it:
        batch.append(sample)
        if len(batch) == size:
            yield start, batch
            start += size
            batch = []
    if batch:
        yield start, batch


@dataclass
class EncodedSamples:
    """An archive's samples, encoded: index entries, per-sample metadata (or None), chunk
    descriptors, and each distinct chunk's bytes by sha256."""

    entries: list[ArchiveEntry]
    metadata: list[dict[str, Any]] | None
    chunks: list[ArchiveChunk]
    payloads: dict[str, bytearray]


def encode_samples(
    uri: str,
    samples: Iterable[Mapping[str, Any]],
    chunk_size: int,
    describe: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None,
    task_key: Callable[[Mapping[str, Any]], str | None],
) -> EncodedSamples:
    """Encode `samples` in chunks of `chunk_size` for the archive at `uri` (`EncodeError` for bad samples)."""
    out = EncodedSamples([], [] if describe is not None else None, [], {})
    for start, batch in batches(samples, chunk_size):
        clean = [
            _stored(uri, start + k, sample, len(out.chunks), k, describe, task_key, out)
            for k, sample in enumerate(batch)
        ]
        name = f"rollout archive {uri}: chunk {len(out.chunks)} (samples {start}-{start + len(batch) - 1})"
        encoded = encode_shard(get_format(FORMAT), clean, block_bytes=DEFAULT_BLOCK_BYTES, name=name)
        out.chunks.append(
            ArchiveChunk(
                sha256=encoded.sha256,
                size_bytes=len(encoded.data),
                sample_count=encoded.record_count,
                blocks=encoded.blocks,
            )
        )
        out.payloads.setdefault(encoded.sha256, encoded.data)
    return out


def _stored(
    uri: str,
    offset: int,
    sample: Any,
    chunk: int,
    k: int,
    describe: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None,
    task_key: Callable[[Mapping[str, Any]], str | None],
    out: EncodedSamples,
) -> Sample:
    """Sample `offset`'s stored fields; its entry (chunk `chunk`, row `k`) and metadata go to `out`."""
    if not isinstance(sample, Mapping):
        raise EncodeError(
            f"rollout archive {uri}: sample {offset} is a {type(sample).__name__}, not a mapping; "
            "samples are dicts of fields"
        )
    try:
        key = sample_key_of(sample, offset)
        task = task_key(sample)
    except EncodeError as exc:
        raise EncodeError(f"rollout archive {uri}: sample {offset}: {exc}") from None
    if task is not None and not isinstance(task, str):
        raise EncodeError(f"rollout archive {uri}: sample {offset}: task_key returned {task!r}, not a str")
    out.entries.append(ArchiveEntry(sample_key=key, task_key=task, chunk=chunk, offset=k))
    stored = strip_transport(sample)
    if out.metadata is not None and describe is not None:
        try:
            out.metadata.append(checked_metadata(describe(stored), offset))
        except EncodeError as exc:
            raise EncodeError(f"rollout archive {uri}: {exc}") from None
    return stored
