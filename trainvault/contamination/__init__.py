"""Contamination scanning: normalisation, evaluation index, per-shard scan, report reduce.

Importing this package needs no numpy; building an index does (``trainvault[contamination]``).
"""

from trainvault.contamination.contract import MethodSpec, VerifierContract
from trainvault.contamination.dataset import load_index, scan_dataset, write_report
from trainvault.contamination.exclusions import EXCLUSIONS_SIDECAR, Exclusions, exclusions_from_report
from trainvault.contamination.release import (
    BenchmarkItems,
    EvaluationRelease,
    humaneval_benchmark,
    jsonl_benchmark,
    publish_release,
)
from trainvault.contamination.report import ContaminationReport, reduce_report
from trainvault.contamination.scan import ShardScanResult, scan_records

__all__ = [
    "EXCLUSIONS_SIDECAR",
    "BenchmarkItems",
    "ContaminationReport",
    "EvaluationRelease",
    "Exclusions",
    "MethodSpec",
    "ShardScanResult",
    "VerifierContract",
    "exclusions_from_report",
    "humaneval_benchmark",
    "jsonl_benchmark",
    "load_index",
    "publish_release",
    "reduce_report",
    "scan_dataset",
    "scan_records",
    "write_report",
]
