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
from trainvault.errors import IntegrityError, ManifestError, SelectionError
from trainvault.publication.manifest import (
    DataManifest,
    ShardDescriptor,
    ShardEntry,
    SplitManifest,
)
from trainvault.publication.pack import read_pack, unpack
from trainvault.publication.reader import check_descriptor, parse_descriptor
from trainvault.storage import ReadableStorage
from trainvault.uris import Absolute, normalize_uri, parent_uri, parse_uri, resolve_uri


def resolve_manifest_uris(manifest: DataManifest, base: str, *, absolute: Absolute = "anywhere") -> DataManifest:
    """The same manifest with every shard, descriptor and descriptor pack URI absolute, resolved
    against `base`. `absolute`: what an absolute reference may name (see `resolve_uri`)."""
    parse_uri(base)
    splits = {}
    pack = manifest.descriptor_pack
    if pack is not None:
        where = f"the manifest in {base}, its descriptor pack"
        pack = pack.model_copy(update={"uri": resolve_uri(pack.uri, base, absolute=absolute, where=where)})
    changed = pack != manifest.descriptor_pack
    for name, split in manifest.splits.items():
        shards = []
        for s in split.shards:
            where = f"the manifest in {base}, split {name!r} shard {s.key!r}"
            uri = resolve_uri(s.uri, base, absolute=absolute, where=where)
            desc = resolve_uri(s.descriptor_uri, base, absolute=absolute, where=where)
            changed |= uri != s.uri or desc != s.descriptor_uri
            shards.append(s.model_copy(update={"uri": uri, "descriptor_uri": desc}))
        splits[name] = SplitManifest(shards=shards, curricula=split.curricula)
    if not changed:
        return manifest
    return manifest.model_copy(update={"splits": splits, "descriptor_pack": pack})


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
    `with_descriptors` or `read_pack`; empty until then."""

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
        (whose digest the caller checked against the manifest; see `_attach`)."""
        ref = self.manifest.descriptor_pack
        if ref is None:
            raise ManifestError(f"{self.uri} binds no descriptor pack (it was written before packs)")
        with _collector_paused():
            descriptors = unpack(self.manifest, raw, ref.uri)
            parsed = {e.descriptor_uri: d for (_, e), d in zip(self.entries(), descriptors, strict=True)}
            return self._attach(parsed, lambda entry: f"descriptor pack {ref.uri}, shard {entry.key}")

    def read_pack(self, storage: ReadableStorage) -> Publication:
        """This publication with every descriptor attached from its descriptor pack, read in one
        request and checked against the manifest (see `trainvault.publication.pack`). Unchanged
        when descriptors are attached already or the manifest (written before packs) has none.
        `storage` is a `Storage` or the custody store of an approved dataset (which reads like one)."""
        ref = self.manifest.descriptor_pack
        if ref is None or self.descriptors:
            return self
        return self.with_pack(read_pack(storage, ref, self.uri))

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
