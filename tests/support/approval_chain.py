"""Build a whole custody chain for approval tests: data, scan manifest, pins, release,
contract, report and request, all on a real store."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from trainvault import ObjectRef, TrainVault
from trainvault.approval import (
    ApprovalRequest,
    ProducerPins,
    SigningKey,
    build_approval_chain,
    collect_producer_pins,
    write_attestation,
)
from trainvault.contamination import (
    EXCLUSIONS_SIDECAR,
    Exclusions,
    VerifierContract,
    jsonl_benchmark,
    scan_dataset,
)
from trainvault.publication.bound import write_document

ITEMS = [
    {
        "id": f"tiny-{i}",
        "text": " ".join(
            f"{w}{i}"
            for w in [
                "alpha",
                "bravo",
                "charlie",
                "delta",
                "echo",
                "foxtrot",
                "golf",
                "hotel",
                "india",
                "juliet",
                "kilo",
                "lima",
                "mike",
                "november",
            ]
        ),
    }
    for i in range(4)
]
TINY_JSONL = b"".join(json.dumps(it).encode() + b"\n" for it in ITEMS)
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "it",
    "an",
    "be",
    "this",
    "are",
]


def make_records(shard: int, n: int, contaminate: bool = False) -> list[dict[str, Any]]:
    rng = random.Random(shard)
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(rng.randrange(20, 60)))
        out.append({"id": f"s{shard}-{i}", "text": text, "tokens": rng.randrange(10, 100)})
    if contaminate:
        out[n // 2]["text"] += " " + ITEMS[1]["text"]
    return out


@dataclass
class Chain:
    vault: TrainVault
    root: str
    records: dict[str, list[dict[str, Any]]]
    refs: dict[str, ObjectRef]
    index: Any
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def manifest_uri(self) -> str:
        return self.refs["data_manifest"].uri

    def request(self, **overrides: ObjectRef | dict[str, ObjectRef]) -> ApprovalRequest:
        return ApprovalRequest(**{**self.refs, **overrides})

    def publish(self, name: str, document: Any) -> ObjectRef:
        bound = write_document(self.vault.storage, f"{self.root}/extra/{name}", document)
        return ObjectRef(uri=bound.uri, sha256=bound.sha256)

    def put_raw(self, name: str, data: bytes) -> ObjectRef:
        from trainvault.canonical import sha256_hex

        uri = f"{self.root}/extra/{name}"
        self.vault.storage.put_create(uri, data)
        return ObjectRef(uri=uri, sha256=sha256_hex(data))

    def rescan(
        self, name: str, *, index: Any = None, pins_sha256: str | None = None, scan_sha256: str | None = None
    ) -> tuple[Any, ObjectRef]:
        """A report over this chain's data with other inputs, published under extra/."""
        report = scan_dataset(
            self.vault,
            self.manifest_uri,
            index or self.index,
            scan_manifest_sha256=scan_sha256 or self.refs["training_scan_manifest"].sha256,
            producer_pins_sha256=pins_sha256 or self.refs["producer_pins"].sha256,
            progress=False,
        )
        return report, self.publish(name, report)

    def publish_pins(self, name: str, pins: ProducerPins) -> ObjectRef:
        return self.publish(name, pins)

    def attest(self, name: str, document: Any, key: SigningKey) -> ObjectRef:
        """`document` (a report or scan manifest) signed by `key`, published under extra/."""
        bound = write_attestation(self.vault, f"{self.root}/extra/{name}", document, signing_keys=key)
        return ObjectRef(uri=bound.uri, sha256=bound.sha256)

    def with_exclusions(
        self, exclusions: Exclusions, name: str = "exclusions.json", **overrides: ObjectRef
    ) -> ApprovalRequest:
        """This chain's request (with `overrides`) binding `exclusions` as its exclusions sidecar."""
        return self.request(**overrides, sidecars={EXCLUSIONS_SIDECAR: self.publish(name, exclusions)})


def unpacked_manifest(saver: Any) -> bytes:
    """The bytes of the manifest `saver` builds as a trainvault before descriptor packs wrote it."""
    return saver.build_manifest().model_copy(update={"descriptor_pack": None}).to_json_bytes()


def build_chain(
    vault: TrainVault,
    root: str,
    *,
    shards: int = 3,
    records_per_shard: int = 30,
    contaminate: bool = False,
    contract: VerifierContract | None = None,
    block_bytes: int = 1024,
    seed_offset: int = 0,
    shard_records: Any = None,
    data_format: str = "msgpack.zst",
    scanner_key: SigningKey | None = None,
    packed: bool = True,
) -> Chain:
    """`shard_records(i)`: the records of train shard i (default: text records from `make_records`).
    `scanner_key`: sign the scan manifest and the report with it (attestations), and bind those.
    `packed=False`: commit the manifest as trainvault wrote it before descriptor packs (no pack)."""
    manifest_uri = f"{root}/ds/data-manifest-v1.json"
    saver = vault.dataset_saver(manifest_uri, data_format=data_format, block_bytes=block_bytes)
    records: dict[str, list[dict[str, Any]]] = {}
    for i in range(shards):
        stage = "easy" if i < max(1, shards - 1) else "hard"
        recs = (
            shard_records(i)
            if shard_records is not None
            else make_records(i + seed_offset, records_per_shard, contaminate and i == shards - 1)
        )
        records[f"s{i}"] = recs
        saver.save("train", stage, recs, shard_id=f"s{i}")
    valid = make_records(100 + seed_offset, 5)
    records["valid"] = valid
    saver.save("valid", None, valid, shard_id="v0")
    if packed:
        saver.commit_manifest()
    else:
        vault.storage.put_create(manifest_uri, unpacked_manifest(saver))
    chain = build_approval_chain(
        vault,
        manifest_uri,
        release_root=f"{root}/release",
        release_id="evals-test",
        benchmarks=[jsonl_benchmark("tiny", TINY_JSONL)],
        contract_uri=f"{root}/verifier-contract-v1.json",
        contract=contract,
        pins=collect_producer_pins(code_revision="test"),
        scanner_key=scanner_key,
    )
    return Chain(vault, root, records, chain.refs(), chain.index, {"report": chain.report})
