"""RolloutArchive: an immutable, indexed archive of RL rollout samples over a pool."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from trainvault.canonical import sha256_hex
from trainvault.errors import (
    ArchiveExistsError,
    ConfigurationError,
    ConflictError,
    DecodeError,
    ManifestError,
    ObjectNotFoundError,
    SampleNotFoundError,
)
from trainvault.extras import require
from trainvault.formats import get_format
from trainvault.publication.manifest import Producer
from trainvault.rollouts.documents import ArchiveEntry, ArchiveIndex, MetadataSidecar
from trainvault.rollouts.pool import gc as pool_gc
from trainvault.rollouts.pool import (
    new_owner_name,
    owner_uri,
    put_object,
    read_object,
    settle_after_owner,
    write_owner,
)
from trainvault.rollouts.samples import (
    FORMAT,
    Sample,
    checked_metadata,
    default_task_key,
    describe_sample,
    encode_samples,
    strip_transport,
)
from trainvault.storage import Storage
from trainvault.storage.store import StorageSource, storage_or_default
from trainvault.uris import join_uri, normalize_uri, parent_uri
from trainvault.version import __version__

DEFAULT_POOL_NAME = "rollout-pool"
SIDECAR_SUFFIX = ".metadata.json"


def sidecar_uri(uri: str) -> str:
    return normalize_uri(uri) + SIDECAR_SUFFIX


def _check_save_settings(chunk_size: Any, rollout_id: Any) -> None:
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be an int, got {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ConfigurationError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if isinstance(rollout_id, bool) or not isinstance(rollout_id, (int, str)):
        raise TypeError(f"rollout_id must be an int or a str, got {type(rollout_id).__name__}")


def _publish(st: Storage, uri: str, pool: str, owner: str, payloads: dict[str, bytearray], index_bytes: bytes) -> None:
    """Put the chunks, then the owner record, then the index (create-only) under the retention
    protocol of `trainvault.rollouts.pool`; `ArchiveExistsError` if another archive won `uri`."""
    for digest, data in payloads.items():
        put_object(st, pool, digest, data)
    record = write_owner(st, pool, owner, uri, payloads)
    # A collector may have removed a deduplicated object before our owner record existed.
    settle_after_owner(st, pool, payloads)
    try:
        created = st.put_create(uri, index_bytes)
    except ConflictError:
        created = False
    if not created:
        st.delete(record)  # the other writer's archive stands; our claim must not outlive us
        raise _exists(uri)


class RolloutArchive:
    """An opened archive: its index is read and validated; chunks are read only on demand."""

    def __init__(self, uri: str, *, storage: StorageSource | None = None):
        self.storage = storage_or_default(storage)
        self.uri = normalize_uri(uri)
        try:
            raw = self.storage.get_document(self.uri)
        except ObjectNotFoundError:
            raise ObjectNotFoundError(f"no rollout archive at {self.uri}; check the URI") from None
        self.index_sha256 = sha256_hex(raw)
        self.index = ArchiveIndex.from_json_bytes(raw, source=self.uri)

    @classmethod
    def open(cls, uri: str, *, storage: StorageSource | None = None) -> RolloutArchive:
        """Open the archive at `uri` (same as the constructor)."""
        return cls(uri, storage=storage)

    def __repr__(self) -> str:
        return f"RolloutArchive({self.uri!r}, samples={len(self.index.samples)})"

    def __len__(self) -> int:
        return len(self.index.samples)

    @property
    def rollout_id(self) -> int | str:
        return self.index.rollout_id

    @property
    def evaluation(self) -> bool:
        return self.index.evaluation

    @property
    def pool(self) -> str:
        return self.index.pool

    # -- saving -----------------------------------------------------------------

    @classmethod
    def save(
        cls,
        uri: str,
        samples: Iterable[Mapping[str, Any]],
        *,
        rollout_id: int | str,
        evaluation: bool = False,
        pool: str | None = None,
        chunk_size: int = 64,
        storage: StorageSource | None = None,
        describe_sample: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = describe_sample,
        task_key: Callable[[Mapping[str, Any]], str | None] = default_task_key,
    ) -> RolloutArchive:
        """Write `samples` as a new archive at `uri` and return it opened.

        Chunks of `chunk_size` samples go to `pool` (default: ``rollout-pool`` beside the
        archive) by content address; the owner record follows, the index comes last,
        create-only. Fields named ``_...`` are dropped. `describe_sample=None` writes no
        per-sample metadata. Raises `ArchiveExistsError` if `uri` holds an archive and
        `EncodeError` for bad samples, in both cases before any index is written.
        """
        st = storage_or_default(storage)
        uri = normalize_uri(uri)
        pool = normalize_uri(pool) if pool is not None else join_uri(parent_uri(uri), DEFAULT_POOL_NAME)
        _check_save_settings(chunk_size, rollout_id)
        if st.exists(uri):
            raise _exists(uri)

        # Encode everything before the first write, so bad input leaves nothing on storage.
        encoded = encode_samples(uri, samples, chunk_size, describe_sample, task_key)
        owner = new_owner_name(uri)
        index = ArchiveIndex(
            rollout_id=rollout_id,
            evaluation=bool(evaluation),
            pool=pool,
            owner=owner,
            chunks=encoded.chunks,
            samples=encoded.entries,
            sample_metadata=encoded.metadata,
            producer=Producer(library="trainvault", version=__version__),
        )
        _publish(st, uri, pool, owner, encoded.payloads, index.to_json_bytes())
        return cls(uri, storage=st)

    # -- reading ----------------------------------------------------------------

    def keys(self) -> list[tuple[str, str | None]]:
        """(sample_key, task_key) per sample in archive order, duplicates included."""
        return [(e.sample_key, e.task_key) for e in self.index.samples]

    def load_samples(self, sample_key: str | None = None, task_key: str | int | None = None) -> list[Sample]:
        """All samples, or those matching every key given, in archive order.

        Raises `SampleNotFoundError` (a `KeyError`) when a selection matches nothing; `keys()`
        lists what there is. Reads only the chunks holding
        the selected samples, each checked against its digest.
        """
        task = None if task_key is None else str(task_key)
        selected = [
            e
            for e in self.index.samples
            if (sample_key is None or e.sample_key == sample_key) and (task is None or e.task_key == task)
        ]
        if not selected and (sample_key is not None or task_key is not None):
            raise SampleNotFoundError(
                f"rollout archive {self.uri} has no sample with sample_key={sample_key!r} and task_key={task_key!r}; "
                "archive.keys() lists the (sample_key, task_key) pairs it holds"
            )
        loaded: dict[int, list[Sample]] = {}
        result = []
        for e in selected:
            if e.chunk not in loaded:
                loaded[e.chunk] = self._read_chunk(e.chunk)
            result.append(dict(loaded[e.chunk][e.offset]))
        return result

    def iter_samples(self) -> Iterator[tuple[ArchiveEntry, Sample]]:
        """(entry, sample) for every sample in archive order, holding one chunk at a time."""
        current, rows = -1, []
        for e in self.index.samples:
            if e.chunk != current:
                current, rows = e.chunk, self._read_chunk(e.chunk)
            yield e, dict(rows[e.offset])

    def _read_chunk(self, i: int) -> list[Sample]:
        chunk = self.index.chunks[i]
        data = read_object(self.storage, self.index.pool, chunk.sha256, chunk.size_bytes, archive=self.uri)
        fmt = get_format(FORMAT)
        ctx = fmt.open_context(None, chunk.size_bytes)
        rows: list[Sample] = []
        for b, block in enumerate(chunk.blocks):
            try:
                decoded = fmt.decode_block(data[block.offset : block.offset + block.length], b, ctx)
            except DecodeError as exc:
                raise DecodeError(f"{self.uri}: chunk {chunk.sha256}: {exc}") from None
            if len(decoded) != block.record_count:
                raise DecodeError(
                    f"{self.uri}: chunk {chunk.sha256} block {b} holds {len(decoded)} samples, the index says "
                    f"{block.record_count}"
                )
            rows.extend(strip_transport(r) for r in decoded)
        return rows

    # -- metadata ---------------------------------------------------------------

    @staticmethod
    def check_metadata(
        uri: str, validate: Callable[[list[dict[str, Any]]], Any] | None = None, *, storage: StorageSource | None = None
    ) -> list[dict[str, Any]]:
        """Per-sample metadata, in archive order, from the index alone or from its sidecar
        (``<uri>.metadata.json``, bound to the index digest); never reads a chunk.

        `validate`, if given, is called with the list (and may raise) before it is returned.
        """
        archive = RolloutArchive(uri, storage=storage)
        metadata = archive.index.sample_metadata
        if metadata is None:
            side = sidecar_uri(archive.uri)
            try:
                raw = archive.storage.get_document(side)
            except ObjectNotFoundError:
                raise ObjectNotFoundError(
                    f"rollout archive {archive.uri} was written without sample metadata and has no sidecar "
                    f"{side}; build one with RolloutArchive.write_metadata_sidecar"
                ) from None
            sidecar = MetadataSidecar.from_json_bytes(raw, source=side)
            if sidecar.index_sha256 != archive.index_sha256:
                raise ManifestError(
                    f"{side} describes another archive (index sha256 {sidecar.index_sha256}, this one is "
                    f"{archive.index_sha256}); refusing it: rebuild the sidecar for this archive"
                )
            if len(sidecar.samples) != len(archive.index.samples):
                raise ManifestError(f"{side}: {len(sidecar.samples)} entries for {len(archive)} samples")
            metadata = sidecar.samples
        if validate is not None:
            validate(metadata)
        return metadata

    @staticmethod
    def write_metadata_sidecar(
        uri: str,
        describe_sample: Callable[[Mapping[str, Any]], Mapping[str, Any]] = describe_sample,
        *,
        storage: StorageSource | None = None,
    ) -> str:
        """Build ``<uri>.metadata.json`` (create-only) for an archive written without metadata."""
        archive = RolloutArchive(uri, storage=storage)
        if archive.index.sample_metadata is not None:
            raise ManifestError(f"rollout archive {archive.uri} already carries its metadata; it needs no sidecar")
        samples = [checked_metadata(describe_sample(s), i) for i, (_, s) in enumerate(archive.iter_samples())]
        side = sidecar_uri(archive.uri)
        archive.storage.put_create(
            side, MetadataSidecar(index_sha256=archive.index_sha256, samples=samples).to_json_bytes()
        )
        return side

    # -- retention and export ---------------------------------------------------

    #: `trainvault.rollouts.gc`: collect a pool's unowned objects older than a grace period.
    gc = staticmethod(pool_gc)

    def release(self) -> None:
        """Drop this archive's claim on its pool objects (after its last reader is done).

        The index stays readable; a later `gc` may delete chunks no other owner keeps.
        """
        self.storage.delete(owner_uri(self.index.pool, self.index.owner))

    def export_pt(self, path: str) -> str:
        """Write a self-contained ``.pt`` file (create-only) holding ``{"rollout_id", "samples"}``
        with arrays as tensors; needs the ``torch`` extra. Returns its URI."""
        torch = require("torch", "torch")
        target = normalize_uri(path)
        if self.storage.exists(target):  # before reading any chunk
            raise ConflictError(f"{target} already exists; export to a new path")
        samples = [_to_torch(torch, s) for s in self.load_samples()]
        buf = io.BytesIO()
        torch.save({"rollout_id": self.index.rollout_id, "samples": samples}, buf)
        try:
            self.storage.put_create(target, buf.getvalue())
        except ConflictError:
            raise ConflictError(f"{target} already exists; export to a new path") from None
        return target


def _exists(uri: str) -> ArchiveExistsError:
    return ArchiveExistsError(f"a rollout archive already exists at {uri}; archives are immutable: choose a new path")


def _to_torch(torch: Any, value: Any) -> Any:
    if hasattr(value, "dtype") and hasattr(value, "shape") and type(value).__module__ == "numpy":
        return torch.from_numpy(value.copy())  # decoded arrays are read-only views
    if isinstance(value, dict):
        return {k: _to_torch(torch, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_torch(torch, v) for v in value)
    return value
