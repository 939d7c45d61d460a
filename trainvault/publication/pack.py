"""The descriptor pack: every shard's completion descriptor in one create-only object.

The saver writes it at commit (from the descriptors it reads once anyway) under a name
derived from its content, ``<root>/descriptor-packs/<sha256>.json``, and the manifest binds
it by uri, sha256 and size. Opening a publication then costs one read for all descriptors
instead of one per shard. The pack lists the descriptors in manifest order (splits, then
shards, as the manifest lists them), each exactly as stored: its canonical JSON is the
descriptor's stored bytes, so each still hashes to the manifest's ``descriptor_sha256``
(the gate checks that; a loader trusts the pack's own digest, which the manifest binds).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

from trainvault.canonical import sha256_hex
from trainvault.documents import Document
from trainvault.errors import IntegrityError, ManifestError, ObjectNotFoundError
from trainvault.publication.manifest import DataManifest, ShardDescriptor, ShardEntry
from trainvault.refs import ObjectRef
from trainvault.storage import ReadableStorage
from trainvault.uris import join_uri

PACK_FOLDER = "descriptor-packs"


class DescriptorPack(Document):
    """descriptor-pack-v1: the descriptors of one publication's shards, in manifest order."""

    KIND = "trainvault.descriptor-pack"

    format: Literal["trainvault.descriptor-pack"] = "trainvault.descriptor-pack"
    version: Literal[1] = 1
    data_format: str
    descriptors: list[ShardDescriptor]


def pack_uri(root: str, sha256: str) -> str:
    """Where the pack with this digest lives under a publication root."""
    return join_uri(root, PACK_FOLDER, f"{sha256}.json")


def build_pack(data_format: str, descriptors: Sequence[tuple[str, ShardDescriptor, bytes]]) -> bytes:
    """The canonical bytes of the pack holding `descriptors` ((uri, parsed, stored bytes), in
    manifest order). A descriptor whose stored bytes are not its canonical JSON is refused:
    its copy in the pack would not hash to the digest the manifest binds."""
    for uri, desc, raw in descriptors:
        if desc.to_json_bytes() != raw:
            raise ManifestError(
                f"{uri} is not stored as its canonical JSON (sorted keys, no whitespace, every field), so it "
                "cannot be packed; delete the shard's objects and save it again with this trainvault"
            )
    return DescriptorPack(data_format=data_format, descriptors=[d for _, d, _ in descriptors]).to_json_bytes()


def read_pack(storage: ReadableStorage, ref: ObjectRef, manifest_uri: str) -> bytes:
    """The pack's bytes, read once to its bound size and checked against its bound sha256."""
    try:
        raw = storage.get(ref.uri, expected_size=ref.size)
    except ObjectNotFoundError:
        raise ObjectNotFoundError(
            f"descriptor pack {ref.uri}, which {manifest_uri} binds, is missing; the publication is incomplete: "
            "restore the pack or commit the publication again to a new manifest URI"
        ) from None
    except IntegrityError as exc:
        raise IntegrityError(f"descriptor pack {ref.uri} ({manifest_uri} binds {ref.size} bytes): {exc}") from None
    digest = sha256_hex(raw)
    if digest != ref.sha256:
        raise IntegrityError(
            f"descriptor pack {ref.uri}: sha256 is {digest}, {manifest_uri} binds {ref.sha256}; the pack was altered "
            "after publication: do not train on this publication"
        )
    return raw


def unpack(manifest: DataManifest, raw: bytes, source: str) -> list[ShardDescriptor]:
    """The descriptors in pack bytes `raw`, one per manifest entry in manifest order (format
    and count checked; each descriptor is checked against its entry where it is attached)."""
    pack = DescriptorPack.from_json_bytes(raw, source=f"descriptor pack {source}")
    if pack.data_format != manifest.data_format:
        raise ManifestError(
            f"descriptor pack {source}: data_format {pack.data_format!r}, the manifest {manifest.data_format!r}"
        )
    expected = sum(len(s.shards) for s in manifest.splits.values())
    if len(pack.descriptors) != expected:
        raise ManifestError(
            f"descriptor pack {source}: holds {len(pack.descriptors)} descriptors, the manifest lists {expected} "
            "shards; the pack belongs to another publication"
        )
    return pack.descriptors


def descriptor_bytes(
    manifest: DataManifest, descriptors: Mapping[str, ShardDescriptor], source: str
) -> dict[str, bytes]:
    """Each descriptor's canonical bytes (by descriptor URI), each checked against the
    ``descriptor_sha256`` the manifest binds: what the gate binds instead of fetching them."""
    out: dict[str, bytes] = {}
    for split, entry in _entries(manifest):
        data = descriptors[entry.descriptor_uri].to_json_bytes()
        if sha256_hex(data) != entry.descriptor_sha256:
            raise IntegrityError(
                f"descriptor pack {source}: the descriptor of shard {split}/{entry.key} does not hash to the "
                f"descriptor_sha256 the manifest binds ({entry.descriptor_sha256}); the pack disagrees with the "
                "manifest: do not train on this publication"
            )
        out[entry.descriptor_uri] = data
    return out


def _entries(manifest: DataManifest) -> Iterator[tuple[str, ShardEntry]]:
    for name, split in manifest.splits.items():
        for entry in split.shards:
            yield name, entry


__all__ = ["PACK_FOLDER", "DescriptorPack", "build_pack", "descriptor_bytes", "pack_uri", "read_pack", "unpack"]
