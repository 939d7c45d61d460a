"""Signed approval records (DSSE + in-toto) and ApprovedDataset custody rules."""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from trainvault import ApprovalError, TrainVault
from trainvault.approval import (
    ApprovedDataset,
    SigningKey,
    load_signing_key,
    load_verifying_key,
    write_approval,
    write_keypair,
)
from trainvault.approval.dsse import Envelope, pae, sign_envelope
from trainvault.approval.record import PREDICATE_TYPE
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.errors import CustodyError


@pytest.fixture
def chain(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path), shards=2, records_per_shard=10)


@pytest.fixture
def keys() -> list[SigningKey]:
    return [SigningKey.generate() for _ in range(3)]


def put(vault: TrainVault, uri: str, data: bytes) -> tuple[str, str]:
    vault.storage.put_create(uri, data)
    return uri, sha256_hex(data)


def test_pae_matches_the_dsse_spec() -> None:
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_signed_approval_opens_with_trusted_keys(chain: Any, keys: list[SigningKey]) -> None:
    vault = chain.vault
    approved = vault.approve_dataset(chain.request())
    written = write_approval(
        vault, f"{chain.root}/approval.json", approved, signing_keys=keys[:2], provenance={"dagster_run_id": "run-1"}
    )
    # Deterministic signatures: writing the same record again is a no-op.
    assert (
        write_approval(vault, written.uri, approved, signing_keys=keys[:2], provenance={"dagster_run_id": "run-1"})
        == written
    )
    opened = vault.open_approved(
        written.uri, written.sha256, trusted_keys=[k.public_key for k in keys[:2]], threshold=2
    )
    assert opened.manifest_sha256 == approved.manifest_sha256
    assert opened.approval is not None and opened.approval.provenance == {"dagster_run_id": "run-1"}
    assert set(opened.approval.signers) == {keys[0].keyid, keys[1].keyid}
    statement = json.loads(base64.b64decode(json.loads(vault.storage.get(written.uri))["payload"]))
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"][0]["digest"]["sha256"] == approved.manifest_sha256


def test_unsigned_wrongly_signed_and_under_threshold(chain: Any, keys: list[SigningKey]) -> None:
    vault = chain.vault
    approved = vault.approve_dataset(chain.request())
    written = write_approval(vault, f"{chain.root}/approval.json", approved, signing_keys=[keys[0]])
    env = Envelope.from_json_bytes(vault.storage.get(written.uri))
    unsigned = put(vault, f"{chain.root}/unsigned.json", env.model_copy(update={"signatures": []}).to_json_bytes())
    with pytest.raises(ApprovalError, match="unsigned"):
        vault.open_approved(*unsigned, trusted_keys=[keys[0].public_key])
    with pytest.raises(ApprovalError, match="0 of the 1 trusted keys signed it"):
        vault.open_approved(written.uri, written.sha256, trusted_keys=[keys[1].public_key])
    with pytest.raises(ApprovalError, match="1 of the 2 trusted keys signed it, 2 required"):
        vault.open_approved(written.uri, written.sha256, trusted_keys=[k.public_key for k in keys[:2]], threshold=2)
    # The same key twice counts once.
    doubled = env.model_copy(update={"signatures": env.signatures * 2})
    twice = put(vault, f"{chain.root}/twice.json", doubled.to_json_bytes())
    with pytest.raises(ApprovalError, match="1 of the 2 trusted keys"):
        vault.open_approved(*twice, trusted_keys=[k.public_key for k in keys[:2]], threshold=2)
    # A keyid claiming a trusted key does not make a signature valid.
    forged = env.model_copy(update={"signatures": [env.signatures[0].model_copy(update={"keyid": keys[1].keyid})]})
    forged_at = put(vault, f"{chain.root}/forged.json", forged.to_json_bytes())
    with pytest.raises(ApprovalError, match="0 of the 1"):
        vault.open_approved(*forged_at, trusted_keys=[keys[1].public_key])
    with pytest.raises(ApprovalError, match="threshold"):
        vault.open_approved(written.uri, written.sha256, trusted_keys=[keys[0].public_key], threshold=2)


