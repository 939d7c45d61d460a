"""Amendments: signed, chained takedowns of records from an approval, no shard rewritten.

An amendment is an in-toto Statement about the approval record (subject: its sha256) whose
predicate is an `Amendment` document, in a DSSE envelope signed by the approver's Ed25519 keys.
Amendments chain: amendment ``n`` names the approval, its sequence number and the sha256 of
amendment ``n - 1``'s envelope, and lists every record removed so far (cumulative, each with
the amendment that removed it and a reason), so one document says what the amended view is
and the chain says it only ever grew. They are content-named,
``<prefix>/<approval sha256>/<sequence>-<envelope sha256>.dsse.json``.

A trainer's open reads the chain (`read_amendments`) and refuses, with `AmendmentError`: an
amendment of another approval or manifest, one not signed by `threshold` of the trusted keys,
a broken chain (a gap, a fork, a wrong predecessor), one that adds records back or changes an
earlier removal. What it rests on: the keys the trainer trusts for the approval, and the
sha256 links between the envelopes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field, model_validator

from trainvault.approval.dsse import STATEMENT_TYPE, Envelope, trusted_key_set, unverified_statement, verify_envelope
from trainvault.approval.keys import VerifyingKey
from trainvault.approval.revocation import RevocationSource, source_uris
from trainvault.canonical import sha256_hex
from trainvault.documents import Document, StrictModel
from trainvault.errors import AmendmentError, ApprovalError, ManifestError, TrainVaultError
from trainvault.refs import Sha256
from trainvault.storage import Storage
from trainvault.uris import normalize_uri

AMENDMENT_PREDICATE = "https://trainvault.invalid/amendment/v1"
#: The folder beside an approval record that `amend` writes to by default.
AMENDMENTS_FOLDER = "amendments"
#: Why a record is taken down.
Reason = Literal["licence", "personal-data", "opt-out", "contamination"]
REASONS: tuple[str, ...] = ("licence", "personal-data", "opt-out", "contamination")


class Removal(StrictModel):
    """One record taken down: split, manifest shard key, 0-based index in the shard, why, and
    the sequence number of the amendment that removed it."""

    split: str = Field(min_length=1)
    shard: str = Field(min_length=1)
    record_index: int = Field(ge=0)
    reason: Reason
    note: str = Field(default="", max_length=1000)
    amendment: int = Field(ge=1)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.split, self.shard, self.record_index)


class Amendment(Document):
    """Amendment `sequence` of the approval `approval_sha256`: every record removed so far."""

    KIND = "trainvault.amendment"

    format: Literal["trainvault.amendment"] = "trainvault.amendment"
    version: Literal[1] = 1
    approval_sha256: Sha256
    data_manifest_sha256: Sha256
    sequence: int = Field(ge=1)
    #: The envelope sha256 of amendment ``sequence - 1`` (None for the first).
    previous_sha256: Sha256 | None
    removed: list[Removal] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Amendment:
        keys = [r.key for r in self.removed]
        if keys != sorted(set(keys)):
            raise ValueError("removed must be sorted by split, shard and record index, each record once")
        if (self.previous_sha256 is None) != (self.sequence == 1):
            raise ValueError("previous_sha256 names the amendment before, and only the first has none")
        if any(r.amendment > self.sequence for r in self.removed):
            raise ValueError(f"a removal names an amendment after this one ({self.sequence})")
        if not any(r.amendment == self.sequence for r in self.removed):
            raise ValueError(f"amendment {self.sequence} removes no record of its own")
        return self


@dataclass(frozen=True)
class SignedAmendment:
    """An amendment as read: where, its envelope's sha256, the document and who signed it."""

    uri: str
    sha256: str
    amendment: Amendment
    signers: tuple[str, ...]


