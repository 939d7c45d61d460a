"""Dataset profiles: mergeable metrics per split, task-data validation, metrics sidecars."""

from trainvault.profile.sidecar import (
    DatasetProfile,
    MetricsSidecar,
    approval_sidecars,
    profile_publication,
    read_metrics_sidecar,
    write_metrics_sidecars,
)

__all__ = [
    "DatasetProfile",
    "MetricsSidecar",
    "approval_sidecars",
    "profile_publication",
    "read_metrics_sidecar",
    "write_metrics_sidecars",
]
