"""Rollout archives: immutable, indexed archives of RL rollout samples over a content-addressed pool."""

from trainvault.rollouts.archive import RolloutArchive
from trainvault.rollouts.feed import iter_archive_samples

__all__ = [
    "RolloutArchive",
    "iter_archive_samples",
]
