"""`TrainVault.approve`: the chain written, the gate run and the record signed in one call;
one reference type bound by every binding; a key pair kept when it is already there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.approval_chain import TINY_JSONL, make_records

from trainvault import ApprovalError, ConfigurationError, ConflictError, ManifestError, ObjectRef, TrainVault
from trainvault.approval import ApprovalRequest, SigningKey, collect_producer_pins, write_keypair
from trainvault.approval.request import BINDINGS
from trainvault.contamination import jsonl_benchmark
from trainvault.publication.bound import Bound

TINY = jsonl_benchmark("tiny", TINY_JSONL)
PINS = collect_producer_pins(code_revision="test")


def committed(root: Path, *, contaminate: bool = False) -> Bound[Any]:
    saver = TrainVault().dataset_saver(str(root / "ds" / "data-manifest-v1.json"))
    for shard in range(3):
        saver.save("train", None, make_records(shard, 20, contaminate=contaminate and shard == 1), shard_id=str(shard))
    return saver.commit_manifest()


def listing(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in sorted(root.rglob("*")) if p.is_file()}


def test_one_call_approves_and_a_trainer_opens_the_record(tmp_path: Path) -> None:
    manifest = committed(tmp_path)
    key = SigningKey.generate()
    vault = TrainVault()
    record = vault.approve(manifest.uri, benchmarks=[TINY], signing_keys=key, pins=PINS)
    assert isinstance(record, ObjectRef) and record.uri.endswith("/ds/approval-v1.dsse.json")
    approved = vault.open_approved(record.uri, record.sha256, trusted_keys=[key.public_key])
    assert approved.request.data_manifest == ObjectRef(uri=manifest.uri, sha256=manifest.sha256)
    assert approved.summary.records == 60
    folder = tmp_path / "ds"
    written = {p.name for p in folder.iterdir()}
    assert {"training-scan-manifest-v1.json", "producer-pins-v1.json", "contamination-report-v1.json"} <= written
    assert {"verifier-contract-v1.json", "evaluation"} <= written
    assert (folder / "evaluation" / "evaluation-release-v1.json").is_file()


def test_approving_again_writes_nothing_and_returns_the_same_record(tmp_path: Path) -> None:
    manifest = committed(tmp_path)
    key = SigningKey.generate()
    first = TrainVault().approve(manifest.uri, benchmarks=[TINY], signing_keys=key, pins=PINS)
    before = listing(tmp_path)
    again = TrainVault().approve(manifest.uri, benchmarks=[TINY], signing_keys=key, pins=PINS)
    assert again == first and listing(tmp_path) == before


def test_other_inputs_in_the_same_places_are_a_conflict(tmp_path: Path) -> None:
    manifest = committed(tmp_path)
    TrainVault().approve(manifest.uri, benchmarks=[TINY], signing_keys=SigningKey.generate(), pins=PINS)
    with pytest.raises(ConflictError):  # another approver's record where the first one lies
        TrainVault().approve(manifest.uri, benchmarks=[TINY], signing_keys=SigningKey.generate(), pins=PINS)


def test_a_contaminated_dataset_is_refused_and_nothing_is_signed(tmp_path: Path) -> None:
    manifest = committed(tmp_path, contaminate=True)
    with pytest.raises(ApprovalError, match="contaminat"):
        TrainVault().approve(manifest.uri, benchmarks=[TINY], signing_keys=SigningKey.generate(), pins=PINS)
    assert not (tmp_path / "ds" / "approval-v1.dsse.json").exists()


def test_no_benchmark_is_a_configuration_error(tmp_path: Path) -> None:
    manifest = committed(tmp_path)
    with pytest.raises(ConfigurationError, match="at least one benchmark"):
        TrainVault().approve(manifest.uri, benchmarks=[], signing_keys=SigningKey.generate())


def test_every_binding_takes_the_reference_a_writer_returns_without_its_size(tmp_path: Path) -> None:
    manifest = committed(tmp_path)
    assert manifest.ref.size is not None
    refs = dict.fromkeys(BINDINGS, manifest)
    request = ApprovalRequest(**refs, sidecars={"ledger": manifest.ref})
    assert all(ref == ObjectRef(uri=manifest.uri, sha256=manifest.sha256) for ref in request.bindings().values())
    data = request.to_json_bytes()
    assert b'"size"' not in data and ApprovalRequest.from_json_bytes(data) == request
    doc = json.loads(data)
    doc["data_manifest"]["size"] = manifest.ref.size
    sized = json.dumps(doc).encode()
    with pytest.raises(ManifestError, match="without a size"):
        ApprovalRequest.from_json_bytes(sized, source="request.json")


def test_a_key_pair_already_there_is_kept_and_a_mismatched_one_refused(tmp_path: Path) -> None:
    private, public, key = write_keypair(tmp_path / "approver")
    again = write_keypair(tmp_path / "approver", exist_ok=True)
    assert again == (private, public, again[2]) and again[2].keyid == key.keyid
    with pytest.raises(ApprovalError, match="already exists"):
        write_keypair(tmp_path / "approver")
    write_keypair(tmp_path / "other")
    public.write_bytes((tmp_path / "other.pub").read_bytes())
    with pytest.raises(ApprovalError, match="not one key pair"):
        write_keypair(tmp_path / "approver", exist_ok=True)