def test_payload_edited_after_signing(chain: Any, keys: list[SigningKey]) -> None:
    vault = chain.vault
    approved = vault.approve_dataset(chain.request())
    written = write_approval(vault, f"{chain.root}/approval.json", approved, signing_keys=[keys[0]])
    env = Envelope.from_json_bytes(vault.storage.get(written.uri))
    statement = json.loads(base64.b64decode(env.payload))
    statement["predicate"]["provenance"] = {"approved_by": "mallory"}
    edited = env.model_copy(update={"payload": base64.b64encode(canonical_json(statement)).decode()})
    at = put(vault, f"{chain.root}/edited.json", edited.to_json_bytes())
    with pytest.raises(ApprovalError, match="0 of the 1"):
        vault.open_approved(*at, trusted_keys=[keys[0].public_key])


def test_older_approval_replayed_against_a_pinned_sha256(chain: Any, keys: list[SigningKey]) -> None:
    vault = chain.vault
    approved = vault.approve_dataset(chain.request())
    old = write_approval(
        vault, f"{chain.root}/approval-old.json", approved, signing_keys=[keys[0]], provenance={"run": "old"}
    )
    new = write_approval(
        vault, f"{chain.root}/approval-new.json", approved, signing_keys=[keys[0]], provenance={"run": "new"}
    )
    with pytest.raises(ApprovalError, match="not the pinned"):
        vault.open_approved(old.uri, new.sha256, trusted_keys=[keys[0].public_key])
    with pytest.raises(ApprovalError, match="no approval record"):
        vault.open_approved(f"{chain.root}/none.json", new.sha256, trusted_keys=[keys[0].public_key])


def test_signed_statement_about_other_data_is_denied(chain: Any, keys: list[SigningKey]) -> None:
    vault = chain.vault
    approved = vault.approve_dataset(chain.request())
    from trainvault.approval.record import approval_statement

    statement = approval_statement(approved)
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    at = put(vault, f"{chain.root}/other.json", sign_envelope(canonical_json(statement), [keys[0]]).to_json_bytes())
    with pytest.raises(ApprovalError, match="subject"):
        vault.open_approved(*at, trusted_keys=[keys[0].public_key])
    statement = approval_statement(approved)
    statement["predicateType"] = "https://trainvault.invalid/approval/v2"
    at = put(vault, f"{chain.root}/v2.json", sign_envelope(canonical_json(statement), [keys[0]]).to_json_bytes())
    with pytest.raises(ApprovalError, match="predicate type"):
        vault.open_approved(*at, trusted_keys=[keys[0].public_key])


def test_an_audit_runs_the_gate_again_when_opening(chain: Any, keys: list[SigningKey]) -> None:
    vault = chain.vault
    approved = vault.approve_dataset(chain.request())
    written = write_approval(vault, f"{chain.root}/approval.json", approved, signing_keys=[keys[0]])
    uri = approved.manifest.splits["train"].shards[0].uri
    data = bytearray(vault.storage.get(uri))
    data[-1] ^= 1
    vault.storage.put(uri, bytes(data))
    with pytest.raises(ApprovalError, match="changed after it was scanned"):
        vault.open_approved(written.uri, written.sha256, trusted_keys=[keys[0].public_key], audit=True)


def test_keys_from_files_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private, public, key = write_keypair(tmp_path / "approver")
    assert private.stat().st_mode & 0o777 == 0o600
    assert load_signing_key(private).keyid == key.keyid
    assert load_verifying_key(public) == key.public_key
    monkeypatch.setenv("TRAINVAULT_SIGNING_KEY", private.read_text())
    assert load_signing_key().keyid == key.keyid
    monkeypatch.setenv("TRAINVAULT_SIGNING_KEY", str(private))
    assert load_signing_key().keyid == key.keyid
    pem = key.to_pem().decode()
    secret_line = pem.splitlines()[1]
    assert secret_line not in repr(key) and secret_line not in str(key)
    with pytest.raises(ApprovalError) as info:
        load_signing_key(pem.replace(secret_line, secret_line[::-1]))
    assert secret_line[::-1] not in str(info.value)
    with pytest.raises(ApprovalError, match="already exists"):
        write_keypair(tmp_path / "approver")
    with pytest.raises(TypeError):
        pickle.dumps(key)
    monkeypatch.delenv("TRAINVAULT_SIGNING_KEY")
    with pytest.raises(ApprovalError, match="TRAINVAULT_SIGNING_KEY"):
        load_signing_key()


