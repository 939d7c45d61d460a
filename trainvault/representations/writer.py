"""RepresentationWriter: blocks in, one create-only representation publication out."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from trainvault.canonical import sha256_hex
from trainvault.documents import describe_validation_error
from trainvault.errors import ConfigurationError, EncodeError, ManifestError, StorageError
from trainvault.extras import require
from trainvault.publication.manifest import validate_name
from trainvault.representations import artifact
from trainvault.representations.documents import (
    ARTIFACT_MANIFEST_NAME,
    MANIFEST_NAME,
    MAX_BLOCK_ID,
    ROW_DTYPES,
    TOKEN_DTYPE,
    ArtifactEntry,
    ArtifactManifest,
    ArtifactManifestRef,
    IndexBlock,
    IndexRef,
    Projection,
    RepresentationIndex,
    RepresentationManifest,
    RowDtype,
    SourceEntry,
    SplitEntry,
    Teacher,
    artifact_id,
    artifact_path,
    index_path,
    part_name,
)
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import join_uri, normalize_uri

_INT32 = (-(2**31), 2**31 - 1)
M = TypeVar("M", bound=BaseModel)


def _model(cls: type[M], value: Any, what: str) -> M:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ManifestError(f"{what} must be a {cls.__name__} or a mapping, got {type(value).__name__}")
    try:
        return cls.model_validate(dict(value))
    except ValidationError as exc:
        raise ManifestError(f"invalid {what}: {describe_validation_error(exc)}") from None


class _Block:
    __slots__ = ("input_ids", "states", "token_count")

    def __init__(self, token_count: int, input_ids: bytes, states: dict[tuple[int, str], bytes]):
        self.token_count, self.input_ids, self.states = token_count, input_ids, states


class RepresentationWriter:
    """Collects blocks, then `commit()` writes the publication under `root_uri`.

    Bytes are a pure function of the blocks and settings (not of `add_block` order).
    Objects are written create-only: artifacts, the artifact manifest, the indexes, and
    the final manifest last, so a reader never sees a partial publication. Committing the
    same publication again returns the same (uri, sha256); a different one is a
    `ConflictError`. Blocks are held in memory until `commit()`.
    """

    def __init__(
        self,
        storage: StorageSource,
        root_uri: str,
        *,
        teacher: Teacher | Mapping[str, Any],
        projection: Projection | Mapping[str, Any],
        layers: Iterable[int],
        state_kinds: Iterable[str],
        part_rows: int = 262_144,
    ):
        storage = storage_of(storage)
        self._torch = require("torch", "representation")
        require("numpy", "representation")
        artifact.check_little_endian()
        self.storage = storage
        self.root = normalize_uri(root_uri)
        self.teacher = _model(Teacher, teacher, "teacher")
        self.projection = _model(Projection, projection, "projection")
        layers, state_kinds = list(layers), list(state_kinds)
        if any(type(x) is not int for x in layers):
            raise TypeError(f"layers must be integers, got {[type(x).__name__ for x in layers]}")
        if not layers or any(not 0 <= x < self.teacher.num_layers for x in layers):
            raise ConfigurationError(f"layers must be integers in [0, {self.teacher.num_layers}), got {layers}")
        if len(set(layers)) != len(layers) or len(set(state_kinds)) != len(state_kinds) or not state_kinds:
            raise ConfigurationError(f"layers {layers} and state_kinds {state_kinds} must be non-empty and distinct")
        for kind in state_kinds:
            validate_name("state kind", kind)
        self.layers, self.state_kinds = sorted(layers), sorted(state_kinds)
        if type(part_rows) is not int:
            raise TypeError(f"part_rows must be an int, got {type(part_rows).__name__}")
        if part_rows < 1:
            raise ConfigurationError(f"part_rows must be a positive integer, got {part_rows!r}")
        self.part_rows = part_rows
        self.row_dtype: RowDtype | None = None
        self._blocks: dict[tuple[str, str], dict[int, _Block]] = {}
        self._lock = threading.Lock()

    @property
    def manifest_uri(self) -> str:
        return join_uri(self.root, MANIFEST_NAME)

    # -- blocks -------------------------------------------------------------------

    def add_block(
        self,
        split: str,
        source: str,
        block_id: int,
        input_ids: Any,
        states: Mapping[tuple[int, str], Any],
    ) -> None:
        """Add one block: `input_ids` int[T] and `states[(layer, state_kind)]` tensor[T, dim] for
        every declared layer and state kind. Bad input raises (`EncodeError`, `InvalidNameError`)
        and records nothing."""
        validate_name("split", split)
        validate_name("source", source)
        where = f"block {block_id!r} of {split}/{source}"
        if type(block_id) is not int or not 0 <= block_id <= MAX_BLOCK_ID:
            raise EncodeError(f"{where}: block_id must be an integer in [0, 2**63)")
        ids, count = self._encode_tokens(where, input_ids)
        encoded, row_dtype = self._encode_states(where, states, count)
        with self._lock:
            blocks = self._blocks.setdefault((split, source), {})
            if block_id in blocks:
                raise EncodeError(f"{where} was already added; block ids are unique per source")
            if self.row_dtype is not None and row_dtype != self.row_dtype:
                raise EncodeError(f"{where}: rows are {row_dtype} but this publication's rows are {self.row_dtype}")
            self.row_dtype = row_dtype
            blocks[block_id] = _Block(count, ids, encoded)

    def _encode_tokens(self, where: str, input_ids: Any) -> tuple[bytes, int]:
        """`input_ids` as int32 bytes, and their count."""
        torch = self._torch
        tokens = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(input_ids)
        if (
            tokens.dim() != 1
            or tokens.numel() < 1
            or tokens.dtype.is_floating_point
            or tokens.dtype.is_complex
            or tokens.dtype == torch.bool
        ):
            raise EncodeError(
                f"{where}: input_ids must be a non-empty 1-D integer sequence, got {tokens.dtype}{list(tokens.shape)}"
            )
        if tokens.min().item() < _INT32[0] or tokens.max().item() > _INT32[1]:
            raise EncodeError(f"{where}: input_ids do not fit {TOKEN_DTYPE}")
        return tokens.detach().cpu().to(torch.int32).contiguous().numpy().tobytes(), tokens.numel()

    def _encode_states(
        self, where: str, states: Mapping[tuple[int, str], Any], count: int
    ) -> tuple[dict[tuple[int, str], bytes], RowDtype | None]:
        """Every declared state's bytes, and the rows' dtype (one for all)."""
        torch = self._torch
        if not isinstance(states, Mapping):
            raise EncodeError(f"{where}: states must map (layer, state_kind) to a tensor")
        wanted = {(layer, kind) for layer in self.layers for kind in self.state_kinds}
        missing, extra = sorted(wanted - set(states)), sorted(set(states) - wanted, key=repr)
        if missing or extra:
            raise EncodeError(
                f"{where}: states must hold exactly every declared (layer, state_kind); "
                f"missing {missing}, undeclared {extra}"
            )
        encoded: dict[tuple[int, str], bytes] = {}
        row_dtype = self.row_dtype
        for key in sorted(wanted):
            t = states[key]
            if not isinstance(t, torch.Tensor):
                raise EncodeError(f"{where}: states[{key}] must be a torch.Tensor, got {type(t).__name__}")
            name = str(t.dtype).removeprefix("torch.")
            dtype = next((d for d in ROW_DTYPES if d == name), None)
            if dtype is None:
                raise EncodeError(f"{where}: states[{key}] has dtype {name}; use one of {ROW_DTYPES}")
            if row_dtype is not None and dtype != row_dtype:
                raise EncodeError(f"{where}: states[{key}] is {dtype} but this publication's rows are {row_dtype}")
            row_dtype = dtype
            if list(t.shape) != [count, self.projection.dim]:
                raise EncodeError(
                    f"{where}: states[{key}] has shape {list(t.shape)}, expected [{count}, {self.projection.dim}] "
                    "(one projected row per token)"
                )
            # Bytes now: later changes to the caller's tensor cannot change what is published.
            encoded[key] = t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
        return encoded, row_dtype

    # -- commit -------------------------------------------------------------------

    def _parts(self, blocks: dict[int, _Block]) -> list[list[tuple[int, _Block]]]:
        """Blocks by ascending id, packed into parts of at most `part_rows` rows (a larger block alone)."""
        parts: list[list[tuple[int, _Block]]] = []
        rows = 0
        for block_id in sorted(blocks):
            block = blocks[block_id]
            if not parts or rows + block.token_count > self.part_rows:
                parts.append([])
                rows = 0
            parts[-1].append((block_id, block))
            rows += block.token_count
        return parts

    def _put(self, path: str, data: bytes) -> tuple[str, str, int]:
        uri = join_uri(self.root, path)
        self.storage.put_create(uri, data)
        return uri, sha256_hex(data), len(data)

    def commit(self) -> tuple[str, str]:
        """Write the publication; return (final manifest URI, its sha256)."""
        with self._lock:
            row_dtype = self.row_dtype
            if not self._blocks or row_dtype is None:
                raise EncodeError(f"{self.root}: no blocks were added; nothing to publish")
            entries: list[ArtifactEntry] = []
            index_blocks: dict[tuple[str, str], list[IndexBlock]] = {}
            for (split, source), blocks in sorted(self._blocks.items()):
                out = index_blocks[(split, source)] = []
                for number, members in enumerate(self._parts(blocks)):
                    entries += self._write_part(split, source, part_name(number), members, row_dtype, out)
            entries.sort(key=lambda e: e.artifact_id)
            artifacts = ArtifactManifest(artifacts=entries)
            _, artifacts_sha, _ = self._put(ARTIFACT_MANIFEST_NAME, artifacts.to_json_bytes())
            ref = ArtifactManifestRef(uri=ARTIFACT_MANIFEST_NAME, sha256=artifacts_sha)
            manifest = RepresentationManifest(
                teacher=self.teacher,
                projection=self.projection,
                layers=self.layers,
                state_kinds=self.state_kinds,
                row_dtype=row_dtype,
                splits=self._write_indexes(index_blocks, ref),
            )
            uri, sha, _ = self._put(MANIFEST_NAME, manifest.to_json_bytes())
            return uri, sha

    def _write_part(
        self,
        split: str,
        source: str,
        part: str,
        members: list[tuple[int, _Block]],
        row_dtype: RowDtype,
        out: list[IndexBlock],
    ) -> list[ArtifactEntry]:
        """Write one part's artifacts (tokens, then each state); its index blocks are appended to `out`."""
        ids = [block_id for block_id, _ in members]
        offsets = [0]
        for block_id, block in members:
            out.append(IndexBlock(block_id=block_id, part=part, row_start=offsets[-1], token_count=block.token_count))
            offsets.append(offsets[-1] + block.token_count)
        rows = offsets[-1]
        # One artifact at a time, so commit holds at most one part's bytes beyond the blocks.
        kinds: list[tuple[int | None, str | None]] = [(None, None)]
        kinds += [(layer, kind) for layer in self.layers for kind in self.state_kinds]
        entries = []
        for layer, kind in kinds:
            entry: dict[str, Any] = dict(
                artifact_id=artifact_id(split, source, part, layer, kind),
                kind="tokens" if layer is None else "states",
                split=split,
                source=source,
                part=part,
                layer=layer,
                state_kind=kind,
                dtype=TOKEN_DTYPE if layer is None else row_dtype,
                shape=[rows] if layer is None else [rows, self.projection.dim],
            )
            chunks = [b.input_ids if layer is None or kind is None else b.states[(layer, kind)] for _, b in members]
            meta = ArtifactEntry.model_construct(**entry).metadata()
            data = artifact.encode(meta, entry["kind"], entry["dtype"], entry["shape"], ids, offsets, chunks)
            path = artifact_path(split, source, part, layer, kind)
            _, sha, size = self._put(path, data)
            del data
            entries.append(ArtifactEntry(**entry, uri=path, sha256=sha, size_bytes=size))
        return entries

    def _write_indexes(
        self, index_blocks: dict[tuple[str, str], list[IndexBlock]], ref: ArtifactManifestRef
    ) -> dict[str, SplitEntry]:
        """Write each source's index; return the manifest's splits, each index pinned by its etag."""
        splits: dict[str, dict[str, SourceEntry]] = {}
        for (split, source), blocks_out in index_blocks.items():
            path = index_path(split, source)
            uri, sha, size = self._put(
                path, RepresentationIndex(artifact_manifest=ref, blocks=blocks_out).to_json_bytes()
            )
            # The etag of the object the store now holds (ours: put_create proved identical bytes).
            etag = self.storage.head(uri).etag
            if not etag:
                raise StorageError(f"{uri}: the store reports no etag; a representation index must be pinned by one")
            splits.setdefault(split, {})[source] = SourceEntry(
                index=IndexRef(uri=path, sha256=sha, etag=etag, size_bytes=size), block_count=len(blocks_out)
            )
        return {name: SplitEntry(sources=sources) for name, sources in splits.items()}
