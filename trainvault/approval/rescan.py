"""The gate's re-scan: scan a seeded sample of shards again and compare with the report.

A signature says which scanner wrote a report, not that the report is true. The gate
therefore scans some shards itself (every shard when the policy trusts no scanner key)
and denies a report whose results for those shards differ: an item the re-scan finds
that the report omits, or hits the report lists that the re-scan does not reproduce.
The drawn shards are scanned from the bytes the gate's hash pass reads, not read again.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Mapping

from trainvault.approval.checks import deny
from trainvault.approval.hashing import ChunkConsumer
from trainvault.approval.policy import ApprovalPolicy
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.report import ContaminationReport
from trainvault.contamination.scan import ScanFeed, ShardItemHits, ShardScanResult
from trainvault.contamination.text_fields import TextFieldSurvey
from trainvault.documents import StrictModel
from trainvault.publication.manifest import ShardEntry
from trainvault.publication.pinned import Publication
from trainvault.storage import Storage
from trainvault.uris import normalize_uri

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


class Rescan:
    """The policy's sample of shards, scanned from the bytes the gate's hash pass reads (no second
    read): `consumers` for `hash_objects`, then `finish` compares each with the report. `survey`
    observes the drawn shards' records."""

    def __init__(
        self,
        storage: Storage,
        publication: Publication,
        index: EvalIndex,
        policy: ApprovalPolicy,
        survey: TextFieldSurvey | None = None,
    ):
        self.publication = publication
        self.seed, self.drawn = sample_shards(publication, policy)
        data_format = publication.manifest.data_format
        # A descriptor attached from the pack is used as it is (no request per drawn shard).
        self.feeds = {
            normalize_uri(entry.uri): ScanFeed(
                storage, data_format, entry, index, survey, publication.descriptors.get(entry.descriptor_uri)
            )
            for entry in (group[0][1] for group in self.drawn)
        }

    def consumers(self) -> dict[str, Callable[[], ChunkConsumer]]:
        """A consumer for each drawn shard (by the URI the gate hashes it under)."""
        return {uri: _giving(feed) for uri, feed in self.feeds.items()}

    def finish(self, report: ContaminationReport) -> RescanSummary:
        """Deny a report that disagrees with any drawn shard's re-scan, once the hash pass fed them."""
        for group in self.drawn:
            result = self.feeds[normalize_uri(group[0][1].uri)].result()
            for split, entry in group:
                _compare(report, split, entry.key, result)
        return RescanSummary(
            seed=self.seed,
            shards_total=len({e.sha256 for _, e in self.publication.entries()}),
            shards=[f"{split}/{entry.key}" for group in self.drawn for split, entry in group],
        )


def _giving(feed: ScanFeed) -> Callable[[], ChunkConsumer]:
    """A consumer factory that hands out `feed` itself."""
    return lambda: feed


def _compare(report: ContaminationReport, split: str, key: str, result: ShardScanResult) -> None:
    """Deny unless the report's hits in shard (split, key) are what the re-scan found there."""
    where = f"shard {split}/{key}"
    found: Mapping[tuple[str, str], ShardItemHits] = {(it.benchmark, it.item_id): it for it in result.items}
    # ngram-exact-v3's uncounted items are matches too: the re-scan finds them where the report lists them.
    listed = {(it.benchmark, it.item_id): it for it in [*report.contaminated_items, *(report.uncounted_items or [])]}
    for (bench, item_id), got in found.items():
        if (bench, item_id) not in listed:
            deny(
                f"re-scanning {where} finds {bench} item {item_id!r} (record {got.hits[0].record_index if got.hits else '?'}), "
                "which the contamination report does not list: the report does not describe this data (a forged "
                "report or a faulty scanner); do not train on it: rescan with a trusted scanner and review its key"
            )
    for (bench, item_id), item in listed.items():
        mine = [h.model_dump(mode="json", exclude=_PLACEMENT) for h in item.hits if (h.split, h.shard) == (split, key)]
        rescanned = found.get((bench, item_id))
        theirs = [h.model_dump(mode="json") for h in rescanned.hits] if rescanned is not None else []
        complete = item.hits_total == len(item.hits)
        if mine != theirs[: len(mine)] or (
            complete and len(mine) != (rescanned.hits_total if rescanned is not None else 0)
        ):
            deny(
                f"re-scanning {where}: the report lists {len(mine)} hit(s) of {bench} item {item_id!r} there, the "
                f"re-scan finds {rescanned.hits_total if rescanned is not None else 0} at other places: the report does not "
                "describe this data (a forged report or a faulty scanner); rescan with a trusted scanner"
            )
