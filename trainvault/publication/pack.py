"""The descriptor pack: every shard's completion descriptor in one create-only object.

The saver writes it at commit (from the descriptors it reads once anyway) under a name
derived from its content, ``<root>/descriptor-packs/<sha256>.json``, and the manifest binds
it by uri, sha256 and size. Opening a publication then costs one read for all descriptors
instead of one per shard.

descriptor-pack-v2 (written now) is columnar and holds only what the manifest does not:
per shard its block count, trailer and an index into a table of the distinct
(codec, curriculum metadata, producer) values; per block its offset, length, record count
and sha256, in manifest order (splits, then shards, as the manifest lists them). A
descriptor is the manifest entry's fields plus these, so it is rebuilt exactly as stored
(the gate checks each rebuilt descriptor's canonical bytes against the manifest's
``descriptor_sha256``; a loader trusts the pack's own digest, which the manifest binds).
Opening checks every shard's blocks against its entry at once but builds a shard's
`ShardDescriptor` only when it is read. descriptor-pack-v1 (each descriptor as stored) is
still read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Annotated, Any, Literal

from pydantic import Field

from trainvault.canonical import canonical_json, sha256_hex
from trainvault.documents import Document, StrictModel, parse_json
from trainvault.errors import IntegrityError, ManifestError, ObjectNotFoundError
from trainvault.formats.blocks import ByteRange
from trainvault.publication.manifest import DataManifest, Producer, ShardDescriptor, ShardEntry
from trainvault.refs import ObjectRef, Sha256
from trainvault.storage.readable import ReadableStorage
from trainvault.uris import join_uri

PACK_FOLDER = "descriptor-packs"
KIND = "trainvault.descriptor-pack"

_Count = Annotated[int, Field(ge=0)]


class DescriptorPack(Document):
    """descriptor-pack-v1: the descriptors of one publication's shards, in manifest order."""

    KIND = KIND

    format: Literal["trainvault.descriptor-pack"] = "trainvault.descriptor-pack"
    version: Literal[1] = 1
    data_format: str
    descriptors: list[ShardDescriptor]

    def open_values(self) -> list[tuple[int, Any]]:
        # pack > descriptors > descriptor > codec or curriculum metadata
        return [(3, v) for d in self.descriptors for v in (d.codec, d.curriculum_metadata)]


class SharedFields(StrictModel):
    """Descriptor fields that many shards share, stored once in a pack."""

    codec: dict[str, Any]
    curriculum_metadata: dict[str, Any] | None
    producer: Producer


class PackedShards(StrictModel):
    """Per shard, in manifest order: its block count, its trailer, its `SharedFields` index."""

    blocks: list[_Count]
    shared: list[_Count]
    trailer: list[ByteRange | None]


class PackedBlocks(StrictModel):
    """Per block, shard after shard: where its bytes are, its records, its sha256."""

    length: list[_Count]
    offset: list[_Count]
    record_count: list[Annotated[int, Field(ge=1)]]
    sha256: list[Sha256]


class ColumnarPack(Document):
    """descriptor-pack-v2: the descriptor fields a manifest does not hold, as columns."""

    KIND = KIND
    VERSION = 2

    format: Literal["trainvault.descriptor-pack"] = "trainvault.descriptor-pack"
    version: Literal[2] = 2
    data_format: str
    shared: list[SharedFields]
    shards: PackedShards
    blocks: PackedBlocks

    def open_values(self) -> list[tuple[int, Any]]:
        # pack > shared > fields > codec or curriculum metadata
        return [(3, v) for s in self.shared for v in (s.codec, s.curriculum_metadata)]


def pack_uri(root: str, sha256: str) -> str:
    """Where the pack with this digest lives under a publication root."""
    return join_uri(root, PACK_FOLDER, f"{sha256}.json")


def build_pack(data_format: str, descriptors: Sequence[tuple[str, ShardDescriptor, bytes]]) -> bytes:
    """The canonical bytes of the (v2) pack holding `descriptors` ((uri, parsed, stored bytes), in
    manifest order). A descriptor whose stored bytes are not its canonical JSON is refused:
    rebuilt from the pack it would not hash to the digest the manifest binds."""
    shared: dict[bytes, tuple[int, dict[str, Any]]] = {}
    shards: dict[str, list[Any]] = {"blocks": [], "shared": [], "trailer": []}
    blocks: dict[str, list[Any]] = {"length": [], "offset": [], "record_count": [], "sha256": []}
    for uri, desc, raw in descriptors:
        if desc.to_json_bytes() != raw:
            raise ManifestError(
                f"{uri} is not stored as its canonical JSON (sorted keys, no whitespace, every field), so it "
                "cannot be packed; delete the shard's objects and save it again with this trainvault"
            )
        fields = SharedFields(
            codec=desc.codec, curriculum_metadata=desc.curriculum_metadata, producer=desc.producer
        ).model_dump(mode="json")
        shards["shared"].append(shared.setdefault(canonical_json(fields), (len(shared), fields))[0])
        shards["blocks"].append(len(desc.blocks))
        shards["trailer"].append(None if desc.trailer is None else desc.trailer.model_dump(mode="json"))
        for b in desc.blocks:
            for name, column in blocks.items():
                column.append(getattr(b, name))
    doc = {
        "format": KIND,
        "version": ColumnarPack.VERSION,
        "data_format": data_format,
        "shared": [fields for _, fields in shared.values()],
        "shards": shards,
        "blocks": blocks,
    }
    return canonical_json(doc)


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


