"""A publication read once: its manifest's bytes pinned by sha256, parsed, every URI resolved.

Every reader of a data manifest (the loader, the scans, the profiler, the ledger builder,
the gate) starts from a `Publication`, so the manifest is parsed and its references resolved
by one set of rules: `trainvault.uris.resolve_uri`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType

from trainvault.canonical import sha256_hex
from trainvault.errors import IntegrityError, ManifestError, ObjectNotFoundError, SelectionError
from trainvault.publication.manifest import (
    DataManifest,
    ShardDescriptor,
    ShardEntry,
    SplitManifest,
)
from trainvault.publication.pack import PackedDescriptors, packed_bytes, read_pack, unpack
from trainvault.publication.reader import (
    DescriptorMismatch,
    check_descriptor,
    check_descriptors,
    parse_descriptor,
)
from trainvault.storage import Storage
from trainvault.storage.readable import ReadableStorage
from trainvault.uris import Absolute, normalize_uri, parent_uri, parse_uri, uri_resolver


def _resolver(base: str, absolute: Absolute) -> Callable[[str, tuple[str, str] | None], str]:
    """`uri_resolver` against `base`; `shard` ((split, key), None: the descriptor pack) names the
    reference when it must be refused."""
    resolve = uri_resolver(base, absolute=absolute)

    def where(shard: tuple[str, str] | None) -> str:
        what = "its descriptor pack" if shard is None else f"split {shard[0]!r} shard {shard[1]!r}"
        return f"the manifest in {base}, {what}"

    return lambda ref, shard: resolve(ref, lambda: where(shard))


def resolve_manifest_uris(manifest: DataManifest, base: str, *, absolute: Absolute = "anywhere") -> DataManifest:
    """The same manifest with every shard, descriptor and descriptor pack URI absolute, resolved
    against `base`. `absolute`: what an absolute reference may name (see `resolve_uri`)."""
    parse_uri(base)
    resolve = _resolver(base, absolute)
    pack = manifest.descriptor_pack
    if pack is not None:
        uri = resolve(pack.uri, None)
        pack = pack if uri == pack.uri else pack.model_copy(update={"uri": uri})
    changed = pack is not manifest.descriptor_pack
    splits = {}
    for name, split in manifest.splits.items():
        shards = []
        for s in split.shards:
            uri, desc = resolve(s.uri, (name, s.key)), resolve(s.descriptor_uri, (name, s.key))
            if uri == s.uri and desc == s.descriptor_uri:
                shards.append(s)
            else:
                changed = True
                shards.append(s.model_copy(update={"uri": uri, "descriptor_uri": desc}))
        splits[name] = shards
    if not changed:
        return manifest
    return manifest.model_copy(
        update={
            "splits": {n: SplitManifest(shards=splits[n], curricula=s.curricula) for n, s in manifest.splits.items()},
            "descriptor_pack": pack,
        }
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large manifest or pack is parsed: parsing
    makes millions of small objects and no cycles, and each collection pass would walk them all
    again (at 5,000 shards it was over half of a loader's build time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True, eq=False)
class Publication:
    """A data manifest as stored at `uri`: its bytes (`raw`), their `sha256`, and the parsed
    `manifest` with every shard and descriptor URI absolute (`as_written`: as stored). `descriptors` (by descriptor URI)
    holds each shard's descriptor, parsed and checked against its entry, once attached with
    `with_descriptors` or `read_pack` (from a v2 pack: `PackedDescriptors`, built on first use);
    empty until then."""

    uri: str
    sha256: str
    raw: bytes = field(repr=False)
    manifest: DataManifest = field(repr=False)
    as_written: DataManifest = field(repr=False)
    descriptors: Mapping[str, ShardDescriptor] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    @classmethod
    def from_bytes(
        cls, uri: str, raw: bytes, *, sha256: str | None = None, absolute: Absolute = "anywhere"
    ) -> Publication:
        """Parse manifest bytes read from `uri`. With `sha256`, bytes that hash differently raise
        `IntegrityError`; `absolute` says where absolute references may point (see `resolve_uri`)."""
        uri = normalize_uri(uri)
        digest = sha256_hex(raw)
        if sha256 is not None and digest != sha256:
            raise IntegrityError(
                f"{uri}: sha256 is {digest}, expected {sha256}; the manifest changed: bind (or pin) the manifest you mean"
            )
        with _collector_paused():
            parsed = DataManifest.from_json_bytes(raw, source=uri)
            resolved = resolve_manifest_uris(parsed, parent_uri(uri), absolute=absolute)
        return cls(uri, digest, bytes(raw), resolved, parsed)

    @classmethod
    def load(
        cls, storage: ReadableStorage, uri: str, *, sha256: str | None = None, absolute: Absolute = "anywhere"
    ) -> Publication:
        """Read the manifest at `uri` once and parse it (see `from_bytes`)."""
        uri = normalize_uri(uri)
        return cls.from_bytes(uri, storage.get_document(uri), sha256=sha256, absolute=absolute)

    @property
    def data_format(self) -> str:
        return self.manifest.data_format

    def split(self, name: str) -> SplitManifest:
        """The split named `name`, or `SelectionError` listing the published splits."""
        try:
            return self.manifest.splits[name]
        except KeyError:
            published = ", ".join(sorted(self.manifest.splits)) or "(none)"
            raise SelectionError(f"split {name!r} is not in {self.uri}; published splits: {published}") from None

    def entries(self) -> Iterator[tuple[str, ShardEntry]]:
        """(split name, shard entry) for every shard, in manifest order."""
        for name, split in self.manifest.splits.items():
            for entry in split.shards:
                yield name, entry

    def with_descriptors(self, raw: Mapping[str, bytes]) -> Publication:
        """This publication with every shard's descriptor parsed from `raw` (descriptor URI ->
        the bytes read), each checked against its entry's descriptor_sha256 (see `_attach`)."""
        parsed: dict[str, ShardDescriptor] = {}
        for _, entry in self.entries():
            data = raw.get(entry.descriptor_uri)
            if data is None:
                raise ManifestError(f"{self.uri}: no descriptor bytes for shard {entry.key!r} ({entry.descriptor_uri})")
            parsed[entry.descriptor_uri] = parse_descriptor(entry, data)
        return self._attach(parsed, lambda entry: entry.descriptor_uri)

    def with_pack(self, raw: bytes) -> Publication:
        """This publication with every descriptor attached from the bytes of its descriptor pack
        (whose digest the caller checked against the manifest; see `_attach`). A v2 pack's
        descriptors are checked against their entries as a whole and built when first used."""
        ref = self.manifest.descriptor_pack
        if ref is None:
            raise ManifestError(f"{self.uri} binds no descriptor pack (it was written before packs)")
        with _collector_paused():
            descriptors = unpack(self.manifest, raw, ref.uri)
            if isinstance(descriptors, PackedDescriptors):
                return Publication(self.uri, self.sha256, self.raw, self.manifest, self.as_written, descriptors)
            parsed = {e.descriptor_uri: d for (_, e), d in zip(self.entries(), descriptors, strict=True)}
            return self._attach(parsed, lambda entry: f"descriptor pack {ref.uri}, shard {entry.key}")

    def read_pack(self, storage: ReadableStorage) -> Publication:
        """This publication with every descriptor attached from its descriptor pack, read in one
        request and checked against the manifest (see `trainvault.publication.pack`). Unchanged
        when descriptors are attached already or the manifest (written before packs) has none.
        `storage` is a `Storage` or the custody storage of an approved dataset (which reads like one)."""
        ref = self.manifest.descriptor_pack
        if ref is None or self.descriptors:
            return self
        return self.with_pack(read_pack(storage, ref, self.uri))

    def descriptor_mismatches(self, storage: Storage) -> list[DescriptorMismatch]:
        """Every shard entry its completion descriptor does not back: checked against the copies in
        the descriptor pack when the manifest binds one (one read; a pack that cannot be read or
        disagrees with the manifest is one mismatch naming it; so is a shard whose packed blocks
        overlap or do not sum to its record count), else against each descriptor object
        (`check_descriptors`)."""
        ref = self.manifest.descriptor_pack
        if ref is None:
            return check_descriptors(storage, self.manifest)
        try:
            with _collector_paused():
                unpacked = unpack(self.manifest, read_pack(storage, ref, self.uri), ref.uri, agree=False)
        except (IntegrityError, ManifestError, ObjectNotFoundError) as exc:
            return [DescriptorMismatch("*", "(descriptor pack)", str(exc))]
        if isinstance(unpacked, PackedDescriptors):
            found: Mapping[str, ShardDescriptor] = unpacked
            # Its digest binds a pack copy, not that the copy's blocks add up: checked apart.
            blocks = {(split, key): problem for split, key, problem in unpacked.shard_problems()}
        else:
            found = {e.descriptor_uri: d for (_, e), d in zip(self.entries(), unpacked, strict=True)}
            blocks = {}  # a v1 pack's descriptors were validated as parsed, blocks included
        out = []
        for split, entry, data in packed_bytes(self.manifest, found):
            if sha256_hex(data) != entry.descriptor_sha256:
                problem = (
                    "its copy in the descriptor pack does not hash to the descriptor_sha256 the manifest binds "
                    f"({entry.descriptor_sha256})"
                )
            elif (split, entry.key) in blocks:
                problem = f"its blocks in the descriptor pack {ref.uri}: {blocks[split, entry.key]}"
            else:
                continue
            out.append(DescriptorMismatch(split, entry.key, problem))
        return out

    def _attach(self, parsed: Mapping[str, ShardDescriptor], where: Callable[[ShardEntry], str]) -> Publication:
        """This publication with `parsed` attached, each descriptor checked against its entry,
        split and the manifest's data format."""
        for split, entry in self.entries():
            desc = check_descriptor(entry, parsed[entry.descriptor_uri], where(entry))
            if (desc.split, desc.data_format) != (split, self.data_format):
                raise ManifestError(
                    f"{where(entry)}: describes split {desc.split!r} in {desc.data_format}, the manifest "
                    f"lists it in split {split!r} in {self.data_format}"
                )
        attached = MappingProxyType(dict(parsed))
        return Publication(self.uri, self.sha256, self.raw, self.manifest, self.as_written, attached)

    def descriptor(self, entry: ShardEntry) -> ShardDescriptor:
        """The attached descriptor of `entry` (see `with_descriptors`)."""
        try:
            return self.descriptors[entry.descriptor_uri]
        except KeyError:
            raise ManifestError(f"{self.uri}: the descriptor of shard {entry.key!r} was not attached") from None


__all__ = ["Publication", "resolve_manifest_uris"]
