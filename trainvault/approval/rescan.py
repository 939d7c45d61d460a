"""The gate's re-scan: scan a seeded sample of shards again and compare with the report.

A signature says which scanner wrote a report, not that the report is true. The gate
therefore scans some shards itself (every shard when the policy trusts no scanner key)
and denies a report whose results for those shards differ: an item the re-scan finds
that the report omits, or hits the report lists that the re-scan does not reproduce.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Mapping

from trainvault.approval.checks import deny
from trainvault.approval.policy import ApprovalPolicy
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.report import ContaminationReport
from trainvault.contamination.scan import ShardItemHits, ShardScanResult, scan_shard
from trainvault.contamination.text_fields import TextFieldSurvey
from trainvault.documents import StrictModel
from trainvault.publication.manifest import ShardEntry
from trainvault.publication.pinned import Publication
from trainvault.storage import Storage

_PLACEMENT = {"split", "shard", "shard_sha256"}


class RescanSummary(StrictModel):
    """What the gate re-scanned: the seed and the shards (``split/key``) it drew."""

    seed: int
    shards_total: int
    shards: list[str]


def sample_shards(publication: Publication, policy: ApprovalPolicy) -> tuple[int, list[list[tuple[str, ShardEntry]]]]:
    """The seed and the drawn shards: each a distinct shard object with every (split, entry) listing it."""
    by_sha: dict[str, list[tuple[str, ShardEntry]]] = {}
    for split, entry in publication.entries():
        by_sha.setdefault(entry.sha256, []).append((split, entry))
    groups = list(by_sha.values())
    seed = policy.rescan_seed if policy.rescan_seed is not None else secrets.randbits(63)
    drawn = sorted(random.Random(seed).sample(range(len(groups)), policy.rescan_count(len(groups))))
    return seed, [groups[i] for i in drawn]


def rescan_report(
    storage: Storage,
    publication: Publication,
    report: ContaminationReport,
    index: EvalIndex,
    policy: ApprovalPolicy,
    survey: TextFieldSurvey | None = None,
) -> RescanSummary:
    """Re-scan the policy's sample of shards with `index` (the bound release under the bound
    contract) and deny a report that disagrees with any of them; `survey` observes their records."""
    seed, drawn = sample_shards(publication, policy)
    for group in drawn:
        first = group[0][1]
        result = scan_shard(storage, publication.manifest.data_format, first, index,
                            descriptor=publication.descriptor(first), survey=survey)
        for split, entry in group:
            _compare(report, split, entry.key, result)
    return RescanSummary(seed=seed, shards_total=len({e.sha256 for _, e in publication.entries()}),
                         shards=[f"{split}/{entry.key}" for group in drawn for split, entry in group])


def _compare(report: ContaminationReport, split: str, key: str, result: ShardScanResult) -> None:
    """Deny unless the report's hits in shard (split, key) are what the re-scan found there."""
    where = f"shard {split}/{key}"
    found: Mapping[tuple[str, str], ShardItemHits] = {(it.benchmark, it.item_id): it for it in result.items}
    listed = {(it.benchmark, it.item_id): it for it in report.contaminated_items}
    for (bench, item_id), got in found.items():
        if (bench, item_id) not in listed:
            deny(f"re-scanning {where} finds {bench} item {item_id!r} (record {got.hits[0].record_index if got.hits else '?'}), "
                 "which the contamination report does not list: the report does not describe this data (a forged "
                 "report or a faulty scanner); do not train on it: rescan with a trusted scanner and review its key")
    for (bench, item_id), item in listed.items():
        mine = [h.model_dump(mode="json", exclude=_PLACEMENT) for h in item.hits if (h.split, h.shard) == (split, key)]
        got = found.get((bench, item_id))
        theirs = [h.model_dump(mode="json") for h in got.hits] if got is not None else []
        complete = item.hits_total == len(item.hits)
        if mine != theirs[: len(mine)] or (complete and len(mine) != (got.hits_total if got is not None else 0)):
            deny(f"re-scanning {where}: the report lists {len(mine)} hit(s) of {bench} item {item_id!r} there, the "
                 f"re-scan finds {got.hits_total if got is not None else 0} at other places: the report does not "
                 "describe this data (a forged report or a faulty scanner); rescan with a trusted scanner")
