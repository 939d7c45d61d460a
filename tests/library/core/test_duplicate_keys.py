"""Duplicate JSON keys: every document trainvault reads refuses a key repeated in one object
(parsers disagree on which value wins), with `ManifestError` naming the key and the object."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from trainvault import ApprovalError, ManifestError, ObjectRef, TrainVault
from trainvault.approval import ApprovalRequest, ProducerPins, SigningKey, write_approval
from trainvault.approval.dsse import sign_envelope
from trainvault.approval.scan_manifest import TrainingScanManifest
from trainvault.canonical import sha256_hex
from trainvault.contamination import ContaminationReport, VerifierContract, jsonl_benchmark
from trainvault.contamination.release import load_release
from trainvault.profile import profile_publication, read_metrics_sidecar, write_metrics_sidecars
from trainvault.publication.bound import read_document
from trainvault.publication.reader import read_descriptor
from trainvault.rollouts import RolloutArchive


@pytest.fixture(scope="module")
def world(
    build_chain: Callable[..., Any],
    packed_records: ModuleType,
    make_samples: Callable[..., list[dict[str, Any]]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """One real publication with every document kind around it, on a local folder."""
    vault = TrainVault()
    root = str(tmp_path_factory.mktemp("dupkeys"))
    chain = build_chain(vault, root, shards=2, block_bytes=512, shard_records=packed_records.shard_records)
    ledger = vault.build_component_ledger(chain.manifest_uri, split="train", declare=packed_records.declare)
    approved = vault.approve_dataset(chain.request(sidecars=ledger.sidecars()))
    key = SigningKey.generate()
    approval = write_approval(vault, f"{root}/approval-v1.dsse.json", approved, signing_keys=[key])
    sidecars = write_metrics_sidecars(vault.storage, profile_publication(vault.storage, chain.manifest_uri, workers=1))
    RolloutArchive.save(f"{root}/rl/with-index.json", make_samples(6), rollout_id=1, storage=vault.storage)
    RolloutArchive.save(
        f"{root}/rl/bare.json", make_samples(6), rollout_id=2, describe_sample=None, storage=vault.storage
    )
    side = RolloutArchive.write_metadata_sidecar(f"{root}/rl/bare.json", storage=vault.storage)
    return {
        "vault": vault,
        "root": root,
        "chain": chain,
        "ledger": ledger,
        "approval": approval,
        "key": key,
        "profile_sidecar": sidecars["train"].uri,
        "archive": f"{root}/rl/with-index.json",
        "bare": f"{root}/rl/bare.json",
        "metadata_sidecar": side,
    }


def repeat_key(data: bytes, key: str, first: Any) -> bytes:
    """`data` (a JSON object) with `key` written twice: `first`, then the document's own value."""
    if not data.startswith(b"{") or f'"{key}":'.encode() not in data:
        raise ValueError(f"cannot repeat {key!r} in {data[:60]!r}")
    return b"{" + json.dumps(key).encode() + b":" + json.dumps(first).encode() + b"," + data[1:]


def put(w: dict[str, Any], name: str, data: bytes) -> str:
    uri = f"{w['root']}/dup/{name}"
    w["vault"].storage.put(uri, data)
    return uri


def get(w: dict[str, Any], uri: str) -> bytes:
    return w["vault"].storage.get(uri)


def bound_copy(w: dict[str, Any], binding: str, cls: type, key: str, first: Any) -> Callable[[], Any]:
    uri = put(w, f"{binding}.json", repeat_key(get(w, w["chain"].refs[binding].uri), key, first))
    return lambda: read_document(w["vault"].storage, cls, uri)


def manifest_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    # Nested: the first shard entry says its record count twice.
    data = get(w, w["chain"].manifest_uri).replace(b'"record_count":', b'"record_count":0,"record_count":', 1)
    uri = put(w, "data-manifest-v1.json", data)
    return lambda: w["vault"].load_manifest(uri), "record_count"


def manifest_at_gate_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    data = repeat_key(get(w, w["chain"].manifest_uri), "data_format", "jsonl.gz")
    uri = put(w, "gate/data-manifest-v1.json", data)
    request = w["chain"].request(data_manifest=ObjectRef(uri=uri, sha256=sha256_hex(data)))
    return lambda: w["vault"].approve_dataset(request), "data_format"


def descriptor_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    entry = w["vault"].load_manifest(w["chain"].manifest_uri).splits["train"].shards[0]
    data = repeat_key(get(w, entry.descriptor_uri), "record_count", 0)
    uri = put(w, "s0.complete.json", data)
    moved = entry.model_copy(update={"descriptor_uri": uri, "descriptor_sha256": sha256_hex(data)})
    return lambda: read_descriptor(w["vault"].storage, moved), "record_count"


