"""The trainvault exception family.

Every error names the object it concerns and what to do about it. Callers catch
`TrainVaultError` to handle anything trainvault refuses. The one warning,
`UngatedDataWarning`, marks a read that bypasses the approval gate.
"""

from __future__ import annotations


class TrainVaultError(Exception):
    """Base class of every error trainvault raises on purpose."""


class StorageError(TrainVaultError):
    """An object store operation failed."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The object does not exist (also a `FileNotFoundError`)."""


class AuthenticationError(StorageError):
    """The store refused the credentials."""


class StorageTimeoutError(StorageError, TimeoutError):
    """A read or write made no progress within its time window."""


class LoaderStallError(TrainVaultError, TimeoutError):
    """The loader's watchdog gave up: no batch within `watchdog_s` (``on_stall="raise"``)."""


class TransientStorageError(StorageError):
    """A network failure that may succeed on another attempt (raised only once recovery gave up
    on it, as the cause of a `StorageTimeoutError`)."""


class ObjectTooLargeError(StorageError):
    """An object exceeds a size limit: the single-put limit of create-only writes, or a read's cap
    (`StorageConfig.max_document_bytes` for JSON documents)."""


class IntegrityError(TrainVaultError):
    """Bytes on storage do not match the digest or size that binds them."""


class ConflictError(TrainVaultError):
    """A create-only object already exists with different content."""


class ConfigurationError(TrainVaultError, ValueError):
    """A setting has a value out of range or contradicting another (a batch size, a rank, a block size)."""


class ManifestError(TrainVaultError, ValueError):
    """A manifest, descriptor or other document is malformed or unsupported."""


class WrongDocumentError(ManifestError):
    """A document of another kind than the one asked for (a data manifest given where an approval
    record belongs): the message says what it is and what reads it."""


class InvalidNameError(ManifestError):
    """A split, stage or shard id is not a safe name."""


class EncodeError(TrainVaultError, ValueError):
    """A record cannot be encoded in the shard format."""


class DecodeError(IntegrityError):
    """Stored bytes do not decode in their declared format."""


class ApprovalError(TrainVaultError):
    """The approval gate refused a dataset."""


class ContaminationError(TrainVaultError):
    """Contamination inputs are malformed or inconsistent."""


class SelectionError(TrainVaultError, ValueError):
    """A selection (split, stage, source, ...) names something that is not published."""


class SampleNotFoundError(SelectionError, KeyError):
    """A rollout archive holds no sample with the selected keys (also a `KeyError`)."""

    # KeyError's own str() would print the message quoted.
    __str__ = Exception.__str__


class ResumeStateError(TrainVaultError, ValueError):
    """A loader state does not belong to this manifest or selection."""


class CustodyError(ApprovalError):
    """Something outside the approved custody was asked for (an unapproved object, a write)."""


class RevokedError(ApprovalError):
    """The approval was withdrawn by a revocation its trusted keys signed; `revocation` is that
    revocation's URI and `reason` the reason it gives."""

    def __init__(self, message: str, *, revocation: str = "", reason: str = ""):
        super().__init__(message)
        self.revocation = revocation
        self.reason = reason


class AmendmentError(ApprovalError):
    """An approval's amendments do not hold: one of another approval, not signed by enough
    trusted keys, a broken chain, one adding records back, or more removed than the policy allows."""


class UnscannedFieldError(ApprovalError):
    """Record fields carry text the verifier contract does not scan and the policy does not exempt;
    `fields` names them (dotted paths)."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = fields


class UntrustedSignerError(ApprovalError):
    """A signed document (a contamination report, a scan manifest) is not signed by enough
    trusted keys; `keyids` names the keys that did sign it."""

    def __init__(self, message: str, keyids: tuple[str, ...] = ()):
        super().__init__(message)
        self.keyids = keyids


class BudgetError(TrainVaultError, ValueError):
    """A position budget is misconfigured (a bad total or boundary) or was asked to go past its end."""


class ProfileError(TrainVaultError, ValueError):
    """Dataset metrics cannot be computed or merged (a bad observation, hook or setting)."""


class TaskDataValidationError(ProfileError):
    """Rows do not match their dataset's task-data schema (validation mode ``error``)."""


class ArchiveExistsError(ConflictError, FileExistsError):
    """A rollout archive already exists at the URI: archives are immutable."""


class UngatedDataWarning(UserWarning):
    """Data is being read without the approval gate (`TrainVault.ungated_loader_factory`): nothing
    checked that it was scanned for contamination or approved. Trainers of released models read
    through `TrainVault.open_approved` instead."""
