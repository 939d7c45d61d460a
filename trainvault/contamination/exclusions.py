"""Exclusions (exclusions-v1.json): the training records an approval leaves out, and why.

Generated from a contamination report: every record a hit names is listed once, with the
benchmark items found in it. An approval request binds the document like any artifact;
the gate checks that it covers every hit of the bound report, and the approved loader
skips exactly these records.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from trainvault.canonical import is_sha256_hex
from trainvault.contamination.report import ContaminationReport
from trainvault.contamination.report_items import item_sort_key
from trainvault.documents import Document, StrictModel
from trainvault.errors import ContaminationError
from trainvault.publication.manifest import natural_key
from trainvault.refs import Sha256

EXCLUSIONS_NAME = "exclusions-v1.json"
#: The request sidecar name an exclusions document is bound under.
EXCLUSIONS_SIDECAR = "exclusions"


class ExclusionReason(StrictModel):
    """A benchmark item whose text was found in the record."""

    benchmark: str
    item_id: str


class ExcludedRecord(StrictModel):
    """One record of one shard, by its 0-based index in shard order."""

    split: str
    shard: str
    shard_sha256: Sha256
    record_index: int = Field(ge=0)
    reasons: list[ExclusionReason] = Field(min_length=1)


def _record_key(r: ExcludedRecord) -> tuple[object, ...]:
    return (r.split, natural_key(r.shard), r.shard, r.record_index)


class Exclusions(Document):
    """exclusions-v1: records left out of an approved dataset, sorted, each once."""

    KIND = "trainvault.exclusions"
    #: The file name the writers give it.
    FILE_NAME: ClassVar[str] = EXCLUSIONS_NAME

    format: Literal["trainvault.exclusions"] = "trainvault.exclusions"
    version: Literal[1] = 1
    data_manifest_sha256: Sha256
    #: The stored bytes of the report the records were taken from (a signed envelope or a plain report).
    contamination_report_sha256: Sha256
    records: list[ExcludedRecord]

    @model_validator(mode="after")
    def _sorted(self) -> Exclusions:
        keys = [_record_key(r) for r in self.records]
        if keys != sorted(set(keys)):
            raise ValueError("records must be sorted by split, shard and record index, each record once")
        for r in self.records:
            reasons = [(x.benchmark, item_sort_key(x.item_id)) for x in r.reasons]
            if reasons != sorted(set(reasons)):
                raise ValueError(f"record {r.split}/{r.shard}#{r.record_index}: reasons must be sorted, each once")
        return self

    def by_shard(self, split: str) -> Mapping[str, frozenset[int]]:
        """Shard key -> excluded record indices of `split` (the loader's ``exclude=``), read-only."""
        out: dict[str, set[int]] = {}
        for r in self.records:
            if r.split == split:
                out.setdefault(r.shard, set()).add(r.record_index)
        return MappingProxyType({k: frozenset(v) for k, v in out.items()})

    def per_benchmark(self) -> dict[str, int]:
        """Benchmark name -> how many excluded records it gave a reason for."""
        out: dict[str, int] = {}
        for r in self.records:
            for name in {x.benchmark for x in r.reasons}:
                out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items()))


def truncated_items(report: ContaminationReport) -> list[str]:
    """Contaminated items whose hit list the report capped (it names fewer records than it found)."""
    return [f"{it.benchmark}/{it.item_id}" for it in report.contaminated_items if it.hits_total > len(it.hits)]


def exclusions_from_report(report: ContaminationReport, *, report_sha256: str) -> Exclusions:
    """Every record a hit of `report` names, with the items found there.

    `report_sha256`: the digest of the report's stored bytes (what a request binds). A
    report that capped an item's hits (``hits_total`` above the hits listed) cannot name
    every record: `ContaminationError`; raise the contract's ``max_hits_per_item`` and rescan.
    """
    if not isinstance(report, ContaminationReport):
        raise TypeError(f"exclusions_from_report needs a ContaminationReport, not {type(report).__name__}")
    if not isinstance(report_sha256, str) or not is_sha256_hex(report_sha256):
        raise ContaminationError(f"report_sha256 must be a 64-character lowercase hex sha256, got {report_sha256!r}")
    capped = truncated_items(report)
    if capped:
        raise ContaminationError(
            f"the report lists only some hits of {len(capped)} item(s) (first: {capped[0]}): exclusions would miss "
            "records; raise the verifier contract's max_hits_per_item and rescan"
        )
    found: dict[tuple[str, str, int], tuple[str, set[tuple[str, str]]]] = {}
    for it in report.contaminated_items:
        for h in it.hits:
            _sha, reasons = found.setdefault((h.split, h.shard, h.record_index), (h.shard_sha256, set()))
            reasons.add((it.benchmark, it.item_id))
    records = [
        ExcludedRecord(
            split=split,
            shard=shard,
            shard_sha256=sha,
            record_index=index,
            reasons=[
                ExclusionReason(benchmark=b, item_id=i)
                for b, i in sorted(reasons, key=lambda x: (x[0], item_sort_key(x[1])))
            ],
        )
        for (split, shard, index), (sha, reasons) in found.items()
    ]
    return Exclusions(
        data_manifest_sha256=report.training.data_manifest_sha256,
        contamination_report_sha256=report_sha256,
        records=sorted(records, key=_record_key),
    )
