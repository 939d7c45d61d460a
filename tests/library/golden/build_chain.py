"""Write the README's dataset and a whole custody chain into memory:// with fixed inputs and
a fixed signing key, then print ``{uri: sha256}`` of every object written, as JSON.

Run in a fresh process (the memory store is per process) by tests/library/test_golden_bytes.py.
Refresh the expected digests only for an intended change of bytes on storage:

    .venv/bin/python tests/library/golden/build_chain.py > tests/library/golden/chain-digests.json
"""

from __future__ import annotations

import json
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from trainvault import TrainVault
from trainvault import ObjectRef
from trainvault.approval import ApprovalRequest, ProducerPins, SigningKey, build_training_scan_manifest, write_approval, write_producer_pins, write_training_scan_manifest
from trainvault.approval.pins import PackagePin
from trainvault.canonical import sha256_hex
from trainvault.contamination import jsonl_benchmark, load_index, publish_release, scan_dataset, write_report
from trainvault.contamination.contract import V1_CONTRACT
from trainvault.publication.bound import write_document

ROOT = "memory://golden"
STAGES = [
    {"name": "easy", "family": "arithmetic", "weight": 1.0},
    {"name": "medium", "family": "control", "weight": 2.0},
    {"name": "hard", "family": "composition", "weight": 3.0},
]
BENCHMARK = b"".join(
    json.dumps(
        {"id": f"item-{i}", "text": f"def solve_{i}(values): return sorted(set(values))[{i}] + {i * 7}"}
    ).encode()
    + b"\n"
    for i in range(3)
)


def generate_data(split: str, stage: str | None, shard_id: int) -> list[dict[str, str]]:
    """The README's generator."""
    return [{"id": f"{split}-{stage}-{shard_id}-{i}", "text": f"record {i}"} for i in range(100)]


def save_readme_dataset(vault: TrainVault, root: str, data_format: str, train_shards: int) -> str:
    saver = vault.dataset_saver(f"{root}/data-manifest-v1.json", data_format=data_format)
    for stage in STAGES:
        for shard_id in range(train_shards):
            records = generate_data("train", stage["name"], shard_id)
            saver.save("train", stage["name"], records, curriculum_metadata=stage, shard_id=str(shard_id))
    for split in ("valid", "test"):
        for shard_id in range(4):
            saver.save(split, None, generate_data(split, None, shard_id), shard_id=str(shard_id))
    saver.register_curriculum(
        "train", "early", [saver.recover("train", "easy", shard_id="0"), saver.recover("train", "medium", shard_id="0")]
    )
    saver.commit_manifest()
    # The manifest as trainvault wrote it before descriptor packs: its bytes must not drift either.
    unpacked = saver.build_manifest().model_copy(update={"descriptor_pack": None})
    vault.storage.put_create(f"{root}/data-manifest-unpacked.json", unpacked.to_json_bytes())
    return saver.manifest_uri


def write_chain(vault: TrainVault, manifest_uri: str, root: str) -> None:
    ref = lambda bound: ObjectRef(uri=bound.uri, sha256=bound.sha256)  # noqa: E731
    scan = write_training_scan_manifest(
        vault, f"{root}/training-scan-manifest-v1.json", build_training_scan_manifest(vault, manifest_uri)
    )
    pins = ProducerPins(
        packages=[PackagePin(name="trainvault", version="0.1.0")], code_revision="golden", python="3.11.7"
    )
    pins_b = write_producer_pins(vault, f"{root}/producer-pins-v1.json", pins)
    release = publish_release(vault.storage, f"{ROOT}/release", "golden-evals", [jsonl_benchmark("tiny", BENCHMARK)])
    contract = write_document(vault.storage, f"{ROOT}/verifier-contract-v1.json", V1_CONTRACT)
    index = load_index(vault, release, contract)
    report = scan_dataset(
        vault, manifest_uri, index, scan_manifest_sha256=scan.sha256, producer_pins_sha256=pins_b.sha256, progress=False
    )
    report_b = write_report(vault, f"{root}/contamination-report-v1.json", report)
    request = ApprovalRequest(
        data_manifest=ObjectRef(uri=manifest_uri, sha256=sha256_hex(vault.storage.get(manifest_uri))),
        training_scan_manifest=ref(scan),
        evaluation_release=ref(release),
        contamination_report=ref(report_b),
        verifier_contract=ref(contract),
        producer_pins=ref(pins_b),
    )
    approved = vault.approve_dataset(request)
    key = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
    write_approval(vault, f"{root}/approval-v1.dsse.json", approved, signing_keys=key, provenance={"run": "golden"})


def main() -> None:
    vault = TrainVault()
    manifest_uri = save_readme_dataset(vault, f"{ROOT}/dataset", "msgpack.zst", 32)
    write_chain(vault, manifest_uri, f"{ROOT}/dataset")
    for data_format in ("jsonl.gz", "parquet"):
        save_readme_dataset(vault, f"{ROOT}/{data_format.replace('.', '-')}", data_format, 2)
    digests = {info.uri: sha256_hex(vault.storage.get(info.uri)) for info in vault.storage.list(ROOT)}
    json.dump(dict(sorted(digests.items())), sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