def release_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    uri = put(w, "evaluation-release-v1.json", repeat_key(get(w, w["chain"].refs["evaluation_release"].uri), "id", "x"))
    return lambda: load_release(w["vault"].storage, uri), "id"


def request_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    data = repeat_key(w["chain"].request().to_json_bytes(), "format", "other")
    return lambda: ApprovalRequest.from_json_bytes(data, source="request.json"), "format"


def resigned(w: dict[str, Any], name: str, payload: bytes) -> str:
    return put(w, name, sign_envelope(payload, [w["key"]]).to_json_bytes())


def statement_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    envelope = json.loads(get(w, w["approval"].uri))
    payload = repeat_key(base64.b64decode(envelope["payload"]), "predicateType", "https://example.invalid/other")
    uri = resigned(w, "statement.dsse.json", payload)  # signed: only parsing can refuse it
    return lambda: w["vault"].open_approved(
        uri, sha256_hex(get(w, uri)), trusted_keys=[w["key"].public_key]
    ), "predicateType"


def envelope_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    data = repeat_key(get(w, w["approval"].uri), "payloadType", "text/plain")
    uri = put(w, "envelope.dsse.json", data)
    return lambda: w["vault"].open_approved(uri, sha256_hex(data), trusted_keys=[w["key"].public_key]), "payloadType"


def ledger_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    data = repeat_key(get(w, w["ledger"].uri), "split", "valid")
    uri = put(w, "ledger.json", data)
    name = w["ledger"].name
    request = w["chain"].request(sidecars={name: ObjectRef(uri=uri, sha256=sha256_hex(data))})
    # The gate checks a bound ledger, so approval itself refuses it.
    return lambda: w["vault"].approve_dataset(request), "split"


def profile_sidecar_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    uri = put(w, "train_metrics.json", repeat_key(get(w, w["profile_sidecar"]), "data_manifest_sha256", "0" * 64))
    return lambda: read_metrics_sidecar(w["vault"].storage, uri), "data_manifest_sha256"


def archive_index_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    uri = put(w, "run.json", repeat_key(get(w, w["archive"]), "format", "other"))
    return lambda: RolloutArchive.open(uri, storage=w["vault"].storage), "format"


def metadata_sidecar_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    uri = put(w, "bare.json", get(w, w["bare"]))
    put(w, "bare.json.metadata.json", repeat_key(get(w, w["metadata_sidecar"]), "index_sha256", "0" * 64))
    return lambda: RolloutArchive.check_metadata(uri, storage=w["vault"].storage), "index_sha256"


def benchmark_items_case(w: dict[str, Any]) -> tuple[Callable[[], Any], str]:
    return lambda: jsonl_benchmark("dup", b'{"id": "a", "text": "hidden", "text": "shown"}\n'), "text"


CASES: dict[str, Callable[[dict[str, Any]], tuple[Callable[[], Any], str]]] = {
    "data manifest": manifest_case,
    "shard descriptor": descriptor_case,
    "training scan manifest": lambda w: (
        bound_copy(w, "training_scan_manifest", TrainingScanManifest, "data_manifest_sha256", "0" * 64),
        "data_manifest_sha256",
    ),
    "producer pins": lambda w: (bound_copy(w, "producer_pins", ProducerPins, "format", "other"), "format"),
    "evaluation release": release_case,
    "verifier contract": lambda w: (bound_copy(w, "verifier_contract", VerifierContract, "format", "other"), "format"),
    "contamination report": lambda w: (
        bound_copy(w, "contamination_report", ContaminationReport, "pass", False),
        "pass",
    ),
    "approval request": request_case,
    "approval statement (signed payload)": statement_case,
    "approval envelope": envelope_case,
    "profile sidecar": profile_sidecar_case,
    "rollout archive index": archive_index_case,
    "rollout metadata sidecar": metadata_sidecar_case,
    "benchmark item file": benchmark_items_case,
}


@pytest.mark.parametrize("kind", list(CASES))
def test_duplicate_key_is_refused_naming_it(world: dict[str, Any], kind: str) -> None:
    read, key = CASES[kind](world)
    with pytest.raises(ManifestError, match=f"key '{key}' appears more than once"):
        read()


@pytest.mark.parametrize("case", [manifest_at_gate_case, ledger_case], ids=["data manifest", "component ledger"])
def test_approval_denies_bound_documents_with_duplicate_keys(world: dict[str, Any], case: Any) -> None:
    # The approval calls deny with ApprovalError, naming the key the document parser refused.
    read, key = case(world)
    with pytest.raises(ApprovalError, match=f"key '{key}' appears more than once"):
        read()
