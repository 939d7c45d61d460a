"""Scan a whole publication and write its report: the pieces wired together for one process.

At scale the Dagster side runs `scan_shard` per shard partition and `reduce_report` once;
this helper does the same in a loop, for the CLI, tests and small datasets.
"""

from __future__ import annotations

from trainvault.canonical import sha256_hex
from trainvault.contamination.bound import Bound, publish_document, read_document
from trainvault.contamination.contract import VerifierContract
from trainvault.contamination.index import EvalIndex
from trainvault.contamination.progress import ProgressCallback, ScanProgress, terminal_progress
from trainvault.contamination.release import load_release
from trainvault.contamination.report import ContaminationReport, reduce_report
from trainvault.contamination.scan import ShardScanResult, scan_shard
from trainvault.client import TrainVault, resolve_manifest_uris
from trainvault.manifest import DataManifest
from trainvault.storage import normalize_uri, parent_uri


def load_index(
    vault: TrainVault,
    *,
    release_uri: str,
    contract_uri: str,
    release_sha256: str | None = None,
    contract_sha256: str | None = None,
) -> EvalIndex:
    """Read (and with digests, check) a release and a contract, and build their index."""
    contract = read_document(vault.storage, VerifierContract, contract_uri, sha256=contract_sha256)
    release = load_release(vault.storage, release_uri, sha256=release_sha256)
    return EvalIndex(contract.document, release, contract_sha256=contract.sha256)


def scan_dataset(
    vault: TrainVault,
    manifest_uri: str,
    index: EvalIndex,
    *,
    scan_manifest_sha256: str,
    producer_pins_sha256: str,
    manifest_sha256: str | None = None,
    progress: ProgressCallback | bool | None = None,
) -> ContaminationReport:
    """Scan every shard of the publication at `manifest_uri` and reduce the report.

    An identical shard listed twice is read once. `progress`: a callback, False for
    none, or None for a bar on stderr when it is a terminal.
    """
    uri = normalize_uri(manifest_uri)
    raw = vault.storage.get_document(uri)
    digest = sha256_hex(raw)
    if manifest_sha256 is not None and digest != manifest_sha256:
        from trainvault.errors import IntegrityError

        raise IntegrityError(f"{uri}: sha256 is {digest}, expected {manifest_sha256}; bind the manifest you mean")
    manifest = resolve_manifest_uris(DataManifest.from_json_bytes(raw, source=uri), parent_uri(uri))
    callback = terminal_progress() if progress is None else (progress or None)
    entries = {}
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
        results.append(scan_shard(vault.storage, manifest.data_format, e, index, on_bytes=on_bytes))
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


def write_report(vault: TrainVault, uri: str, report: ContaminationReport) -> Bound[ContaminationReport]:
    """Publish the report create-only; its digest is of the bytes written."""
    return publish_document(vault.storage, uri, report)


def read_report(vault: TrainVault, uri: str, *, sha256: str | None = None) -> Bound[ContaminationReport]:
    """Read a report, refusing bytes that do not match `sha256` when given."""
    return read_document(vault.storage, ContaminationReport, uri, sha256=sha256)