def unpack(
    manifest: DataManifest, raw: bytes, source: str, *, agree: bool = True
) -> list[ShardDescriptor] | PackedDescriptors:
    """The descriptors in pack bytes `raw`, one per manifest entry in manifest order: a v1 pack's
    as a list (each to be checked against its entry where it is attached), a v2 pack's as
    `PackedDescriptors` (each shard's blocks checked against its entry here unless `agree` is
    False: for a caller that checks every rebuilt descriptor's digest instead). Format and
    count are checked."""
    where = f"descriptor pack {source}"
    obj = parse_json(raw, source=where, kind=KIND, walk=False)
    version = obj.get("version") if isinstance(obj, dict) else None
    if isinstance(version, int) and version > ColumnarPack.VERSION:
        raise ManifestError(
            f"{where}: {KIND} version {version} is not supported (this trainvault reads versions 1 and 2); "
            "upgrade trainvault to read it"
        )
    pack = (ColumnarPack if version == ColumnarPack.VERSION else DescriptorPack).from_parsed(obj, where)
    if pack.data_format != manifest.data_format:
        raise ManifestError(f"{where}: data_format {pack.data_format!r}, the manifest {manifest.data_format!r}")
    expected = sum(len(s.shards) for s in manifest.splits.values())
    held = len(pack.shards.blocks) if isinstance(pack, ColumnarPack) else len(pack.descriptors)
    if held != expected:
        raise ManifestError(
            f"{where}: holds {held} descriptors, the manifest lists {expected} shards; the pack belongs to "
            "another publication"
        )
    if isinstance(pack, DescriptorPack):
        return pack.descriptors
    return PackedDescriptors(manifest, pack, source, agree=agree)


class PackedDescriptors(Mapping[str, ShardDescriptor]):
    """A v2 pack's descriptors by descriptor URI, each built (and validated) on first use;
    `block_counts` answers a loader's plan without building any."""

    def __init__(self, manifest: DataManifest, pack: ColumnarPack, source: str, *, agree: bool = True):
        self._data_format = manifest.data_format
        self._entries = [(name, e) for name, split in manifest.splits.items() for e in split.shards]
        self._index = {e.descriptor_uri: i for i, (_, e) in enumerate(self._entries)}
        self._shared = [s.model_dump(mode="json") for s in pack.shared]
        self._shards = pack.shards
        self._blocks = pack.blocks
        self._starts = [0, *accumulate(pack.shards.blocks)]
        self._source = source
        self._built: dict[str, ShardDescriptor] = {}
        self._check_columns()
        if agree:
            self._check_shards()

    def _check_columns(self) -> None:
        """Columns of the lengths the shard count and block counts give; shared fields that exist."""
        shards, blocks = self._shards, self._blocks
        n, total = len(self._entries), self._starts[-1]
        if len(shards.shared) != n or len(shards.trailer) != n:
            raise ManifestError(f"descriptor pack {self._source}: its shard columns differ in length")
        if any(len(column) != total for column in (blocks.length, blocks.offset, blocks.record_count, blocks.sha256)):
            raise ManifestError(
                f"descriptor pack {self._source}: its block columns do not hold the {total} blocks its shards count"
            )
        if shards.shared and max(shards.shared) >= len(self._shared):
            raise ManifestError(f"descriptor pack {self._source}: a shard names shared fields it does not hold")

    def _check_shards(self) -> None:
        """Every shard's blocks against its entry (`shard_problems`); the first shard that fails is named."""
        for _, key, problem in self.shard_problems()[:1]:
            raise IntegrityError(
                f"descriptor pack {self._source}, shard {key}: {problem}; the pack disagrees with the manifest: "
                "do not train on this publication"
            )

    def shard_problems(self) -> list[tuple[str, str, str]]:
        """(split, key, problem) of every shard whose blocks disagree with its entry: overlapping
        blocks, records that do not sum to the entry's count, an index past the end of the data object."""
        found = ((split, entry.key, self._shard_problem(i, entry)) for i, (split, entry) in enumerate(self._entries))
        return [(split, key, problem) for split, key, problem in found if problem is not None]

    def _shard_problem(self, i: int, entry: ShardEntry) -> str | None:
        blocks, trailer = self._blocks, self._shards.trailer[i]
        lo, hi = self._starts[i], self._starts[i + 1]
        end = 0
        for j in range(lo, hi):
            if blocks.offset[j] < end:
                return f"block {j - lo} overlaps the block before it"
            end = blocks.offset[j] + blocks.length[j]
        held = sum(blocks.record_count[lo:hi])
        if held != entry.record_count:
            return f"its blocks hold {held} records, the manifest {entry.record_count}"
        limit = entry.size_bytes if trailer is None else trailer.offset
        if end > limit or (trailer is not None and trailer.offset + trailer.length != entry.size_bytes):
            return "its block index reaches past the end of the data object"
        return None

    def __getitem__(self, uri: str) -> ShardDescriptor:
        desc = self._built.get(uri)
        if desc is None:
            obj = self.document(self._index[uri])
            where = f"descriptor pack {self._source}, shard {obj['key']}"
            desc = self._built[uri] = ShardDescriptor.from_obj(obj, source=where)
        return desc

    def __contains__(self, uri: object) -> bool:
        return uri in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def document(self, i: int) -> dict[str, Any]:
        """The JSON value of the `i`-th shard's descriptor (manifest order), as it was stored."""
        split, e = self._entries[i]
        lo, hi = self._starts[i], self._starts[i + 1]
        b, trailer = self._blocks, self._shards.trailer[i]
        firsts = [0, *accumulate(b.record_count[lo:hi])]
        return {
            **self._shared[self._shards.shared[i]],
            "blocks": [
                {
                    "first_record": firsts[k],
                    "length": b.length[j],
                    "offset": b.offset[j],
                    "record_count": b.record_count[j],
                    "sha256": b.sha256[j],
                }
                for k, j in enumerate(range(lo, hi))
            ],
            "curriculum_stage": e.curriculum_stage,
            "data_format": self._data_format,
            "format": ShardDescriptor.KIND,
            "key": e.key,
            "record_count": e.record_count,
            "sha256": e.sha256,
            "shard_id": e.shard_id,
            "size_bytes": e.size_bytes,
            "split": split,
            "trailer": None if trailer is None else trailer.model_dump(mode="json"),
            "version": ShardDescriptor.VERSION,
        }

    def columns(self, uris: Sequence[str]) -> tuple[list[int], list[int], list[int]]:
        """The block columns a plan needs: where each shard's blocks start (one more for the end),
        each block's record count, and the position of each shard of `uris` among them."""
        index = self._index
        return self._starts, self._blocks.record_count, [index[u] for u in uris]

    def block_counts(self, uri: str) -> list[tuple[int, int]]:
        """(first record, record count) of each block of the shard whose descriptor is `uri`."""
        i = self._index[uri]
        counts = self._blocks.record_count[self._starts[i] : self._starts[i + 1]]
        return list(zip(accumulate(counts, initial=0), counts, strict=False))


