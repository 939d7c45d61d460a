"""What a file given to the command is, read without trusting it: for early argument checks and
for advice when it is the wrong file for the command, never for custody (the gate decides that).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainvault.errors import StorageError, TrainVaultError

#: The kinds of file commands read, each as a command's help names it.
KINDS = {
    "approval-record": "an approval record",
    "data-manifest": "a data manifest",
    "approval-request": "an approval request",
    "contamination-report": "a contamination report",
    "scan-manifest": "a training scan manifest",
    "loader-state": "a loader state",
    "archive-index": "a rollout archive index",
    "croissant-card": "a Croissant card",
    "revocation": "a revocation",
}


@dataclass(frozen=True)
class Found:
    """What a file is: its kind (a `KINDS` name, else what it declares itself), in words, and what reads it."""

    kind: str
    what: str
    reader: str  # a command line with ``{uri}``; empty when no command reads it
    approves: str = ""  # for an approval record: which data manifest it approves


@dataclass(frozen=True)
class Takes:
    """A document a command reads: the command, the argument (its ``args`` attribute) and the
    kinds read there; `note` says how the command reads another kind (with other options)."""

    command: str
    attr: str
    kinds: tuple[str, ...]
    note: str = ""

    @property
    def expected(self) -> str:
        return " or ".join(KINDS[kind] for kind in self.kinds)


def reads(*takes: Takes) -> Callable[[argparse.Namespace], Sequence[Takes]]:
    """For ``set_defaults(takes=...)``: the documents a command reads, whatever its options."""
    return lambda args: takes


def _signed_kinds() -> dict[str, Found]:
    """In-toto predicate type -> what a signed file of it is, and the command that reads it."""
    from trainvault.approval.attestation import PREDICATE_TYPES
    from trainvault.approval.record import PREDICATE_TYPE
    from trainvault.approval.revocation import REVOCATION_PREDICATE
    from trainvault.approval.scan_manifest import TrainingScanManifest
    from trainvault.contamination.report import ContaminationReport

    return {
        PREDICATE_TYPE: Found(
            "approval-record",
            "a signed approval record (a DSSE envelope)",
            "`trainvault verify {uri} --sha256 PINNED_SHA256 --trusted-key APPROVER.pub` checks it and prints what it approves",
        ),
        REVOCATION_PREDICATE: Found(
            "revocation",
            "a signed revocation of an approval (a DSSE envelope)",
            "`trainvault verify APPROVAL --sha256 PINNED_SHA256 --trusted-key APPROVER.pub --revocation {uri}` "
            "checks an approval against it",
        ),
        PREDICATE_TYPES[ContaminationReport]: Found(
            "contamination-report",
            "a signed contamination report (a DSSE envelope)",
            "`trainvault exclusions {uri} --out EXCLUSIONS.json` lists the records it names",
        ),
        PREDICATE_TYPES[TrainingScanManifest]: Found(
            "scan-manifest",
            "a signed training scan manifest (a DSSE envelope)",
            "the approval gate reads it through a request: `trainvault approve REQUEST.json --out APPROVAL.json`",
        ),
    }


def _plain_kinds() -> dict[str, Found]:
    """Document format -> what a plain file of it is, and the command that reads it."""
    from trainvault.approval.request import ApprovalRequest
    from trainvault.contamination.report import ContaminationReport
    from trainvault.loading.state import STATE_FORMAT
    from trainvault.publication.manifest import DataManifest
    from trainvault.rollouts.documents import ArchiveIndex

    return {
        DataManifest.KIND: Found(
            "data-manifest",
            "a data manifest",
            "`trainvault inspect {uri}` summarises it; `trainvault read {uri}` reads it as stored (no approval)",
        ),
        ApprovalRequest.KIND: Found(
            "approval-request",
            "an approval request",
            "`trainvault approve {uri} --out APPROVAL.json` runs the gate on it",
        ),
        ContaminationReport.KIND: Found(
            "contamination-report",
            "a contamination report",
            "`trainvault exclusions {uri} --out EXCLUSIONS.json` lists the records it names",
        ),
        STATE_FORMAT: Found(
            "loader-state", "a loader state", "`trainvault trace --state {uri} --step N` names the records of a step"
        ),
        ArchiveIndex.KIND: Found(
            "archive-index", "a rollout archive index", "`trainvault archive inspect {uri}` summarises it"
        ),
    }


CROISSANT_CARD = Found(
    "croissant-card",
    "a Croissant card",
    "`trainvault croissant-check {uri}` hashes every file it lists against its sha256 and size",
)


def unverified_statement(raw: bytes, source: str) -> dict[str, Any] | None:
    """The in-toto statement inside DSSE envelope `raw` (signatures not checked), or None when
    `raw` is not a DSSE envelope holding a JSON object."""
    from trainvault.approval.dsse import Envelope, unverified_payload
    from trainvault.canonical import loads_strict

    try:
        payload = unverified_payload(Envelope.from_json_bytes(raw, source=source), source=source)
        statement = loads_strict(payload, source=source)
    except (TrainVaultError, ValueError):
        return None
    return statement if isinstance(statement, dict) else None


def approved_manifest(statement: dict[str, Any]) -> Any:
    """The data manifest (`ObjectRef`) an approval statement's request binds, or None."""
    from trainvault.approval.gate import coerce_request
    from trainvault.approval.record import PREDICATE_TYPE

    predicate = statement.get("predicate")
    if statement.get("predicateType") != PREDICATE_TYPE or not isinstance(predicate, dict):
        return None
    try:
        return coerce_request(predicate.get("request")).data_manifest
    except TrainVaultError:
        return None


