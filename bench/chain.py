"""A fresh benchmark publication and the custody chain around it: scan manifest, producer
pins, a small evaluation release, the verifier contract, the contamination report, and the
approval request binding them. Shared by the benchmarks that go through the gate."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainvault import ObjectRef, TrainVault
from trainvault.approval import ApprovalRequest, SigningKey, build_approval_chain
from trainvault.contamination import jsonl_benchmark

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
    sidecars: dict[str, ObjectRef] | None = None,
    scanner_key: SigningKey | None = None,
) -> ApprovalRequest:
    """Write every artifact of the chain under `root` (`trainvault.approval.build_approval_chain`)
    and return the request that binds them (with `scanner_key`, the scan manifest and report as
    attestations signed by it)."""
    chain = build_approval_chain(
        vault,
        manifest_uri,
        release_root=f"{root}/release",
        release_id="bench",
        benchmarks=[jsonl_benchmark("bench", ITEMS)],
        contract_uri=f"{root}/verifier-contract-v1.json",
        scanner_key=scanner_key,
    )
    return chain.request(sidecars=sidecars)
