"""DSSE envelopes (secure-systems-lab/dsse protocol v1) signed with Ed25519.

The signature covers ``PAE(payloadType, payload)``, never the JSON around it. Verifying
checks the payload type, then counts distinct trusted keys with a valid signature
against a threshold; ``keyid`` is an unauthenticated hint and plays no part in trust.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainvault.approval.keys import SigningKey, VerifyingKey, load_verifying_key
from trainvault.canonical import canonical_json, loads_strict
from trainvault.documents import describe_validation_error
from trainvault.errors import ApprovalError, ManifestError

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    keyid: str = ""
    sig: str = Field(min_length=1)


class Envelope(BaseModel):
    """A DSSE envelope: base64 payload, its type, and signatures over the PAE."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    payload: str
    payloadType: str
    signatures: list[Signature]

    def to_json_bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json"))

    @classmethod
    def from_json_bytes(cls, data: bytes, *, source: str = "envelope") -> Envelope:
        """Parse an envelope: `ManifestError` for a duplicated key, else `ApprovalError`."""
        try:
            return cls.model_validate(loads_strict(data, source=source))
        except ManifestError:
            raise
        except ValidationError as exc:  # before ValueError: it is one
            raise ApprovalError(f"{source}: not a DSSE envelope ({describe_validation_error(exc)})") from None
        except ValueError as exc:
            raise ApprovalError(f"{source}: not a DSSE envelope (not valid JSON: {exc})") from None


def _standard_b64decode(value: str) -> bytes:
    return base64.b64decode(value, validate=True)


def _b64decode(value: str, what: str) -> bytes:
    # DSSE allows standard or URL-safe base64.
    for decode in (_standard_b64decode, base64.urlsafe_b64decode):
        try:
            return decode(value)
        except (binascii.Error, ValueError):
            continue
    raise ApprovalError(f"{what} is not base64")


def sign_envelope(payload: bytes, keys: Sequence[SigningKey], payload_type: str = IN_TOTO_PAYLOAD_TYPE) -> Envelope:
    """An envelope over `payload` with one signature per key (at least one)."""
    if not keys:
        raise ApprovalError("an approval needs at least one signing key")
    message = pae(payload_type, payload)
    return Envelope(
        payload=base64.b64encode(payload).decode("ascii"),
        payloadType=payload_type,
        signatures=[Signature(keyid=k.keyid, sig=base64.b64encode(k.sign(message)).decode("ascii")) for k in keys],
    )


def unverified_payload(
    envelope: Envelope, *, payload_type: str = IN_TOTO_PAYLOAD_TYPE, source: str = "envelope"
) -> bytes:
    """The payload of `envelope`, its signatures not checked (for a reader that trusts no keys
    and verifies the content itself)."""
    if envelope.payloadType != payload_type:
        raise ApprovalError(f"{source}: payload type {envelope.payloadType!r} is not {payload_type!r}")
    return _b64decode(envelope.payload, f"{source}: payload")


def unverified_statement(raw: bytes, uri: str, predicate_type: str, what: str) -> tuple[Envelope, dict[str, Any]]:
    """The envelope in `raw` and its in-toto statement of `predicate_type`, signatures not yet
    checked; otherwise `ManifestError` saying the file is not `what` (e.g. "a revocation")."""
    noun = what.split()[-1]
    try:
        envelope = Envelope.from_json_bytes(raw, source=uri)
        statement = loads_strict(unverified_payload(envelope, source=uri), source=f"{uri} (its statement)")
    except ManifestError:
        raise
    except (ApprovalError, ValueError) as exc:
        raise ManifestError(f"{uri} is not {what} ({exc}); remove it from the {noun} source") from None
    if not isinstance(statement, dict) or statement.get("predicateType") != predicate_type:
        raise ManifestError(
            f"{uri} is not {what} (its statement is not a {predicate_type} statement); remove it from the {noun} source"
        )
    return envelope, statement


def _trusted_key(source: object) -> VerifyingKey:
    if not isinstance(source, (VerifyingKey, SigningKey, str, bytes, os.PathLike)):
        raise TypeError(f"a trusted key is a VerifyingKey, SigningKey, PEM data or a path, not {type(source).__name__}")
    return load_verifying_key(source)


def trusted_key_set(trusted_keys: Iterable[object], threshold: int) -> list[VerifyingKey]:
    """Distinct trusted keys, checked against `threshold` (1 <= threshold <= number of keys)."""
    if isinstance(trusted_keys, (str, bytes)):
        trusted_keys = [trusted_keys]
    keys = list(dict.fromkeys(_trusted_key(k) for k in trusted_keys))
    if not keys:
        raise ApprovalError("no trusted keys: pass the public keys whose signatures you accept")
    if not isinstance(threshold, int) or isinstance(threshold, bool) or not 1 <= threshold <= len(keys):
        raise ApprovalError(
            f"threshold must be an int from 1 to the number of trusted keys ({len(keys)}), got {threshold!r}"
        )
    return keys


def verify_envelope(
    envelope: Envelope,
    trusted_keys: Iterable[object],
    threshold: int = 1,
    *,
    payload_type: str = IN_TOTO_PAYLOAD_TYPE,
    source: str = "envelope",
) -> tuple[bytes, tuple[str, ...]]:
    """The payload and the key ids of the trusted keys that signed it, or `ApprovalError`
    when fewer than `threshold` distinct trusted keys signed it."""
    keys = trusted_key_set(trusted_keys, threshold)
    if envelope.payloadType != payload_type:
        raise ApprovalError(f"{source}: payload type {envelope.payloadType!r} is not {payload_type!r}")
    payload = _b64decode(envelope.payload, f"{source}: payload")
    message = pae(envelope.payloadType, payload)
    signers: list[str] = []
    for s in envelope.signatures:
        sig = _b64decode(s.sig, f"{source}: a signature")
        for k in keys:  # every trusted key is tried: keyid is a hint, not a lookup
            if k.keyid not in signers and k.verify(sig, message):
                signers.append(k.keyid)
                break
    if not envelope.signatures:
        raise ApprovalError(f"{source}: the envelope is unsigned; only signed approvals are accepted")
    if len(signers) < threshold:
        raise ApprovalError(
            f"{source}: {len(signers)} of the {len(keys)} trusted keys signed it, {threshold} required "
            f"({len(envelope.signatures)} signature(s) present): wrongly signed or under threshold; ask the approvers "
            "to sign, or check which public keys you trust"
        )
    return payload, tuple(signers)
