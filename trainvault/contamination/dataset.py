"""Scan a whole publication and write its report: the pieces wired together for one process.

At scale the Dagster side runs `scan_shard` per shard partition and `reduce_report` once;
this helper does the same in a loop, for the CLI, tests and small datasets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TextIO

from trainvault.contamination.contract import VerifierContract
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.release import load_release
from trainvault.contamination.report import ContaminationReport, reduce_report
from trainvault.contamination.scan import ShardScanResult, scan_shard
from trainvault.progress import Progress, terminal_bar
from trainvault.publication.bound import Bound, read_document, write_document
from trainvault.publication.manifest import ShardEntry
from trainvault.publication.pinned import Publication
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of


class ScanProgress(Progress):
    """Shards finished and shard bytes read, of the totals expected."""

    @property
    def shards_done(self) -> int:
        return self.done

    @property
    def shards_total(self) -> int:
        return self.total


ScanProgressCallback = Callable[[ScanProgress], None]


def terminal_progress(label: str = "contamination scan", stream: TextIO | None = None) -> ScanProgressCallback | None:
    """A callback drawing a one-line bar on `stream` (stderr), or None when it is not a terminal."""
    return terminal_bar(label, "shards", stream)


def load_index(storage: StorageSource, release: ObjectRef | Referenced, contract: ObjectRef | Referenced) -> EvalIndex:
    """Read a release and a contract, each checked against its reference's SHA-256, and build their index."""
    contract_doc = read_document(storage_of(storage), VerifierContract, contract.uri, sha256=contract.sha256)
    loaded = load_release(storage_of(storage), release.uri, sha256=release.sha256)
    return EvalIndex(contract_doc.document, loaded, contract_sha256=contract_doc.sha256)


def scan_dataset(
    storage: StorageSource,
    manifest_uri: str,
    index: EvalIndex,
    *,
    scan_manifest_sha256: str,
    producer_pins_sha256: str,
    manifest_sha256: str | None = None,
    progress: ScanProgressCallback | Literal[False] | None = None,
) -> ContaminationReport:
    """Scan every shard of the publication at `manifest_uri` and reduce the report.

    An identical shard listed twice is read once. `progress`: a callback, False for
    none, or None for a bar on stderr when it is a terminal.
    """
    storage = storage_of(storage)
    publication = Publication.load(storage, manifest_uri, sha256=manifest_sha256)
    manifest, digest = publication.manifest, publication.sha256
    callback = terminal_progress() if progress is None else (progress or None)
    entries: dict[str, ShardEntry] = {}
    for split in manifest.splits.values():
        for e in split.shards:
            entries.setdefault(e.sha256, e)
    total = sum(e.size_bytes for e in entries.values())
    done = [0, 0]

    def on_bytes(n: int) -> None:
        done[1] += n
        if callback is not None:
            callback(ScanProgress(done[0], len(entries), done[1], total))

    results: list[ShardScanResult] = []
    for e in entries.values():
        results.append(scan_shard(storage, manifest.data_format, e, index, on_bytes=on_bytes))
        done[0] += 1
        if callback is not None:
            callback(ScanProgress(done[0], len(entries), done[1], total))
    return reduce_report(
        index,
        manifest,
        results,
        data_manifest_sha256=digest,
        scan_manifest_sha256=scan_manifest_sha256,
        producer_pins_sha256=producer_pins_sha256,
    )


def write_report(storage: StorageSource, uri: str, report: ContaminationReport) -> Bound[ContaminationReport]:
    """Publish the report create-only; its digest is of the bytes written."""
    return write_document(storage_of(storage), uri, report)


def read_report(storage: StorageSource, uri: str, *, sha256: str | None = None) -> Bound[ContaminationReport]:
    """Read a report, refusing bytes that do not match `sha256` when given."""
    return read_document(storage_of(storage), ContaminationReport, uri, sha256=sha256)
