"""A fresh benchmark publication and the custody chain around it: scan manifest, producer
pins, a small evaluation release, the verifier contract, the contamination report, and the
approval request binding them. Shared by the benchmarks that go through the gate."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainvault import TrainVault
from trainvault.approval import (
    ApprovalRequest,
    ArtifactRef,
    SigningKey,
    build_training_scan_manifest,
    collect_producer_pins,
    write_attestation,
    write_producer_pins,
    write_training_scan_manifest,
)
from trainvault.canonical import sha256_hex
from trainvault.contamination import (
    VerifierContract,
    jsonl_benchmark,
    load_index,
    publish_release,
    scan_dataset,
    write_report,
)
from trainvault.publication.bound import publish_document

#: Benchmark items whose words never occur in the synthetic corpus: the report passes.
ITEMS = b"".join(
    b'{"id": "item-%d", "text": "%s"}\n' % (i, " ".join(f"zq{i}w{j}" for j in range(20)).encode()) for i in range(8)
)


def publish_train(
    folder: Path, records: int, shard_records: int, make: Callable[[int, int], Iterable[dict[str, Any]]]
) -> tuple[TrainVault, str]:
    """Empty `folder` and commit `records` train records in shards of `shard_records` under
    it; `make(count, start)` gives a shard's records. Returns the vault and the manifest URI."""
    shutil.rmtree(folder, ignore_errors=True)
    vault = TrainVault()
    manifest_uri = f"{folder}/ds/data-manifest-v1.json"
    saver = vault.dataset_saver(manifest_uri)
    for i, start in enumerate(range(0, records, shard_records)):
        saver.save("train", None, make(min(shard_records, records - start), start), shard_id=f"{i:05d}")
    saver.commit_manifest()
    return vault, manifest_uri


def approval_request(
    vault: TrainVault,
    root: str,
    manifest_uri: str,
    *,
    sidecars: dict[str, ArtifactRef] | None = None,
    scanner_key: SigningKey | None = None,
) -> ApprovalRequest:
    """Write every artifact of the chain under `root` and return the request that binds them
    (with `scanner_key`, the scan manifest and report as attestations signed by it)."""

    def write(name: str, document: Any, plain: Callable[..., Any]) -> Any:
        if scanner_key is None:
            return plain(vault, f"{root}/ds/{name}-v1.json", document)
        return write_attestation(vault, f"{root}/ds/{name}-v1.dsse.json", document, signing_keys=scanner_key)

    scan = write(
        "training-scan-manifest", build_training_scan_manifest(vault, manifest_uri), write_training_scan_manifest
    )
    pins = write_producer_pins(vault, f"{root}/ds/producer-pins-v1.json", collect_producer_pins())
    release = publish_release(vault.storage, f"{root}/release", "bench", [jsonl_benchmark("bench", ITEMS)])
    contract = publish_document(vault.storage, f"{root}/verifier-contract-v1.json", VerifierContract())
    index = load_index(vault, release_uri=release.uri, contract_uri=contract.uri)
    report = write(
        "contamination-report",
        scan_dataset(
            vault,
            manifest_uri,
            index,
            scan_manifest_sha256=scan.sha256,
            producer_pins_sha256=pins.sha256,
            progress=False,
        ),
        write_report,
    )
    return ApprovalRequest(
        data_manifest=ArtifactRef(uri=manifest_uri, sha256=sha256_hex(vault.storage.get(manifest_uri))),
        training_scan_manifest=ArtifactRef(uri=scan.uri, sha256=scan.sha256),
        evaluation_release=ArtifactRef(uri=release.uri, sha256=release.sha256),
        contamination_report=ArtifactRef(uri=report.uri, sha256=report.sha256),
        verifier_contract=ArtifactRef(uri=contract.uri, sha256=contract.sha256),
        producer_pins=ArtifactRef(uri=pins.uri, sha256=pins.sha256),
        **({"sidecars": sidecars} if sidecars else {}),
    )
