"""Dataset profiles: mergeable metrics per split, task-data validation, metrics sidecars."""

from trainvault.profile.accumulators import MAX_CATEGORICAL_LABELS, AvgMinMax, CategoricalMetrics, StringMetrics
from trainvault.profile.metrics import DatasetMetrics, ExtraMetricsHook, json_dumped_number_of_words, task_identity
from trainvault.profile.sidecar import (
    DatasetProfile,
    MetricsSidecar,
    ProfileSettings,
    ShardProfile,
    SidecarRef,
    SplitProfile,
    approval_sidecars,
    differing_keys,
    profile_publication,
    profile_shard,
    read_metrics_sidecar,
    sidecar_name,
    sidecar_uri,
    write_metrics_sidecar,
    write_metrics_sidecars,
)
from trainvault.profile.validation import (
    MAX_RECORDED_OFFENDING_ROWS,
    OffendingRow,
    TaskDataValidator,
    ValidationMode,
    load_schema,
)

__all__ = [
    "MAX_CATEGORICAL_LABELS",
    "MAX_RECORDED_OFFENDING_ROWS",
    "AvgMinMax",
    "CategoricalMetrics",
    "DatasetMetrics",
    "DatasetProfile",
    "ExtraMetricsHook",
    "MetricsSidecar",
    "OffendingRow",
    "ProfileSettings",
    "ShardProfile",
    "SidecarRef",
    "SplitProfile",
    "StringMetrics",
    "TaskDataValidator",
    "ValidationMode",
    "approval_sidecars",
    "differing_keys",
    "json_dumped_number_of_words",
    "load_schema",
    "profile_publication",
    "profile_shard",
    "read_metrics_sidecar",
    "sidecar_name",
    "sidecar_uri",
    "task_identity",
    "write_metrics_sidecar",
    "write_metrics_sidecars",
]
