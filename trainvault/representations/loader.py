"""Reading a representation publication: verified, selective, and handing out owned tensors.

Custody, in order: the final manifest must match the caller's sha256 (nothing else is
read otherwise); each selected index is read only at the etag the manifest pins and must
match its sha256 and size; the artifact manifest must match the sha256 its index binds;
each artifact must match its entry's size and sha256, and its header the entry, before
any row is copied out of it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainvault.errors import IntegrityError, ObjectTooLargeError, SelectionError
from trainvault.extras import require
from trainvault.representations import artifact
from trainvault.representations.documents import (
    ArtifactEntry,
    ArtifactManifest,
    IndexBlock,
    RepresentationIndex,
    RepresentationManifest,
    SourceEntry,
    artifact_id,
)
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import join_uri, normalize_uri, parent_uri

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, eq=False)
class RepresentationExample:
    """One block's tokens joined to the teacher's projected states at one layer.

    `input_ids` int32[T] and `states` [T, dim] own their memory (no view of an artifact).
    `states_sha256` is the SHA-256 of the verified states artifact the rows were copied from.
    """

    source: str
    block_id: int
    input_ids: torch.Tensor
    states: torch.Tensor
    teacher_layer: int
    state_kind: str
    states_sha256: str


@dataclass(frozen=True)
class _Run:
    """Consecutive selected blocks of one source that live in one part."""

    source: str
    blocks: list[IndexBlock]
    part_blocks: list[IndexBlock]  # every index block of the part, to check the artifact's tables
    tokens: ArtifactEntry
    states: ArtifactEntry
    index_uri: str
    artifact_manifest_uri: str


def _read_pinned(
    storage: Storage, uri: str, sha256: str, size: int | None, bound_by: str, etag: str | None = None
) -> Any:
    """The object's bytes, after checking them against what `bound_by` pins (a document
    without a pinned size is read under `StorageConfig.max_document_bytes`)."""
    try:
        data = storage.get(uri, if_match=etag, max_bytes=storage.config.max_document_bytes if size is None else size)
    except ObjectTooLargeError as exc:
        if size is None:
            raise
        raise IntegrityError(
            f"{uri}: more than {size} bytes, but {bound_by} says {size} (extended, truncated or replaced)"
        ) from exc
    except IntegrityError as exc:
        if etag is None:
            raise
        raise IntegrityError(
            f"{uri}: the store no longer holds the version {bound_by} pins (etag {etag}); it was rewritten "
            "after publication, even if with equal bytes. Republish, or ask the publisher"
        ) from exc
    view = memoryview(data).cast("B")
    if size is not None and view.nbytes != size:
        raise IntegrityError(f"{uri}: {view.nbytes} bytes, but {bound_by} says {size} (truncated or replaced)")
    got = hashlib.sha256(view).hexdigest()
    if got != sha256:
        raise IntegrityError(f"{uri}: sha256 {got} does not match {sha256}, pinned by {bound_by}; refusing it")
    return data


def _tables_match(index_blocks: list[IndexBlock], parsed: artifact.ParsedArtifact) -> bool:
    return (
        parsed.block_ids == [b.block_id for b in index_blocks]
        and parsed.row_offsets[:-1] == [b.row_start for b in index_blocks]
        and [b - a for a, b in zip(parsed.row_offsets, parsed.row_offsets[1:], strict=False)]
        == [b.token_count for b in index_blocks]
    )


def _copy_rows(
    storage: Storage, root: str, entry: ArtifactEntry, run: _Run, tables: tuple[list[int], list[int]] | None
) -> tuple[list[Any], tuple[list[int], list[int]]]:
    """Read, verify and parse one artifact; return fresh copies of the run's rows and its block tables.

    The artifact buffer and every view into it are locals: they are freed when this returns.
    """
    uri = join_uri(root, entry.uri)
    data = _read_pinned(storage, uri, entry.sha256, entry.size_bytes, f"artifact manifest {run.artifact_manifest_uri}")
    parsed = artifact.parse(memoryview(data).cast("B"), entry, uri)
    if tables is not None and (parsed.block_ids, parsed.row_offsets) != tables:
        raise IntegrityError(
            f"{uri}: its block tables differ from those of the part's tokens artifact, so its rows would not "
            "align with the tokens; the publication is inconsistent"
        )
    if not _tables_match(run.part_blocks, parsed):
        raise IntegrityError(
            f"{uri}: its block tables (block ids, rows per block) do not match {run.index_uri} for {entry.part}: "
            "an index token_count or row_start differs from the artifact's rows; the publication is inconsistent"
        )
    rows = [parsed.data[b.row_start : b.row_start + b.token_count].clone() for b in run.blocks]
    return rows, (parsed.block_ids, parsed.row_offsets)


def _load_run(storage: Storage, root: str, run: _Run, layer: int, kind: str) -> list[RepresentationExample]:
    tokens, tables = _copy_rows(storage, root, run.tokens, run, None)
    states, _ = _copy_rows(storage, root, run.states, run, tables)
    return [
        RepresentationExample(run.source, b.block_id, t, s, layer, kind, run.states.sha256)
        for b, t, s in zip(run.blocks, tokens, states, strict=False)
    ]


def iter_representation_examples(
    storage: StorageSource,
    manifest_uri: str,
    manifest_sha256: str,
    *,
    split: str,
    sources: Sequence[str],
    per_source_count: int,
    teacher_layer: int,
    state_kind: str,
) -> Iterator[RepresentationExample]:
    """Verify the publication pinned by `manifest_sha256` and yield the selected examples.

    Sources in caller order; per source its first `per_source_count` blocks by ascending
    block id. The selection and every index are checked before this returns (errors
    raise here); artifacts are read as the iterator advances, one at a time.
    """
    storage = storage_of(storage)
    require("torch", "representation")
    _check_request(sources, per_source_count)
    manifest_uri = normalize_uri(manifest_uri)
    data = _read_pinned(storage, manifest_uri, manifest_sha256, None, "the caller")
    manifest = RepresentationManifest.from_json_bytes(bytes(data), source=manifest_uri)
    _check_selection(manifest, manifest_uri, split, sources, per_source_count, teacher_layer, state_kind)
    # Every index and artifact manifest is verified, and every run planned, before any artifact is read.
    planner = _Planner(storage, manifest, manifest_uri, split, teacher_layer, state_kind)
    plan = [run for source in sources for run in planner.runs(source, per_source_count)]
    return _examples(storage, planner.root, plan, teacher_layer, state_kind)


def _examples(storage: Storage, root: str, plan: list[_Run], layer: int, kind: str) -> Iterator[RepresentationExample]:
    for run in plan:
        batch = _load_run(storage, root, run, layer, kind)
        batch.reverse()
        while batch:
            # Popped, so an example the caller has dropped is not kept alive here.
            yield batch.pop()


def _check_request(sources: Sequence[str], per_source_count: int) -> None:
    """The caller's sources and count are well formed (before anything is read)."""
    if isinstance(sources, (str, bytes)) or not isinstance(sources, Sequence) or not sources:
        raise SelectionError(f"sources must be a non-empty list of source names, got {sources!r}")
    repeated = sorted({s for s in sources if list(sources).count(s) > 1})
    if repeated:
        raise SelectionError(f"sources {repeated} are repeated; name each source once")
    if type(per_source_count) is not int or per_source_count < 1:
        raise SelectionError(f"per_source_count must be an integer >= 1, got {per_source_count!r}")


