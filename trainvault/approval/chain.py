"""The approval chain of one publication, assembled in one place.

pins -> release -> contract -> index -> scan -> report -> request: `build_approval_chain`
writes every artifact the gate judges for a committed data manifest and returns them
bound (`ApprovalChain`), whose `request` is what `approve_dataset` takes. A pipeline that
writes each artifact in its own step (the code location's assets) hands the references
to `ApprovalChain` and asks it for the request, so the request is put together the same
way everywhere.

Layout: the scan manifest, producer pins and report go beside the data manifest
(`SCAN_MANIFEST_NAME`, `PINS_NAME`, `REPORT_NAME`; signed by a scanner key, the scan
manifest and report are attestations named `SCAN_ATTESTATION_NAME` and
`REPORT_ATTESTATION_NAME`); the release under `release_root`, the contract at
`contract_uri`. Every write is create-only: the same chain built again writes nothing
new, and another chain in the same place is a `ConflictError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainvault.approval.attestation import REPORT_ATTESTATION_NAME, SCAN_ATTESTATION_NAME, write_attestation
from trainvault.approval.keys import SigningKey
from trainvault.approval.pins import PINS_NAME, ProducerPins, collect_producer_pins, write_producer_pins
from trainvault.approval.request import BINDINGS, ApprovalRequest
from trainvault.approval.scan_manifest import (
    SCAN_MANIFEST_NAME,
    build_training_scan_manifest,
    write_training_scan_manifest,
)
from trainvault.canonical import sha256_hex
from trainvault.contamination import (
    VerifierContract,
    load_index,
    publish_release,
    scan_dataset,
    write_report,
)
from trainvault.contamination.report import REPORT_NAME
from trainvault.publication.bound import write_document
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import normalize_uri, parent_uri

if TYPE_CHECKING:
    from trainvault.contamination import BenchmarkItems, ContaminationReport
    from trainvault.contamination.index import EvalIndex


@dataclass(frozen=True)
class ApprovalChain:
    """The six artifacts an approval binds, each by (uri, sha256); with `report` and `index`
    when `build_approval_chain` made them (None when a caller handed the references in)."""

    data_manifest: ObjectRef
    training_scan_manifest: ObjectRef
    evaluation_release: ObjectRef
    verifier_contract: ObjectRef
    producer_pins: ObjectRef
    contamination_report: ObjectRef
    report: ContaminationReport | None = field(default=None, compare=False)
    index: EvalIndex | None = field(default=None, compare=False, repr=False)

    def refs(self) -> dict[str, ObjectRef]:
        """The bindings by their `ApprovalRequest` field names, in the order the gate reads them."""
        return {name: getattr(self, name) for name in BINDINGS}

    def request(
        self, sidecars: Mapping[str, ObjectRef | Referenced] | None = None, **overrides: ObjectRef | Referenced
    ) -> ApprovalRequest:
        """The approval request binding this chain (any binding replaced by `overrides`) and `sidecars`
        (references of any writer: the request keeps their uri and sha256)."""
        unknown = sorted(set(overrides) - set(BINDINGS))
        if unknown:
            raise TypeError(
                f"not bindings of an approval request: {', '.join(unknown)} (bindings: {', '.join(BINDINGS)})"
            )
        bindings = {**self.refs(), **overrides, "sidecars": dict(sidecars or {})}
        return ApprovalRequest.model_validate(bindings)


def build_approval_chain(
    storage: StorageSource,
    manifest_uri: str,
    *,
    release_root: str,
    release_id: str,
    benchmarks: Iterable[BenchmarkItems],
    contract_uri: str,
    contract: VerifierContract | None = None,
    pins: ProducerPins | None = None,
    scanner_key: SigningKey | None = None,
) -> ApprovalChain:
    """Write the approval chain of the committed data manifest at `manifest_uri`: its training
    scan manifest, producer `pins` (default: `collect_producer_pins()`), the evaluation release
    of `benchmarks`, the verifier `contract` (default: `VerifierContract()`), and the
    contamination report of scanning the data against them. With `scanner_key`, the scan
    manifest and report are written as attestations signed by it."""
    store = storage_of(storage)
    manifest_uri = normalize_uri(manifest_uri)
    folder = parent_uri(manifest_uri)
    manifest_sha256 = sha256_hex(store.get(manifest_uri))
    scan = build_training_scan_manifest(store, manifest_uri, manifest_sha256=manifest_sha256)
    if scanner_key is None:
        scan_b = write_training_scan_manifest(store, f"{folder}/{SCAN_MANIFEST_NAME}", scan)
    else:
        scan_b = write_attestation(store, f"{folder}/{SCAN_ATTESTATION_NAME}", scan, signing_keys=scanner_key)
    pins_b = write_producer_pins(store, f"{folder}/{PINS_NAME}", pins or collect_producer_pins())
    release = publish_release(store, release_root, release_id, benchmarks)
    contract_b = write_document(store, contract_uri, contract or VerifierContract())
    index = load_index(store, release, contract_b)
    report = scan_dataset(
        store,
        manifest_uri,
        index,
        scan_manifest_sha256=scan_b.sha256,
        producer_pins_sha256=pins_b.sha256,
        manifest_sha256=manifest_sha256,
        progress=False,
    )
    if scanner_key is None:
        report_b = write_report(store, f"{folder}/{REPORT_NAME}", report)
    else:
        report_b = write_attestation(store, f"{folder}/{REPORT_ATTESTATION_NAME}", report, signing_keys=scanner_key)
    return ApprovalChain(
        data_manifest=ObjectRef(uri=manifest_uri, sha256=manifest_sha256),
        training_scan_manifest=ObjectRef(uri=scan_b.uri, sha256=scan_b.sha256),
        evaluation_release=ObjectRef(uri=release.uri, sha256=release.sha256),
        verifier_contract=ObjectRef(uri=contract_b.uri, sha256=contract_b.sha256),
        producer_pins=ObjectRef(uri=pins_b.uri, sha256=pins_b.sha256),
        contamination_report=ObjectRef(uri=report_b.uri, sha256=report_b.sha256),
        report=report,
        index=index,
    )
