"""The publication layer: manifest and descriptor documents, their layout, the saver that
writes them, the verified shard reader, and `Publication`, a manifest read once and pinned."""

from trainvault.publication.bound import Bound, read_document, write_document
from trainvault.publication.manifest import Curriculum, DataManifest, ShardDescriptor, ShardEntry, SplitManifest
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import iter_shard
from trainvault.publication.saver import DatasetSaver

__all__ = [
    "Bound",
    "Curriculum",
    "DataManifest",
    "DatasetSaver",
    "Publication",
    "ShardDescriptor",
    "ShardEntry",
    "SplitManifest",
    "iter_shard",
    "read_document",
    "write_document",
]
