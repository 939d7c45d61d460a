"""`SelectedDescriptors`: a selection's shard descriptors, built only when a shard is read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import overload

from trainvault.publication.manifest import ShardDescriptor, ShardEntry
from trainvault.publication.pack import PackedDescriptors


class SelectedDescriptors(Sequence[ShardDescriptor]):
    """The descriptors of a selection's shards, in its order: looked up (from a v2 pack, built)
    only when a shard is read, so opening makes no object per shard."""

    def __init__(
        self, shards: tuple[ShardEntry, ...], attached: Mapping[str, ShardDescriptor], read: dict[str, ShardDescriptor]
    ):
        self.shards = shards
        self.attached = attached
        self.read = read

    @overload
    def __getitem__(self, i: int) -> ShardDescriptor: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[ShardDescriptor]: ...
    def __getitem__(self, i: int | slice) -> ShardDescriptor | Sequence[ShardDescriptor]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        shard = self.shards[i]
        found = self.read.get(shard.uri)
        return self.attached[shard.descriptor_uri] if found is None else found

    def __len__(self) -> int:
        return len(self.shards)

    def packed(self) -> PackedDescriptors | None:
        """The v2 pack every one of these descriptors comes from, if they all do."""
        return self.attached if isinstance(self.attached, PackedDescriptors) and not self.read else None

    def block_counts(self, i: int) -> list[tuple[int, int]]:
        """(first record, record count) of each block of the `i`-th shard."""
        shard = self.shards[i]
        if isinstance(self.attached, PackedDescriptors) and shard.uri not in self.read:
            return self.attached.block_counts(shard.descriptor_uri)
        return [(b.first_record, b.record_count) for b in self[i].blocks]