def packed_bytes(
    manifest: DataManifest, descriptors: Mapping[str, ShardDescriptor]
) -> Iterator[tuple[str, ShardEntry, bytes]]:
    """(split, entry, canonical bytes of its packed descriptor) for every shard, in manifest order."""
    for i, (split, entry) in enumerate(_entries(manifest)):
        if isinstance(descriptors, PackedDescriptors):
            yield split, entry, canonical_json(descriptors.document(i))
        else:
            yield split, entry, descriptors[entry.descriptor_uri].to_json_bytes()


def descriptor_bytes(
    manifest: DataManifest, descriptors: Mapping[str, ShardDescriptor], source: str
) -> dict[str, bytes]:
    """Each descriptor's canonical bytes (by descriptor URI), each checked against the
    ``descriptor_sha256`` the manifest binds: what the gate binds instead of fetching them."""
    return {
        entry.descriptor_uri: _agreeing(split, entry, data, source)
        for split, entry, data in packed_bytes(manifest, descriptors)
    }


class DescriptorBytes(Mapping[str, bytes]):
    """`descriptor_bytes` made one descriptor at a time, on lookup, each checked the same way: a
    trainer's open of a pack the gate already checked serves the few descriptors asked for."""

    def __init__(self, manifest: DataManifest, descriptors: PackedDescriptors, source: str):
        self._entries = list(_entries(manifest))
        self._index = {e.descriptor_uri: i for i, (_, e) in enumerate(self._entries)}
        self._descriptors, self._source = descriptors, source

    def __getitem__(self, uri: str) -> bytes:
        i = self._index[uri]
        split, entry = self._entries[i]
        return _agreeing(split, entry, canonical_json(self._descriptors.document(i)), self._source)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


def _agreeing(split: str, entry: ShardEntry, data: bytes, source: str) -> bytes:
    if sha256_hex(data) != entry.descriptor_sha256:
        raise IntegrityError(
            f"descriptor pack {source}: the descriptor of shard {split}/{entry.key} does not hash to the "
            f"descriptor_sha256 the manifest binds ({entry.descriptor_sha256}); the pack disagrees with the "
            "manifest: do not train on this publication"
        )
    return data


def _entries(manifest: DataManifest) -> Iterator[tuple[str, ShardEntry]]:
    for name, split in manifest.splits.items():
        for entry in split.shards:
            yield name, entry


__all__ = [
    "PACK_FOLDER",
    "ColumnarPack",
    "DescriptorPack",
    "PackedDescriptors",
    "build_pack",
    "descriptor_bytes",
    "pack_uri",
    "packed_bytes",
    "read_pack",
    "unpack",
]
