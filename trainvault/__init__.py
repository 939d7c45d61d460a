"""trainvault: the custody chain for model-training data."""

from trainvault.client import TrainVault
from trainvault.errors import (
    ApprovalError,
    AuthenticationError,
    ConflictError,
    ContaminationError,
    DecodeError,
    EncodeError,
    IntegrityError,
    InvalidNameError,
    ManifestError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    ResumeStateError,
    SelectionError,
    StorageError,
    StorageTimeoutError,
    TrainVaultError,
)
from trainvault.formats import FORMATS
from trainvault.manifest import Curriculum, DataManifest, ShardDescriptor, ShardEntry, SplitManifest
from trainvault.reader import ShardReader, iter_shard
from trainvault.saver import DatasetSaver
from trainvault.storage import Storage, StorageConfig
from trainvault.version import __version__

__all__ = [
    "FORMATS",
    "ApprovalError",
    "AuthenticationError",
    "ConflictError",
    "ContaminationError",
    "Curriculum",
    "DataManifest",
    "DatasetSaver",
    "DecodeError",
    "EncodeError",
    "IntegrityError",
    "InvalidNameError",
    "ManifestError",
    "ObjectNotFoundError",
    "ObjectTooLargeError",
    "ResumeStateError",
    "SelectionError",
    "ShardDescriptor",
    "ShardEntry",
    "ShardReader",
    "SplitManifest",
    "Storage",
    "StorageConfig",
    "StorageError",
    "StorageTimeoutError",
    "TrainVault",
    "TrainVaultError",
    "__version__",
    "iter_shard",
]