@dataclass(frozen=True)
class AmendmentChain:
    """An approval's amendments, oldest first, checked: `removed` is what the latest takes down."""

    amendments: tuple[SignedAmendment, ...]

    @property
    def latest(self) -> SignedAmendment:
        return self.amendments[-1]

    @property
    def removed(self) -> tuple[Removal, ...]:
        return tuple(self.latest.amendment.removed)

    def removed_up_to(self, sequence: int) -> tuple[Removal, ...]:
        """What the view after amendment `sequence` (0: the approval alone) takes down."""
        return tuple(r for r in self.removed if r.amendment <= sequence)

    def by_shard(self, split: str, sequence: int | None = None) -> Mapping[str, frozenset[int]]:
        """Shard key -> removed record indices of `split` (after amendment `sequence`; default the latest)."""
        out: dict[str, set[int]] = {}
        for r in self.removed_up_to(self.latest.amendment.sequence if sequence is None else sequence):
            if r.split == split:
                out.setdefault(r.shard, set()).add(r.record_index)
        return MappingProxyType({k: frozenset(v) for k, v in out.items()})


def amendment_statement(document: Amendment, approval_uri: str) -> dict[str, Any]:
    """The in-toto Statement about the amended approval record whose predicate is `document`."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": approval_uri, "digest": {"sha256": document.approval_sha256}}],
        "predicateType": AMENDMENT_PREDICATE,
        "predicate": document.model_dump(mode="json"),
    }


def amendment_uri(prefix: str, approval_sha256: str, sequence: int, envelope_sha256: str) -> str:
    """Where amendment `sequence` of `approval_sha256`, whose envelope hashes to `envelope_sha256`, lives."""
    return f"{normalize_uri(prefix).rstrip('/')}/{approval_sha256}/{sequence:06d}-{envelope_sha256}.dsse.json"


def read_amendments(
    storage: Storage,
    source: RevocationSource,
    approval_sha256: str,
    manifest_sha256: str,
    *,
    trusted_keys: Iterable[object],
    threshold: int = 1,
) -> AmendmentChain | None:
    """The checked chain of amendments of `approval_sha256` in `source` (a prefix: its
    ``<approval_sha256>/`` folder; or files), None when there are none. `AmendmentError` names
    what is wrong; `ManifestError` a file that is not an amendment."""
    keys = trusted_key_set(trusted_keys, threshold)
    found = [_read(storage, uri, keys, threshold) for uri in source_uris(storage, source, approval_sha256)]
    _check_amends(found, approval_sha256, manifest_sha256)
    return AmendmentChain(chained(found)) if found else None


def _check_amends(found: list[SignedAmendment], approval_sha256: str, manifest_sha256: str) -> None:
    for f in found:
        a = f.amendment
        if (a.approval_sha256, a.data_manifest_sha256) != (approval_sha256, manifest_sha256):
            raise AmendmentError(
                f"{f.uri} amends approval {a.approval_sha256} of manifest {a.data_manifest_sha256}, not approval "
                f"{approval_sha256} of manifest {manifest_sha256}; remove it from this approval's amendments"
            )


def signed_chain(
    storage: Storage, source: RevocationSource, approval_sha256: str, manifest_sha256: str, keys: Sequence[VerifyingKey]
) -> tuple[SignedAmendment, ...]:
    """The amendments of `approval_sha256` in `source`, in chain order, each signed by at least one
    of `keys` (the approver appending the next one checks what it chains onto with its own keys;
    a trainer's open applies its trusted keys and threshold)."""
    found = [_read(storage, u, list(keys), 1) for u in source_uris(storage, source, approval_sha256)]
    _check_amends(found, approval_sha256, manifest_sha256)
    return chained(found) if found else ()


def chained(found: list[SignedAmendment]) -> tuple[SignedAmendment, ...]:
    """`found` in chain order, once each links to the one before and only ever adds removals."""
    chain = sorted(found, key=lambda f: f.amendment.sequence)
    sequences = [f.amendment.sequence for f in chain]
    if sequences != list(range(1, len(chain) + 1)):
        raise AmendmentError(
            f"broken amendment chain: the sequence numbers are {sequences}, not 1 to {len(chain)} (a gap or a fork); "
            "the approvers must publish one amendment per number"
        )
    for before, after in pairwise(chain):
        a = after.amendment
        if a.previous_sha256 != before.sha256:
            raise AmendmentError(
                f"broken amendment chain: {after.uri} (amendment {a.sequence}) follows {a.previous_sha256}, not "
                f"{before.uri} ({before.sha256}); the approvers must amend the latest amendment"
            )
        kept = [r for r in a.removed if r.amendment < a.sequence]
        if kept != list(before.amendment.removed):
            back = {r.key for r in before.amendment.removed} - {r.key for r in kept}
            what = f"adds back {len(back)} record(s) ({sorted(back)[:3]})" if back else "changes earlier removals"
            raise AmendmentError(
                f"{after.uri} (amendment {a.sequence}) {what} that amendment {before.amendment.sequence} removed; an "
                "amendment only removes records: a taken-down record is never dealt again"
            )
    return tuple(chain)


def check_removals(removed: Sequence[Removal], manifest: Any, max_fraction: tuple[int, int]) -> None:
    """Every removal names a record of the approved `manifest`, and they are at most
    `max_fraction` of its records (`AmendmentError` otherwise)."""
    shards = {(split, s.key): s.record_count for split, sp in manifest.splits.items() for s in sp.shards}
    for r in removed:
        count = shards.get((r.split, r.shard))
        if count is None or r.record_index >= count:
            where = "no such shard" if count is None else f"the shard holds {count} records"
            raise AmendmentError(
                f"amendment {r.amendment} removes {r.split}/{r.shard}#{r.record_index}, which the approval does not "
                f"hold ({where}); the amendment is not of this dataset"
            )
    total = sum(shards.values())
    n, d = max_fraction
    if len(removed) * d > total * n:
        last = max(r.amendment for r in removed)
        raise AmendmentError(
            f"the amendments up to amendment {last} remove {len(removed)} of {total} records, more than the "
            f"{n}/{d} your policy allows (ApprovalPolicy.max_removed_fraction); ask for a new approval of the reduced dataset, or "
            "allow more on purpose"
        )


def _read(storage: Storage, uri: str, keys: list[VerifyingKey], threshold: int) -> SignedAmendment:
    envelope, sha256, document = _parse(storage, uri)
    try:
        _, signers = verify_envelope(envelope, keys, threshold, source=uri)
    except ApprovalError as exc:
        claimed = ", ".join(s.keyid[:16] or "(no keyid)" for s in envelope.signatures)
        raise AmendmentError(
            f"amendment {uri} is not signed by {threshold} of the trusted keys (it claims {claimed}): {exc}; an "
            "amendment counts only when the approvers' keys sign it"
        ) from None
    return SignedAmendment(uri, sha256, document, signers)


def _parse(storage: Storage, uri: str) -> tuple[Envelope, str, Amendment]:
    """The envelope, its sha256 and its amendment, signatures not yet checked."""
    try:
        raw = storage.get_document(uri)
    except TrainVaultError as exc:
        raise AmendmentError(f"cannot read amendment {uri}: {exc}; no amended view, no load") from exc
    envelope, statement = unverified_statement(raw, uri, AMENDMENT_PREDICATE, "an amendment")
    document = Amendment.from_obj(statement.get("predicate"), source=uri)
    subjects = statement.get("subject")
    digests = [
        s["digest"].get("sha256") if isinstance(s, dict) and isinstance(s.get("digest"), dict) else None
        for s in (subjects if isinstance(subjects, list) else [])
    ]
    if digests != [document.approval_sha256]:
        raise ManifestError(f"{uri}: the statement's subject {digests} is not the approval its amendment names")
    return envelope, sha256_hex(raw), document
