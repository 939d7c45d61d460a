"""trainvault: the custody chain for model-training data.

The names a trainer or a pipeline needs most; each subpackage (`approval`,
`contamination`, `loading`, `profile`, `rollouts`, `components`, `representations`)
exports the rest. Importing trainvault imports no Dagster, torch, numpy, pyarrow or
safetensors.
"""

from importlib import import_module
from typing import Any

from trainvault.client import TrainVault
from trainvault.errors import (
    ApprovalError,
    ArchiveExistsError,
    AuthenticationError,
    BudgetError,
    ConfigurationError,
    ConflictError,
    ContaminationError,
    CustodyError,
    DecodeError,
    EncodeError,
    IntegrityError,
    InvalidNameError,
    LoaderStallError,
    ManifestError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    ProfileError,
    ResumeStateError,
    SampleNotFoundError,
    SelectionError,
    StorageError,
    StorageTimeoutError,
    TaskDataValidationError,
    TrainVaultError,
    TransientStorageError,
    UngatedDataWarning,
    UnscannedFieldError,
    UntrustedSignerError,
    WrongDocumentError,
)
from trainvault.formats import FORMATS
from trainvault.publication.manifest import Curriculum, DataManifest, ShardDescriptor, ShardEntry, SplitManifest
from trainvault.publication.pinned import Publication
from trainvault.publication.reader import ShardReader, iter_shard
from trainvault.publication.saver import DatasetSaver
from trainvault.refs import ObjectRef
from trainvault.storage import Storage, StorageConfig
from trainvault.version import __version__

# Names from the heavier subpackages load on first use, so a trainer that only reads
# data does not pay for signing, scanning or archive code at import time.
_LAZY = {
    "ApprovalPolicy": "trainvault.approval",
    "ApprovalRequest": "trainvault.approval",
    "ApprovedDataset": "trainvault.approval",
    "ArtifactRef": "trainvault.approval",
    "PositionBudget": "trainvault.approval",
    "write_approval": "trainvault.approval",
    "Frame": "trainvault.components",
    "split_frame": "trainvault.components",
    "ContaminationReport": "trainvault.contamination",
    "EvaluationRelease": "trainvault.contamination",
    "VerifierContract": "trainvault.contamination",
    "RepresentationExample": "trainvault.representations",
    "RolloutArchive": "trainvault.rollouts",
    "iter_archive_samples": "trainvault.rollouts",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainvault' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "FORMATS",
    "ApprovalError",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovedDataset",
    "ArchiveExistsError",
    "ArtifactRef",
    "AuthenticationError",
    "BudgetError",
    "ConfigurationError",
    "ConflictError",
    "ContaminationError",
    "ContaminationReport",
    "Curriculum",
    "CustodyError",
    "DataManifest",
    "DatasetSaver",
    "DecodeError",
    "EncodeError",
    "EvaluationRelease",
    "Frame",
    "IntegrityError",
    "InvalidNameError",
    "LoaderStallError",
    "ManifestError",
    "ObjectNotFoundError",
    "ObjectRef",
    "ObjectTooLargeError",
    "PositionBudget",
    "ProfileError",
    "Publication",
    "RepresentationExample",
    "ResumeStateError",
    "RolloutArchive",
    "SampleNotFoundError",
    "SelectionError",
    "ShardDescriptor",
    "ShardEntry",
    "ShardReader",
    "SplitManifest",
    "Storage",
    "StorageConfig",
    "StorageError",
    "StorageTimeoutError",
    "TaskDataValidationError",
    "TrainVault",
    "TrainVaultError",
    "TransientStorageError",
    "UngatedDataWarning",
    "UnscannedFieldError",
    "UntrustedSignerError",
    "VerifierContract",
    "WrongDocumentError",
    "__version__",
    "iter_archive_samples",
    "iter_shard",
    "split_frame",
    "write_approval",
]
