"""DatasetSaver: deterministic shards with completion descriptors, and a manifest written last.

Crash and restart freely. A shard whose descriptor exists is verified and reused without
touching its records. A data object without a descriptor (a crash in between) is
re-derived: identical bytes complete it, different bytes are a `ConflictError` naming the
non-deterministic shard. The manifest is built from the descriptors found on storage, so
shards saved by other processes are included, and it is written create-only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import ConfigurationError, ConflictError, IntegrityError, ManifestError, ObjectNotFoundError
from trainvault.formats import get_format
from trainvault.formats.blocks import DEFAULT_BLOCK_BYTES, EncodedShard, encode_shard
from trainvault.publication.bound import Bound
from trainvault.publication.discovery import Found, discover_shards, read_shard_descriptor, shard_entry
from trainvault.publication.manifest import (
    Curriculum,
    DataManifest,
    Producer,
    ShardDescriptor,
    ShardEntry,
    SplitManifest,
    natural_key,
    shard_data_uri,
    shard_descriptor_uri,
    shard_key,
    validate_name,
    validate_stage,
)
from trainvault.publication.pack import build_pack, pack_uri
from trainvault.refs import ObjectRef
from trainvault.storage.store import SINGLE_PUT_LIMIT, StorageSource, storage_of
from trainvault.uris import normalize_uri, parent_uri
from trainvault.version import __version__


def _check_metadata(metadata: Mapping[str, Any] | None, what: str) -> dict[str, Any] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise ManifestError(f"{what} must be a mapping, got {type(metadata).__name__}")
    try:
        canonical_json(dict(metadata))
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"{what} must be JSON-compatible: {exc}") from None
    import json

    checked: dict[str, Any] = json.loads(canonical_json(dict(metadata)))
    return checked


@dataclass(frozen=True)
class _Shard:
    """Where one shard of the publication goes."""

    split: str
    curriculum_stage: str | None
    shard_id: str
    data_uri: str
    descriptor_uri: str

    @property
    def key(self) -> str:
        return shard_key(self.curriculum_stage, self.shard_id)

    @property
    def name(self) -> str:
        return f"shard {self.split}/{self.key}"


class DatasetSaver:
    """Saves shards of one publication and commits its manifest.

    Picklable: send it to worker processes, save there, and commit in the parent.
    """

    def __init__(
        self,
        storage: StorageSource,
        manifest_uri: str,
        *,
        data_format: str = "msgpack.zst",
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_shard_bytes: int = SINGLE_PUT_LIMIT,
        rehash_reused: bool = True,
    ):
        storage = storage_of(storage)
        self.storage = storage
        #: False: a shard found complete is checked by size only (one request, no bytes read), for
        #: callers whose next step hashes every shard against the manifest anyway.
        self.rehash_reused = rehash_reused
        self.manifest_uri = normalize_uri(manifest_uri)
        self.root = parent_uri(self.manifest_uri)
        self.data_format = get_format(data_format).name
        if block_bytes < 1:
            raise ConfigurationError(f"block_bytes must be a positive int, got {block_bytes!r}")
        self.block_bytes = block_bytes
        self.max_shard_bytes = min(max_shard_bytes, SINGLE_PUT_LIMIT)
        # Shards saved or recovered by this process, per split: key -> entry.
        self._known: dict[str, dict[str, ShardEntry]] = {}
        # Their descriptors with the bytes stored, by descriptor URI: commit need not read them again.
        self._held: dict[str, tuple[ShardDescriptor, bytes]] = {}
        self._stage_metadata: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._curricula: dict[str, dict[str, Curriculum]] = {}
        #: (split, key) of the shards this saver wrote (not found complete).
        self._written: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return f"DatasetSaver({self.manifest_uri!r}, data_format={self.data_format!r})"

    # -- shards -----------------------------------------------------------------

    def save(
        self,
        split: str,
        curriculum_stage: str | None,
        records: Iterable[Mapping[str, Any]],
        *,
        curriculum_metadata: Mapping[str, Any] | None = None,
        shard_id: str,
    ) -> ShardEntry:
        """Write one shard (data object, then descriptor) and return its manifest entry.

        If the shard is already complete on storage it is verified and returned without
        reading `records`. An empty `records` makes a valid shard of zero records, zero
        blocks and a zero-byte data object.
        """
        validate_name("split", split)
        validate_stage(curriculum_stage)
        validate_name("shard id", shard_id)
        metadata = _check_metadata(curriculum_metadata, "curriculum_metadata")
        shard = self._place(split, curriculum_stage, shard_id)
        existing = read_shard_descriptor(self.storage, self.root, split, curriculum_stage, shard_id)
        if existing is not None:
            desc, desc_bytes = existing
            self._check_same_shard(desc, metadata, shard.name)
            self._verify_data(desc, shard.data_uri)
        else:
            encoded = self._put_data(shard, records)
            desc, desc_bytes = self._put_descriptor(shard, self._descriptor(shard, encoded, metadata), metadata)
            self._written.add((split, shard.key))
        entry = shard_entry(shard.descriptor_uri, shard.data_uri, desc, desc_bytes)
        return self._remember(split, entry, desc, desc_bytes)

    def _place(self, split: str, curriculum_stage: str | None, shard_id: str) -> _Shard:
        return _Shard(
            split=split,
            curriculum_stage=curriculum_stage,
            shard_id=shard_id,
            data_uri=shard_data_uri(self.root, split, curriculum_stage, shard_id, self.data_format),
            descriptor_uri=shard_descriptor_uri(self.root, split, curriculum_stage, shard_id),
        )

    def _put_data(self, shard: _Shard, records: Iterable[Mapping[str, Any]]) -> EncodedShard:
        """Encode `records` and write the data object create-only (equal bytes already there are fine)."""
        fmt = get_format(self.data_format)
        encoded = encode_shard(
            fmt, records, block_bytes=self.block_bytes, max_bytes=self.max_shard_bytes, name=shard.name
        )
        try:
            self.storage.put_create(shard.data_uri, encoded.data)
        except ConflictError:
            raise ConflictError(
                f"{shard.name} is not deterministic: {shard.data_uri} holds bytes from an earlier attempt that differ "
                "from the records derived now. Make the generator deterministic (seed it from the shard id), or "
                "delete that object if no manifest references it, then save again"
            ) from None
        return encoded

    def _descriptor(self, shard: _Shard, encoded: EncodedShard, metadata: dict[str, Any] | None) -> ShardDescriptor:
        return ShardDescriptor(
            split=shard.split,
            curriculum_stage=shard.curriculum_stage,
            shard_id=shard.shard_id,
            key=shard.key,
            data_format=self.data_format,
            codec={**get_format(self.data_format).settings(), "block_bytes": self.block_bytes},
            size_bytes=len(encoded.data),
            sha256=encoded.sha256,
            record_count=encoded.record_count,
            blocks=encoded.blocks,
            trailer=encoded.trailer,
            curriculum_metadata=metadata,
            producer=Producer(library="trainvault", version=__version__),
        )

    def _put_descriptor(
        self, shard: _Shard, desc: ShardDescriptor, metadata: dict[str, Any] | None
    ) -> tuple[ShardDescriptor, bytes]:
        """Write the descriptor create-only; return the one on storage with its bytes."""
        desc_bytes = desc.to_json_bytes()
        try:
            self.storage.put_create(shard.descriptor_uri, desc_bytes)
        except ConflictError:
            # Another writer completed the same shard at the same moment; accept it if it matches.
            other = read_shard_descriptor(self.storage, self.root, shard.split, shard.curriculum_stage, shard.shard_id)
            if other is None:
                raise ConflictError(
                    f"{shard.name}: {shard.descriptor_uri} existed a moment ago and is gone; another process is "
                    "deleting shards under this publication: stop it, then save again"
                ) from None
            self._check_same_shard(other[0], metadata, shard.name)
            if other[0].sha256 != desc.sha256:
                raise ConflictError(f"{shard.name}: a concurrent writer published different bytes") from None
            return other
        return desc, desc_bytes

    def recover(self, split: str, curriculum_stage: str | None, *, shard_id: str) -> ShardEntry:
        """The entry of a shard completed earlier (by any process), verified against its data."""
        validate_name("split", split)
        validate_stage(curriculum_stage)
        validate_name("shard id", shard_id)
        found = read_shard_descriptor(self.storage, self.root, split, curriculum_stage, shard_id)
        key = shard_key(curriculum_stage, shard_id)
        if found is None:
            raise ObjectNotFoundError(
                f"shard {split}/{key} has no completion descriptor under {self.root}; save it first"
            )
        desc, desc_bytes = found
        data_uri = shard_data_uri(self.root, split, curriculum_stage, shard_id, self.data_format)
        self._verify_data(desc, data_uri)
        desc_uri = shard_descriptor_uri(self.root, split, curriculum_stage, shard_id)
        entry = shard_entry(desc_uri, data_uri, desc, desc_bytes)
        return self._remember(split, entry, desc, desc_bytes)

    def wrote(self, split: str, key: str) -> bool:
        """Whether this saver wrote shard `key` of `split` (False: found complete and reused, or not saved)."""
        return (split, key) in self._written

    def _remember(self, split: str, entry: ShardEntry, desc: ShardDescriptor, desc_bytes: bytes) -> ShardEntry:
        self._known.setdefault(split, {})[entry.key] = entry
        self._held[entry.descriptor_uri] = (desc, desc_bytes)
        if entry.curriculum_stage is not None:
            self._stage_metadata.setdefault((split, entry.curriculum_stage), desc.curriculum_metadata)
        return entry

    def _check_same_shard(self, desc: ShardDescriptor, metadata: dict[str, Any] | None, name: str) -> None:
        if desc.data_format != self.data_format:
            raise ConflictError(
                f"{name} is already complete as {desc.data_format}; this saver writes {self.data_format}. "
                "Use a new manifest URI for a different format"
            )
        if desc.curriculum_metadata != metadata:
            raise ConflictError(
                f"{name} is already complete with curriculum_metadata {desc.curriculum_metadata!r}, "
                f"not {metadata!r}; published shards are immutable: use a new shard id or manifest URI"
            )

    def _verify_data(self, desc: ShardDescriptor, data_uri: str) -> None:
        if not self.rehash_reused:
            size = self.storage.head(data_uri).size
            if size != desc.size_bytes:
                raise IntegrityError(
                    f"{data_uri} is {size} bytes, its completion descriptor says {desc.size_bytes}; the data object "
                    "was altered: delete the shard's objects and save it again"
                )
            return
        digest = hashlib.sha256()
        size = 0
        for chunk in self.storage.stream(data_uri, expected_size=desc.size_bytes):
            digest.update(chunk)
            size += len(chunk)
        if size != desc.size_bytes or digest.hexdigest() != desc.sha256:
            raise IntegrityError(
                f"{data_uri} does not match its completion descriptor ({size} bytes, expected "
                f"{desc.size_bytes}); the data object was altered: delete the shard's objects and save it again"
            )

    # -- curricula ----------------------------------------------------------------

    def register_curriculum(
        self,
        split: str,
        name: str,
        shards: Sequence[ShardEntry | str],
        *,
        curriculum_metadata: Mapping[str, Any] | None = None,
    ) -> Curriculum:
        """Register an ordered selection of shards saved or recovered in `split`.

        Idempotent for the same definition; a different definition under the same name,
        a repeated shard, an unknown shard, or a name that would replace a stage inferred
        from `save` is refused.
        """
        validate_name("split", split)
        validate_stage(name)
        metadata = _check_metadata(curriculum_metadata, "curriculum_metadata")
        if isinstance(shards, (str, ShardEntry)) or not shards:
            raise ManifestError(f"curriculum {name!r}: pass a non-empty list of shards (entries or keys)")
        known = self._known.get(split, {})
        keys: list[str] = []
        for item in shards:
            key = item.key if isinstance(item, ShardEntry) else item
            entry = known.get(key) if isinstance(key, str) else None
            if entry is None or (isinstance(item, ShardEntry) and item != entry):
                raise ManifestError(
                    f"curriculum {name!r}: shard {key!r} was not saved or recovered in split {split!r} by this "
                    "saver; save or recover it first"
                )
            if key in keys:
                raise ManifestError(f"curriculum {name!r}: shard {key!r} is listed twice")
            keys.append(key)
        curriculum = Curriculum(shards=keys, metadata=metadata)
        inferred = [k for k, e in known.items() if e.curriculum_stage == name]
        if inferred and (
            sorted(inferred, key=natural_key) != keys or self._stage_metadata.get((split, name)) != metadata
        ):
            raise ConflictError(
                f"curriculum {name!r} in split {split!r} would replace the stage of that name inferred from save(); "
                "choose another curriculum name"
            )
        registered = self._curricula.setdefault(split, {})
        if name in registered and registered[name] != curriculum:
            raise ConflictError(
                f"curriculum {name!r} in split {split!r} is already registered with other shards or metadata"
            )
        registered[name] = curriculum
        return curriculum

    # -- manifest ---------------------------------------------------------------

    def build_manifest(self) -> DataManifest:
        """The manifest that `commit_manifest` would write, from the shards on storage."""
        return self._build()[0]

    def _build(self) -> tuple[DataManifest, ObjectRef, bytes]:
        """The manifest, the descriptor pack it binds and the pack's bytes."""
        discovered = discover_shards(self.storage, self.root, self.data_format, self._held)
        for split in self._curricula:
            if split not in discovered:
                raise ManifestError(f"curricula are registered for split {split!r}, which has no complete shard")
        if not discovered:
            raise ManifestError(f"no complete shard under {self.root}; save shards before building a manifest")
        order = sorted(discovered, key=natural_key)
        splits = {split: self._split_manifest(split, discovered[split]) for split in order}
        pack = build_pack(
            self.data_format, [(f.entry.descriptor_uri, f.descriptor, f.raw) for s in order for f in discovered[s]]
        )
        digest = sha256_hex(pack)
        ref = ObjectRef(uri=pack_uri(self.root, digest), sha256=digest, size=len(pack))
        return DataManifest(data_format=self.data_format, splits=splits, descriptor_pack=ref), ref, pack

    def _split_manifest(self, split: str, found: list[Found]) -> SplitManifest:
        """A split's shards, and its curricula: the stages inferred from save() plus those registered."""
        stages: dict[str, tuple[list[str], dict[str, Any] | None]] = {}
        for f in found:
            stage, metadata = f.entry.curriculum_stage, f.descriptor.curriculum_metadata
            if stage is None:
                continue
            keys_of_stage, first_metadata = stages.setdefault(stage, ([], metadata))
            if first_metadata != metadata:
                raise ConflictError(
                    f"split {split!r} stage {stage!r}: shards carry different curriculum_metadata; "
                    "every shard of a stage must be saved with the same metadata"
                )
            keys_of_stage.append(f.entry.key)
        curricula = {stage: Curriculum(shards=k, metadata=m) for stage, (k, m) in stages.items()}
        keys = {f.entry.key for f in found}
        for name, registered in self._curricula.get(split, {}).items():
            missing = [k for k in registered.shards if k not in keys]
            if missing:
                raise ManifestError(f"curriculum {name!r} names shards no longer on storage: {missing[:3]}")
            if name in curricula and curricula[name] != registered:
                raise ConflictError(
                    f"curriculum {name!r} in split {split!r} would replace the stage of that name "
                    "inferred from save(); choose another curriculum name"
                )
            curricula[name] = registered
        return SplitManifest(shards=[f.entry for f in found], curricula=dict(sorted(curricula.items())))

    def commit_manifest(self) -> Bound[DataManifest]:
        """Build the manifest, write its descriptor pack and then the manifest, both create-only,
        and return the manifest with its reference (what an approval binds). Idempotent for the
        same publication."""
        manifest, ref, pack = self._build()
        self.storage.put_create(ref.uri, pack)  # named by its digest: equal bytes or none
        data = manifest.to_json_bytes()
        try:
            self.storage.put_create(self.manifest_uri, data)
        except ConflictError:
            raise ConflictError(
                f"{self.manifest_uri} already holds a different publication; published manifests are immutable: "
                "commit to a new manifest URI"
            ) from None
        return Bound(ObjectRef(uri=self.manifest_uri, sha256=sha256_hex(data), size=len(data)), manifest)
