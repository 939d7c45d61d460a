"""ECDSA keys (NIST P-256, P-384, P-521) for OpenSSF Model Signing signatures.

`model_signing verify key` accepts elliptic-curve keys only, so an OMS export is signed with
one of these; approval records stay Ed25519 (`trainvault.approval.keys`). A private key's
material never appears in a repr or an error message.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import NoReturn

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from trainvault.approval.keys import key_file, write_pem_pair
from trainvault.errors import ApprovalError

#: The curves `model_signing` 1.1.1 accepts, each with the hash it signs under (the Sigstore rule).
_CURVES: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
    "secp521r1": hashes.SHA512,
}


class EcdsaSigningKey:
    """An ECDSA private key on P-256, P-384 or P-521. Its repr shows only the key hint."""

    __slots__ = ("_key",)

    def __init__(self, key: ec.EllipticCurvePrivateKey):
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in _CURVES:
            raise TypeError(f"expected an ECDSA P-256, P-384 or P-521 private key, got {type(key).__name__}")
        self._key = key

    @classmethod
    def generate(cls) -> EcdsaSigningKey:
        """A new P-256 key."""
        return cls(ec.generate_private_key(ec.SECP256R1()))

    def public_pem(self) -> bytes:
        """The public key as SubjectPublicKeyInfo PEM (what ``--public_key`` reads)."""
        return self._key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def hint(self) -> str:
        """SHA-256 of the public key's PEM: the hint a Sigstore bundle carries (a hint, not trust)."""
        return hashlib.sha256(self.public_pem()).hexdigest()

    def sign(self, message: bytes) -> bytes:
        """A DER-encoded ECDSA signature over `message`, hashed as the curve requires; deterministic
        (RFC 6979), so signing the same message again gives the same bytes."""
        return self._key.sign(message, ec.ECDSA(_CURVES[self._key.curve.name](), deterministic_signing=True))

    def to_pem(self) -> bytes:
        """Unencrypted PKCS#8 PEM: store it with owner-only permissions or in a secret manager."""
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @classmethod
    def from_pem(cls, data: bytes, *, source: str = "OMS signing key") -> EcdsaSigningKey:
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            # The message never quotes the data: it may be a key.
            raise ApprovalError(f"{source}: not an unencrypted PEM private key") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in _CURVES:
            raise ApprovalError(
                f"{source}: a {type(key).__name__.lstrip('_')}, not an ECDSA P-256/P-384/P-521 key; "
                "model_signing verifies elliptic-curve keys only: make one with "
                "`trainvault keygen --type ecdsa-p256`"
            )
        return cls(key)

    def __repr__(self) -> str:
        return f"EcdsaSigningKey(hint={self.hint[:16]}..., private)"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("an EcdsaSigningKey does not pickle: load it where it is used")


def load_ecdsa_signing_key(source: EcdsaSigningKey | str | os.PathLike[str] | bytes) -> EcdsaSigningKey:
    """An OMS signing key from itself, PEM bytes, or the path of a PEM file."""
    if isinstance(source, EcdsaSigningKey):
        return source
    if isinstance(source, bytes):
        return EcdsaSigningKey.from_pem(source)
    if not isinstance(source, (str, os.PathLike)):
        raise ApprovalError(f"an OMS signing key is a key, PEM bytes or a path, not {type(source).__name__}")
    path = Path(source)
    return EcdsaSigningKey.from_pem(key_file(path, "OMS signing key"), source=str(path))


def write_ecdsa_keypair(prefix: str | Path) -> tuple[Path, Path, EcdsaSigningKey]:
    """Write a new P-256 key as ``PREFIX.key`` (PKCS#8, mode 0600) and ``PREFIX.pub`` (SPKI);
    refuse to overwrite either."""
    private, public = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    key = EcdsaSigningKey.generate()
    write_pem_pair(private, public, key.to_pem(), key.public_pem())
    return private, public, key
