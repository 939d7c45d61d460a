"""A trainer's open of a signed approval record: the cost of its metadata, no shard byte.

The approver's gate hashed every byte, re-scanned and surveyed the fields, and signed what it
verified. A trainer that trusts the approver's key checks, reading only metadata:

- every document the record binds, by sha256, parsed and judged against each other and the
  trainer's policy (`judge_chain`: scan, contract, report and its verdict, exclusions, pins);
- the summary the approver signed against those documents (totals, items, exclusions);
- the descriptor pack (or, before packs, each descriptor) against the digest the scan binds;
- every approved shard's size, from listings of the folders that hold them (a LIST per page,
  not a request per shard), against the size it was scanned and approved at.

Data custody then rests on what the loader checks at every read: each block's SHA-256 against
the approved descriptor before any of its records is decoded. The full gate (every byte
re-hashed, a re-scan) stays the approver's, and a trainer's explicit audit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from trainvault.approval.applied import check_applied
from trainvault.approval.bound import (
    DESCRIPTOR_ROLES,
    BoundChain,
    attach_descriptors,
    denials,
    hash_bound,
    hash_declared,
    judge_chain,
)
from trainvault.approval.checks import deny
from trainvault.approval.hashing import DEFAULT_THREADS
from trainvault.approval.policy import ApprovalPolicy
from trainvault.approval.request import ApprovalRequest
from trainvault.approval.result import GateResult, VerificationSummary
from trainvault.components.verify import LedgerChecks
from trainvault.publication.pinned import Publication
from trainvault.storage import Storage


def open_bound(
    storage: Storage,
    request: ApprovalRequest,
    signed: Mapping[str, Any],
    policy: ApprovalPolicy,
    *,
    record_uri: str,
    threads: int = DEFAULT_THREADS,
) -> GateResult:
    """What the signed record at `record_uri` approved, checked as the module says; `signed`: the
    summary the approver signed. Raises `ApprovalError` naming what failed."""
    with denials():
        return _open(storage, request, signed, policy, record_uri, threads)


def _open(
    storage: Storage,
    request: ApprovalRequest,
    signed: Mapping[str, Any],
    policy: ApprovalPolicy,
    record_uri: str,
    threads: int,
) -> GateResult:
    refs = request.bindings()
    chain = judge_chain(storage, refs, hash_bound(storage, refs, threads), policy)
    summary = _signed_summary(signed, chain, refs["data_manifest"].sha256)
    check_applied(policy, summary.policy, record_uri)
    hashed = hash_declared(storage, chain, DESCRIPTOR_ROLES, threads=threads)
    # Each descriptor's producer against the pins, and each against the manifest, is the approver's
    # check: the pack is bound by digest.
    publication, descriptors_raw = attach_descriptors(chain.publication, hashed, every=False)
    shard_sizes = {e.uri: e.size_bytes for _, e in publication.entries()}
    check_listed_sizes(storage, publication)
    ledgers = LedgerChecks(storage, refs, publication.manifest, refs["data_manifest"].sha256, publication.descriptors)
    return GateResult(
        request,
        publication,
        descriptors_raw,
        shard_sizes,
        chain.report,
        summary,
        ledgers.ledgers,
        chain.exclusions,
    )


def _signed_summary(signed: Mapping[str, Any], chain: BoundChain, manifest_sha256: str) -> VerificationSummary:
    """The approver's summary, once it describes the documents just checked."""
    try:
        summary = VerificationSummary.model_validate(signed)
    except ValidationError as exc:
        deny(f"the approval record's verification summary is not one this trainvault reads ({exc}); re-approve")
    report, ex = chain.report, chain.exclusions
    claims = {
        "data manifest": (summary.data_manifest_sha256, manifest_sha256),
        "shards": (summary.shards, chain.totals["shards"]),
        "records": (summary.records, chain.totals["records"]),
        "shard bytes": (summary.shard_bytes, chain.totals["shard_bytes"]),
        "contaminated items": (summary.contaminated_items, len(report.contaminated_items)),
        "benchmarks": (summary.benchmarks, [b.name for b in report.benchmarks]),
        "excluded records": (
            None if summary.exclusions is None else summary.exclusions.records,
            None if ex is None else len(ex.records),
        ),
    }
    wrong = [f"{what} {got!r}, the bound documents say {want!r}" for what, (got, want) in claims.items() if got != want]
    if wrong or not summary.verdict_recomputed:
        deny(
            "the approval record's signed summary does not describe what it binds ("
            + ("; ".join(wrong) or "its verdict was not recomputed")
            + "): the record is not one the gate wrote for this request; re-approve"
        )
    return summary


def check_listed_sizes(storage: Storage, publication: Publication) -> None:
    """Every shard of `publication` exists at its approved size, by listing the deepest folder
    that holds them all (per store): one listing request per page, no request per shard."""
    # Entry URIs are resolved absolute URIs already, in the form listings give.
    wanted = {e.uri: (split, e) for split, e in publication.entries()}
    listed: dict[str, int] = {}
    for folder in _folders(list(wanted)):
        listed.update({o.uri: o.size for o in storage.list(folder)})
    for uri, (split, e) in wanted.items():
        size = listed.get(uri)
        if size == e.size_bytes:
            continue
        found = "is missing" if size is None else f"is {size} bytes"
        deny(
            f"split {split!r} shard {e.key!r} ({uri}) {found}, approved at {e.size_bytes} bytes: it changed after "
            "it was scanned and approved (deleted, truncated or extended); do not train on it: re-publish, rescan "
            "and approve again"
        )


def _folders(uris: list[str]) -> list[str]:
    """The deepest folder holding every URI of the same store (scheme and bucket)."""
    by_store: dict[str, list[str]] = {}
    for uri in uris:
        scheme, sep, rest = uri.partition("://")
        by_store.setdefault(f"{scheme}://{rest.partition('/')[0]}/" if sep else "/", []).append(uri)
    # The longest common prefix of strings is that of the least and the greatest of them; the
    # store's own head ("s3://bucket/", "file:///") is part of it.
    common = (os.path.commonprefix([min(group), max(group)]) for group in by_store.values())  # noqa: RUF071 (by character, on purpose)
    return [c[: c.rfind("/") + 1] for c in common]
