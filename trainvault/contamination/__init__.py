"""Contamination scanning: normalisation, evaluation index, per-shard scan, report reduce.

Importing this package needs no numpy; building an index does (``trainvault[contamination]``).
"""

from trainvault.contamination.contract import DEFAULT_CONTRACT, V1_CONTRACT, MethodSpec, Policy, VerifierContract
from trainvault.contamination.dataset import (
    ScanProgress,
    load_index,
    read_report,
    scan_dataset,
    terminal_progress,
    write_report,
)
from trainvault.contamination.exclusions import (
    EXCLUSIONS_NAME,
    EXCLUSIONS_SIDECAR,
    ExcludedRecord,
    ExclusionReason,
    Exclusions,
    exclusions_from_report,
)
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.normalize import NormalizationSpec, Normalizer
from trainvault.contamination.release import (
    BenchmarkItems,
    EvaluationRelease,
    LoadedRelease,
    humaneval_benchmark,
    jsonl_benchmark,
    load_release,
    publish_release,
)
from trainvault.contamination.report import ContaminationReport, reduce_report
from trainvault.contamination.scan import ShardScanResult, scan_records, scan_shard
from trainvault.contamination.text_fields import TextFieldSurvey

__all__ = [
    "DEFAULT_CONTRACT",
    "EXCLUSIONS_NAME",
    "EXCLUSIONS_SIDECAR",
    "V1_CONTRACT",
    "BenchmarkItems",
    "ContaminationReport",
    "EvalIndex",
    "EvaluationRelease",
    "ExcludedRecord",
    "ExclusionReason",
    "Exclusions",
    "LoadedRelease",
    "MethodSpec",
    "NormalizationSpec",
    "Normalizer",
    "Policy",
    "ScanProgress",
    "ShardScanResult",
    "TextFieldSurvey",
    "VerifierContract",
    "exclusions_from_report",
    "humaneval_benchmark",
    "jsonl_benchmark",
    "load_index",
    "load_release",
    "publish_release",
    "read_report",
    "reduce_report",
    "scan_dataset",
    "scan_records",
    "scan_shard",
    "terminal_progress",
    "write_report",
]
