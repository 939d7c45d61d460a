"""What a file given to the command is, read without trusting it: for early argument checks and
for advice when it is the wrong file for the command, never for custody (the gate decides that).
"""

from __future__ import annotations

from typing import Any

from trainvault.errors import TrainVaultError


def _signed_kinds() -> dict[str, tuple[str, str]]:
    """In-toto predicate type -> what a signed file of it is, and the command that reads it."""
    from trainvault.approval.attestation import PREDICATE_TYPES
    from trainvault.approval.record import PREDICATE_TYPE
    from trainvault.approval.scan_manifest import TrainingScanManifest
    from trainvault.contamination.report import ContaminationReport

    return {
        PREDICATE_TYPE: (
            "a signed approval record (a DSSE envelope)",
            "`trainvault verify {uri} --sha256 PINNED_SHA256 --trusted-key APPROVER.pub` checks it and prints what it approves",
        ),
        PREDICATE_TYPES[ContaminationReport]: (
            "a signed contamination report (a DSSE envelope)",
            "`trainvault exclusions {uri} --out EXCLUSIONS.json` lists the records it names",
        ),
        PREDICATE_TYPES[TrainingScanManifest]: (
            "a signed training scan manifest (a DSSE envelope)",
            "the approval gate reads it through a request: `trainvault approve REQUEST.json --out APPROVAL.json`",
        ),
    }


def _plain_kinds() -> dict[str, tuple[str, str]]:
    """Document format -> what a plain file of it is, and the command that reads it."""
    from trainvault.approval.request import ApprovalRequest
    from trainvault.contamination.report import ContaminationReport
    from trainvault.loading.state import STATE_FORMAT
    from trainvault.rollouts.documents import ArchiveIndex

    return {
        ApprovalRequest.KIND: (
            "an approval request",
            "`trainvault approve {uri} --out APPROVAL.json` runs the gate on it",
        ),
        ContaminationReport.KIND: (
            "a contamination report",
            "`trainvault exclusions {uri} --out EXCLUSIONS.json` lists the records it names",
        ),
        STATE_FORMAT: ("a loader state", "`trainvault trace --state {uri} --step N` names the records of a step"),
        ArchiveIndex.KIND: ("a rollout archive index", "`trainvault archive inspect {uri}` summarises it"),
    }


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


def what_it_is(uri: str, raw: bytes, expected: str) -> str | None:
    """``URI is ..., not EXPECTED; COMMAND reads it`` for a trainvault file of another kind, else None."""
    from trainvault.canonical import loads_strict

    statement = unverified_statement(raw, uri)
    if statement is not None:
        kind = statement.get("predicateType")
        what, reader = (
            _signed_kinds().get(kind, (f"a DSSE envelope of {kind!r}", ""))
            if isinstance(kind, str)
            else ("a DSSE envelope", "")
        )
        bound = approved_manifest(statement)
        approves = f"; the data manifest it approves is {bound.uri}" if bound is not None else ""
        return f"{uri} is {what}, not {expected}{approves}" + (f"; {reader.format(uri=uri)}" if reader else "")
    try:
        doc = loads_strict(raw, source=uri)
    except (TrainVaultError, ValueError):
        return None
    kind = doc.get("format") if isinstance(doc, dict) else None
    found = _plain_kinds().get(kind) if isinstance(kind, str) else None
    return None if found is None else f"{uri} is {found[0]}, not {expected}; {found[1].format(uri=uri)}"
