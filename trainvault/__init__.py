"""trainvault: the custody chain for model-training data.

The names a trainer or a pipeline needs most; each subpackage (`approval`,
`contamination`, `loading`, `profile`, `rollouts`, `components`, `representations`)
exports the rest. Importing trainvault imports no Dagster, torch, numpy, pyarrow or
safetensors.
"""

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
)
from trainvault.formats import FORMATS
from trainvault.lazy import lazy_exports
from trainvault.publication.manifest import DataManifest
from trainvault.publication.reader import iter_shard
from trainvault.publication.saver import DatasetSaver
from trainvault.refs import ObjectRef
from trainvault.storage import StorageConfig

# Names from the heavier subpackages load on first use, so a trainer that only reads
# data does not pay for signing, scanning or archive code at import time.
_LAZY = {
    "ApprovalPolicy": "trainvault.approval",
    "ApprovalRequest": "trainvault.approval",
    "ApprovedDataset": "trainvault.approval",
    "PositionBudget": "trainvault.loading",
    "VerifierContract": "trainvault.contamination",
}


__getattr__ = lazy_exports(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "FORMATS",
    "ApprovalError",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovedDataset",
    "ArchiveExistsError",
    "AuthenticationError",
    "BudgetError",
    "ConfigurationError",
    "ConflictError",
    "ContaminationError",
    "CustodyError",
    "DataManifest",
    "DatasetSaver",
    "DecodeError",
    "EncodeError",
    "IntegrityError",
    "InvalidNameError",
    "LoaderStallError",
    "ManifestError",
    "ObjectNotFoundError",
    "ObjectRef",
    "ObjectTooLargeError",
    "PositionBudget",
    "ProfileError",
    "ResumeStateError",
    "SampleNotFoundError",
    "SelectionError",
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
    "iter_shard",
]