def _check_selection(
    manifest: RepresentationManifest,
    manifest_uri: str,
    split: str,
    sources: Sequence[str],
    per_source_count: int,
    teacher_layer: int,
    state_kind: str,
) -> None:
    """Everything selected is published, with enough blocks per source."""
    if split not in manifest.splits:
        raise SelectionError(f"split {split!r} is not in {manifest_uri}; published splits: {sorted(manifest.splits)}")
    published = manifest.splits[split].sources
    unknown = [s for s in sources if s not in published]
    if unknown:
        raise SelectionError(f"sources {unknown} are not in split {split!r}; published sources: {sorted(published)}")
    if teacher_layer not in manifest.layers or type(teacher_layer) is not int:
        raise SelectionError(f"teacher_layer {teacher_layer!r} is not published; published layers: {manifest.layers}")
    if state_kind not in manifest.state_kinds:
        raise SelectionError(
            f"state_kind {state_kind!r} is not published; published state kinds: {manifest.state_kinds}"
        )
    short = {s: published[s].block_count for s in sources if published[s].block_count < per_source_count}
    if short:
        raise SelectionError(
            f"per_source_count {per_source_count} exceeds the blocks published in split {split!r}: {short}"
        )


class _Planner:
    """Reads and verifies the indexes and artifact manifests of one selection and plans its runs."""

    def __init__(
        self,
        storage: Storage,
        manifest: RepresentationManifest,
        manifest_uri: str,
        split: str,
        teacher_layer: int,
        state_kind: str,
    ):
        self.storage, self.manifest, self.manifest_uri = storage, manifest, manifest_uri
        self.root = parent_uri(manifest_uri)
        self.split, self.teacher_layer, self.state_kind = split, teacher_layer, state_kind
        self._artifact_manifests: dict[tuple[str, str], dict[str, ArtifactEntry]] = {}

    def runs(self, source: str, per_source_count: int) -> list[_Run]:
        """`source`'s first `per_source_count` blocks, grouped into runs of one part each."""
        published = self.manifest.splits[self.split].sources[source]
        index_uri = join_uri(self.root, published.index.uri)
        index = self._index(published, index_uri)
        am_uri = join_uri(self.root, index.artifact_manifest.uri)
        entries = self._entries(index, index_uri)
        by_part: dict[str, list[IndexBlock]] = {}
        for b in index.blocks:
            by_part.setdefault(b.part, []).append(b)
        runs: list[list[IndexBlock]] = []
        for b in index.blocks[:per_source_count]:
            if runs and runs[-1][-1].part == b.part:
                runs[-1].append(b)
            else:
                runs.append([b])
        plan = []
        for blocks in runs:
            part = blocks[0].part
            tokens, states = self._artifacts(entries, source, part, index_uri, am_uri)
            plan.append(_Run(source, blocks, by_part[part], tokens, states, index_uri, am_uri))
        return plan

    def _index(self, published: SourceEntry, index_uri: str) -> RepresentationIndex:
        ref = published.index
        raw = _read_pinned(
            self.storage,
            index_uri,
            ref.sha256,
            ref.size_bytes,
            f"representation manifest {self.manifest_uri}",
            ref.etag,
        )
        index = RepresentationIndex.from_json_bytes(bytes(raw), source=index_uri)
        if len(index.blocks) != published.block_count:
            raise IntegrityError(
                f"{index_uri}: lists {len(index.blocks)} blocks, the representation manifest says "
                f"{published.block_count}; the publication is inconsistent"
            )
        return index

    def _entries(self, index: RepresentationIndex, index_uri: str) -> dict[str, ArtifactEntry]:
        """The artifact manifest `index` binds, by artifact id (each read once)."""
        am_ref = index.artifact_manifest
        key = (am_ref.uri, am_ref.sha256)
        if key not in self._artifact_manifests:
            am_uri = join_uri(self.root, am_ref.uri)
            raw = _read_pinned(self.storage, am_uri, am_ref.sha256, None, f"index {index_uri}")
            self._artifact_manifests[key] = ArtifactManifest.from_json_bytes(bytes(raw), source=am_uri).lookup()
        return self._artifact_manifests[key]

    def _artifacts(
        self, entries: dict[str, ArtifactEntry], source: str, part: str, index_uri: str, am_uri: str
    ) -> tuple[ArtifactEntry, ArtifactEntry]:
        """The tokens and states entries of one part, as the representation manifest declares them."""
        manifest = self.manifest
        found = []
        for layer, kind, dtype, width in (
            (None, None, manifest.token_dtype, None),
            (self.teacher_layer, self.state_kind, manifest.row_dtype, manifest.projection.dim),
        ):
            aid = artifact_id(self.split, source, part, layer, kind)
            entry = entries.get(aid)
            if entry is None:
                raise IntegrityError(
                    f"{am_uri}: lists no artifact {aid!r}, which {index_uri} needs; the publication is incomplete"
                )
            if entry.dtype != dtype or (width is not None and entry.shape[1] != width):
                raise IntegrityError(
                    f"{am_uri}: artifact {aid!r} is {entry.dtype}{entry.shape}, unlike the "
                    f"representation manifest ({dtype}, dim {manifest.projection.dim})"
                )
            found.append(entry)
        return found[0], found[1]
