"""`build_approval_chain`: the one way the library assembles pins -> release -> contract ->
index -> scan -> report -> request, on a real local store, judged by the real gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainvault import ConflictError, TrainVault
from trainvault.approval import (
    REPORT_ATTESTATION_NAME,
    SCAN_ATTESTATION_NAME,
    ApprovalChain,
    ApprovalPolicy,
    SigningKey,
    build_approval_chain,
    collect_producer_pins,
)
from trainvault.contamination import VerifierContract, jsonl_benchmark
from trainvault.uris import parent_uri

ITEMS = b'{"id": "q1", "text": "zebra quartz violin harbor meadow lantern orbit candle ripple falcon"}\n'


def publish(vault: TrainVault, root: Path) -> str:
    uri = f"{root}/ds/data-manifest-v1.json"
    saver = vault.dataset_saver(uri)
    saver.save("train", None, [{"id": i, "text": f"plain words number {i}"} for i in range(20)], shard_id="s0")
    saver.commit_manifest()
    return uri


def build(vault: TrainVault, root: Path, uri: str, **options: Any) -> ApprovalChain:
    return build_approval_chain(
        vault,
        uri,
        release_root=f"{root}/release",
        release_id="evals",
        benchmarks=[jsonl_benchmark("tiny", ITEMS)],
        contract_uri=f"{root}/verifier-contract-v1.json",
        **options,
    )


def test_the_built_chain_passes_the_gate_and_builds_again_to_the_same_bytes(tmp_path: Path) -> None:
    vault = TrainVault()
    uri = publish(vault, tmp_path)
    chain = build(vault, tmp_path, uri)
    folder = parent_uri(uri)  # beside the data manifest (written URIs are normalized)
    assert chain.training_scan_manifest.uri == f"{folder}/training-scan-manifest-v1.json"
    assert chain.contamination_report.uri == f"{folder}/contamination-report-v1.json"
    assert chain.producer_pins.uri == f"{folder}/producer-pins-v1.json"
    assert chain.report is not None and chain.report.passed
    approved = vault.approve_dataset(chain.request())
    assert approved.manifest_sha256 == chain.data_manifest.sha256
    assert build(vault, tmp_path, uri) == chain  # create-only writes of the same bytes: nothing new
    # Another chain in the same place is refused, never overwritten.
    with pytest.raises(ConflictError):
        build(vault, tmp_path, uri, contract=VerifierContract(record_id_field=None))


def test_signed_by_a_scanner_key_the_scan_and_report_are_attestations(tmp_path: Path) -> None:
    vault, key = TrainVault(), SigningKey.generate()
    uri = publish(vault, tmp_path)
    chain = build(vault, tmp_path, uri, scanner_key=key, pins=collect_producer_pins(code_revision="abc"))
    assert chain.training_scan_manifest.uri.endswith(f"/ds/{SCAN_ATTESTATION_NAME}")
    assert chain.contamination_report.uri.endswith(f"/ds/{REPORT_ATTESTATION_NAME}")
    vault.approve_dataset(chain.request(), policy=ApprovalPolicy(scanner_keys=[key.public_key]))


def test_a_chain_from_handed_references_builds_the_same_request(tmp_path: Path) -> None:
    vault = TrainVault()
    uri = publish(vault, tmp_path)
    built = build(vault, tmp_path, uri)
    handed = ApprovalChain(**built.refs())
    assert handed.request() == built.request() and handed == built
    other = built.request(producer_pins=built.verifier_contract)
    assert other.producer_pins == built.verifier_contract and other.data_manifest == built.data_manifest
    with pytest.raises(TypeError, match="not bindings of an approval request: data"):
        built.request(data=built.data_manifest)