# -- ApprovedDataset ------------------------------------------------------------------------------


def test_approved_dataset_cannot_be_constructed_or_changed(chain: Any) -> None:
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        ApprovedDataset()
    with pytest.raises(TypeError):
        ApprovedDataset._issue(object(), None, None)
    approved = chain.vault.approve_dataset(chain.request())
    with pytest.raises(AttributeError):
        approved._result = None
    with pytest.raises(AttributeError):
        approved.bindings = {}
    with pytest.raises(TypeError):
        approved.bindings["data_manifest"] = approved.bindings["producer_pins"]
    with pytest.raises(ValidationError):
        approved.bindings["data_manifest"].sha256 = "0" * 64
    with pytest.raises(TypeError):
        pickle.dumps(approved)
    assert set(approved.bindings) == {
        "data_manifest",
        "training_scan_manifest",
        "evaluation_release",
        "contamination_report",
        "verifier_contract",
        "producer_pins",
    }


def test_manifest_is_a_detached_copy(chain: Any) -> None:
    approved = chain.vault.approve_dataset(chain.request())
    copy = approved.manifest
    copy.splits["train"].shards.clear()
    copy.splits.clear()
    again = approved.manifest
    assert again.splits["train"].shards and again.document_sha256() != copy.document_sha256()
    records = [r for b in approved.loader_factory(collate_fn=list).load("train") for r in b]
    assert len(records) == 20


def test_custody_store_reads_only_approved_objects(chain: Any) -> None:
    approved = chain.vault.approve_dataset(chain.request())
    storage = approved.custody_storage()
    with pytest.raises(CustodyError, match="not an object of the approved dataset"):
        storage.get(chain.refs["contamination_report"].uri)
    with pytest.raises(CustodyError, match="read-only"):
        storage.put_create(f"{chain.root}/ds/new.bin", b"x")
    with pytest.raises(CustodyError):
        storage.list(chain.root)
    uri = approved.manifest.splits["train"].shards[0].uri
    assert storage.get(uri) == chain.vault.storage.get(uri)
    # The manifest comes from the bytes the gate hashed, even if the object is replaced later.
    chain.vault.storage.put(chain.manifest_uri, b"{}")
    assert sha256_hex(storage.get(chain.manifest_uri)) == approved.manifest_sha256


def test_with_record_opens_the_gates_result_from_its_record_without_a_second_hash_pass(
    build_chain: Callable[..., Any], chain: Any, keys: list[SigningKey], tmp_path: Path
) -> None:
    from trainvault.approval import with_record
    from trainvault.storage.reads import READS

    vault = chain.vault
    approved = vault.approve_dataset(chain.request())
    written = write_approval(
        vault, f"{chain.root}/approval.json", approved, signing_keys=[keys[0]], provenance={"dagster_run_id": "run-1"}
    )
    before = READS.snapshot()
    opened = with_record(vault, approved, written.uri, written.sha256, trusted_keys=[keys[0].public_key])
    read = READS.snapshot() - before
    # Only the record itself is read: one request of its own bytes, no shard, descriptor or document.
    assert (read.bytes, read.requests) == (written.ref.size, 1)
    assert opened.manifest_sha256 == approved.manifest_sha256
    assert opened.approval is not None and opened.approval.sha256 == written.sha256
    assert opened.approval.provenance == {"dagster_run_id": "run-1"} and opened.approval.signers == (keys[0].keyid,)
    with pytest.raises(ApprovalError, match=r"not signed by|signed by none|trusted"):
        with_record(vault, approved, written.uri, written.sha256, trusted_keys=[keys[1].public_key])
    with pytest.raises(ApprovalError, match="pinned"):
        with_record(vault, approved, written.uri, "0" * 64, trusted_keys=[keys[0].public_key])
    other = build_chain(TrainVault(), str(tmp_path / "other"), shards=3, records_per_shard=10)
    theirs = write_approval(
        vault, f"{chain.root}/other.json", other.vault.approve_dataset(other.request()), signing_keys=[keys[0]]
    )
    with pytest.raises(ApprovalError, match="not the one the gate just judged"):
        with_record(vault, approved, theirs.uri, theirs.sha256, trusted_keys=[keys[0].public_key])
