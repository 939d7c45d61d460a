"""The complete shards under a publication root, found by listing and read from their descriptors.

A shard is complete when its descriptor exists: the saver writes the data object first
and the descriptor last, so shards saved by other processes are found too.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from trainvault.canonical import sha256_hex
from trainvault.errors import ConflictError, IntegrityError, ManifestError, ObjectNotFoundError
from trainvault.publication.manifest import (
    DESCRIPTOR_SUFFIX,
    NO_STAGE,
    ShardDescriptor,
    ShardEntry,
    natural_key,
    shard_data_uri,
    shard_descriptor_uri,
)
from trainvault.storage import Storage
from trainvault.uris import join_uri

_DISCOVERY_THREADS = 16


@dataclass(frozen=True)
class Found:
    """A complete shard: its manifest entry, its descriptor and the descriptor's stored bytes."""

    entry: ShardEntry
    descriptor: ShardDescriptor
    raw: bytes = field(repr=False)


#: Per split, in manifest order: each complete shard found.
Discovered = dict[str, list[Found]]
#: Descriptors a caller already holds (it wrote or read them), by descriptor URI.
Held = Mapping[str, tuple[ShardDescriptor, bytes]]


def shard_entry(descriptor_uri: str, data_uri: str, desc: ShardDescriptor, desc_bytes: bytes) -> ShardEntry:
    """The manifest entry of a shard from its descriptor (and the descriptor's bytes as stored)."""
    return ShardEntry(
        key=desc.key,
        curriculum_stage=desc.curriculum_stage,
        shard_id=desc.shard_id,
        uri=data_uri,
        size_bytes=desc.size_bytes,
        sha256=desc.sha256,
        record_count=desc.record_count,
        descriptor_uri=descriptor_uri,
        descriptor_sha256=sha256_hex(desc_bytes),
    )


def read_shard_descriptor(
    storage: Storage, root: str, split: str, curriculum_stage: str | None, shard_id: str
) -> tuple[ShardDescriptor, bytes] | None:
    """The descriptor of a shard under `root` with its bytes, or None when there is none yet."""
    uri = shard_descriptor_uri(root, split, curriculum_stage, shard_id)
    try:
        raw = storage.get_document(uri)
    except ObjectNotFoundError:
        return None
    desc = ShardDescriptor.from_json_bytes(raw, source=uri)
    if (desc.split, desc.curriculum_stage, desc.shard_id) != (split, curriculum_stage, shard_id):
        raise IntegrityError(f"{uri} describes shard {desc.split}/{desc.key}, not the shard at its path")
    return desc, raw


def discover_shards(storage: Storage, root: str, data_format: str, held: Held | None = None) -> Discovered:
    """Every complete shard under `root`, found by listing (other processes' too), per split in
    manifest order. Descriptors are read in parallel, except those in `held` whose listed size
    is the size held."""
    prefix = join_uri(root, "shards")
    base = prefix + "/"
    objects = storage.list(prefix)
    sizes = {o.uri: o.size for o in objects}
    descriptors = [o.uri for o in objects if o.uri.endswith(DESCRIPTOR_SUFFIX)]
    held = held or {}

    def load(uri: str) -> tuple[str, Found]:
        parts = uri[len(base) :].split("/")
        if len(parts) != 3:
            raise ManifestError(f"{uri}: a descriptor outside the shards/<split>/<stage>/ layout")
        split, stage_dir, file = parts
        stage = None if stage_dir == NO_STAGE else stage_dir
        shard_id = file[: -len(DESCRIPTOR_SUFFIX)]
        found = held.get(uri)
        if found is None or len(found[1]) != sizes[uri]:
            found = read_shard_descriptor(storage, root, split, stage, shard_id)
        if found is None:
            raise ObjectNotFoundError(f"{uri} disappeared while the manifest was being built; retry")
        desc, raw = found
        if desc.data_format != data_format:
            raise ConflictError(
                f"{uri} is a {desc.data_format} shard; this manifest is {data_format}: one publication holds one format"
            )
        data_uri = shard_data_uri(root, split, stage, shard_id, data_format)
        if sizes.get(data_uri) != desc.size_bytes:
            raise IntegrityError(
                f"{data_uri} is missing or not {desc.size_bytes} bytes as its descriptor says; delete the "
                "shard's objects and save it again"
            )
        return split, Found(shard_entry(uri, data_uri, desc, raw), desc, raw)

    unheld = [uri for uri in descriptors if uri not in held]
    loaded = [load(uri) for uri in descriptors if uri in held]  # no request unless a size differs
    if unheld:
        with ThreadPoolExecutor(max_workers=_DISCOVERY_THREADS) as pool:
            loaded += pool.map(load, unheld)
    by_split: Discovered = {}
    for split, found in loaded:
        by_split.setdefault(split, []).append(found)

    described = {found.entry.uri for _, found in loaded} | set(descriptors)
    incomplete = [o.uri for o in objects if o.uri not in described]
    if incomplete:
        shown = ", ".join(incomplete[:5]) + (f" and {len(incomplete) - 5} more" if len(incomplete) > 5 else "")
        raise ManifestError(
            f"{len(incomplete)} object(s) under {prefix} belong to no complete shard: {shown}. "
            "Save those shards again (a crash interrupted them) before committing"
        )
    return {s: sorted(fs, key=lambda f: natural_key(f.entry.key)) for s, fs in by_split.items()}
