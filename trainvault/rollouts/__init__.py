"""Rollout archives: immutable, indexed archives of RL rollout samples over a content-addressed pool."""

from trainvault.rollouts.archive import RolloutArchive
from trainvault.rollouts.documents import ArchiveIndex, MetadataSidecar, OwnerRecord
from trainvault.rollouts.feed import iter_archive_samples
from trainvault.rollouts.pool import GcReport, gc
from trainvault.rollouts.samples import describe_sample

__all__ = [
    "ArchiveIndex",
    "GcReport",
    "MetadataSidecar",
    "OwnerRecord",
    "RolloutArchive",
    "describe_sample",
    "gc",
    "iter_archive_samples",
]
