"""Approve a committed publication in one call: its chain written, the gate run, the record signed.

What `build_approval_chain`, `approve_dataset` and `write_approval` do one by one, with the
layout they share: the scan manifest, producer pins and report beside the data manifest, the
evaluation release under ``evaluation/`` and the verifier contract and the signed record beside
it too (each place can be given). Every write is create-only, so approving the same publication
again with the same inputs and keys writes nothing and returns the same record; other inputs in
the same places are a `ConflictError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainvault.approval.chain import build_approval_chain
from trainvault.approval.gate import approve_dataset
from trainvault.approval.hashing import HashProgress
from trainvault.approval.keys import SigningKey
from trainvault.approval.pins import ProducerPins
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.record import write_approval
from trainvault.contamination import VerifierContract
from trainvault.errors import ConfigurationError
from trainvault.refs import ObjectRef, Referenced
from trainvault.storage.store import StorageSource, storage_of
from trainvault.uris import join_uri, normalize_uri, parent_uri

if TYPE_CHECKING:
    from trainvault.contamination import BenchmarkItems

#: Where `approve` puts what it writes, under the data manifest's folder.
RELEASE_FOLDER = "evaluation"
CONTRACT_NAME = "verifier-contract-v1.json"
RECORD_NAME = "approval-v1.dsse.json"


def approve(
    storage: StorageSource,
    manifest_uri: str,
    *,
    benchmarks: Iterable[BenchmarkItems],
    signing_keys: Sequence[SigningKey | str | bytes] | SigningKey | None = None,
    policy: ApprovalPolicy | None = None,
    contract: VerifierContract | None = None,
    pins: ProducerPins | None = None,
    scanner_key: SigningKey | None = None,
    sidecars: Mapping[str, ObjectRef | Referenced] | None = None,
    release_id: str | None = None,
    release_root: str | None = None,
    contract_uri: str | None = None,
    record_uri: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    progress: Callable[[HashProgress], None] | None = None,
) -> ObjectRef:
    """Write the approval chain of the committed manifest at `manifest_uri` against `benchmarks`,
    run the gate under `policy` and sign the record with `signing_keys`; return the record's
    reference (what a trainer pins). Raises `ApprovalError` saying what failed, and then signs
    nothing. `release_id` defaults to the benchmarks' names joined by ``+``."""
    store = storage_of(storage)
    folder = parent_uri(normalize_uri(manifest_uri))
    benchmarks = list(benchmarks)
    if not benchmarks:
        raise ConfigurationError(
            "approve needs at least one benchmark to scan against, e.g. benchmarks=[humaneval_benchmark()]"
        )
    chain = build_approval_chain(
        store,
        manifest_uri,
        release_root=release_root or join_uri(folder, RELEASE_FOLDER),
        release_id=release_id or "+".join(sorted(b.name for b in benchmarks)),
        benchmarks=benchmarks,
        contract_uri=contract_uri or join_uri(folder, CONTRACT_NAME),
        contract=contract,
        pins=pins,
        scanner_key=scanner_key,
    )
    approved = approve_dataset(store, chain.request(sidecars=sidecars), policy=policy, progress=progress)
    written = write_approval(
        store, record_uri or join_uri(folder, RECORD_NAME), approved, signing_keys=signing_keys, provenance=provenance
    )
    return written.ref