def applied_policy(statement: dict[str, Any]) -> Any:
    """The `AppliedPolicy` an approval statement records, or None (absent, or not one this trainvault reads)."""
    from pydantic import ValidationError

    from trainvault.approval.applied import AppliedPolicy

    predicate = statement.get("predicate")
    verification = predicate.get("verification") if isinstance(predicate, dict) else None
    recorded = verification.get("policy") if isinstance(verification, dict) else None
    try:
        return None if recorded is None else AppliedPolicy.model_validate(recorded)
    except ValidationError:
        return None


def _signed(statement: dict[str, Any]) -> Found:
    kind = statement.get("predicateType")
    if not isinstance(kind, str):
        return Found("", "a DSSE envelope", "")
    found = _signed_kinds().get(kind, Found(kind, f"a DSSE envelope of {kind!r}", ""))
    bound = approved_manifest(statement)
    return found if bound is None else Found(found.kind, found.what, found.reader, bound.uri)


def recognize(uri: str, raw: bytes) -> Found | None:
    """What `raw` (read from `uri`) is, when it is a trainvault file a command reads (or any DSSE envelope)."""
    from trainvault.canonical import loads_strict

    statement = unverified_statement(raw, uri)
    if statement is not None:
        return _signed(statement)
    try:
        doc = loads_strict(raw, source=uri)
    except (TrainVaultError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    if doc.get("@type") == "sc:Dataset" and isinstance(doc.get("distribution"), list):
        return CROISSANT_CARD
    kind = doc.get("format")
    return _plain_kinds().get(kind) if isinstance(kind, str) else None


def what_it_is(uri: str, raw: bytes, takes: Takes) -> str | None:
    """``URI is ..., not EXPECTED; `trainvault COMMAND` takes EXPECTED; READER reads it`` for a
    trainvault file of a kind the command does not read there, else None."""
    found = recognize(uri, raw)
    if found is None or found.kind in takes.kinds:
        return None
    approves = f"; the data manifest it approves is {found.approves}" if found.approves else ""
    reader = f"; {found.reader.format(uri=uri)}" if found.reader else ""
    return (
        f"{uri} is {found.what}, not {takes.expected}{approves}; "
        f"`trainvault {takes.command}` takes {takes.expected}{takes.note}{reader}"
    )


def wrong_document(args: argparse.Namespace, error: TrainVaultError, storage: Callable[[], Any]) -> str | None:
    """After `error` ended the command: what a document it was given is, when it is a kind the
    command does not read there (the likely cause), else None. Storage errors are left alone:
    reading the file again would meet them again (a dead endpoint's retries twice over)."""
    if isinstance(error, StorageError):
        return None
    for takes in getattr(args, "takes", reads())(args):
        given = getattr(args, takes.attr, None)
        if not given:
            continue
        try:
            raw = storage().get_document(given)
        except (TrainVaultError, OSError):
            continue
        explained = what_it_is(given, raw, takes)
        if explained is not None:
            return explained
    return None
