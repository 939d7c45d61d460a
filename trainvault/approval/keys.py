"""Ed25519 keys for approval records: generate, save and load (files or environment).

A private key's material never appears in a repr, log line or error message. A key id
is the SHA-256 of the raw public key: a hint for people, never used to decide trust.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from trainvault.errors import ApprovalError, ConfigurationError
from trainvault.storage.local_file import KEY_FILE_LIMIT, read_local_file

#: Environment variable holding a signing key (PEM text, or the path of a PEM file).
SIGNING_KEY_ENV = "TRAINVAULT_SIGNING_KEY"


class VerifyingKey:
    """An Ed25519 public key trusted to sign approvals."""

    __slots__ = ("_key", "_raw")

    def __init__(self, key: Ed25519PublicKey):
        if not isinstance(key, Ed25519PublicKey):
            raise TypeError(f"expected an Ed25519 public key, got {type(key).__name__}")
        self._key = key
        self._raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def keyid(self) -> str:
        return hashlib.sha256(self._raw).hexdigest()

    def verify(self, signature: bytes, message: bytes) -> bool:
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def to_pem(self) -> bytes:
        return self._key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    @classmethod
    def from_pem(cls, data: bytes | str, *, source: str = "public key") -> VerifyingKey:
        try:
            key = serialization.load_pem_public_key(data.encode() if isinstance(data, str) else data)
        except (ValueError, TypeError):
            raise ApprovalError(
                f"{source}: not a PEM public key; pass the .pub file written by `trainvault keygen`"
            ) from None
        if not isinstance(key, Ed25519PublicKey):
            raise ApprovalError(f"{source}: a {type(key).__name__}, not an Ed25519 public key")
        return cls(key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VerifyingKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"VerifyingKey(keyid={self.keyid[:16]}...)"


class SigningKey:
    """An Ed25519 private key. Its repr shows only the key id."""

    __slots__ = ("_key",)

    def __init__(self, key: Ed25519PrivateKey):
        if not isinstance(key, Ed25519PrivateKey):
            raise TypeError(f"expected an Ed25519 private key, got {type(key).__name__}")
        self._key = key

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @property
    def public_key(self) -> VerifyingKey:
        return VerifyingKey(self._key.public_key())

    @property
    def keyid(self) -> str:
        return self.public_key.keyid

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)

    def to_pem(self) -> bytes:
        """Unencrypted PKCS#8 PEM: store it with owner-only permissions or in a secret manager."""
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @classmethod
    def from_pem(cls, data: bytes | str, *, source: str = "signing key") -> SigningKey:
        try:
            key = serialization.load_pem_private_key(data.encode() if isinstance(data, str) else data, password=None)
        except (ValueError, TypeError):
            # The message never quotes the data: it may be a key.
            raise ApprovalError(f"{source}: not an unencrypted PEM private key") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ApprovalError(f"{source}: not an Ed25519 private key")
        return cls(key)

    def __repr__(self) -> str:
        return f"SigningKey(keyid={self.keyid[:16]}..., private)"

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("a SigningKey does not pickle: load it where it is used")


def _is_pem(value: str | bytes) -> bool:
    return (value.lstrip()[:10] if isinstance(value, bytes) else value.lstrip()[:10].encode()) == b"-----BEGIN"


def write_keypair(
    prefix: str | Path, key: SigningKey | None = None, *, exist_ok: bool = False
) -> tuple[Path, Path, SigningKey]:
    """Write ``PREFIX.key`` (private, mode 0600) and ``PREFIX.pub``; refuse to overwrite either.
    `exist_ok`: a pair already there (the public key that of the private one) is kept and returned."""
    private, public = Path(f"{prefix}.key"), Path(f"{prefix}.pub")
    if exist_ok and private.exists() and public.exists():
        return private, public, _existing_pair(private, public, key)
    key = key or SigningKey.generate()
    write_pem_pair(private, public, key.to_pem(), key.public_key.to_pem())
    return private, public, key


def write_pem_pair(private: Path, public: Path, private_pem: bytes, public_pem: bytes) -> None:
    """Write a private key (mode 0600) and its public key, create-only (`ApprovalError` if either exists)."""
    for p in (private, public):
        if p.exists():
            raise ApprovalError(f"{p} already exists; keys are never overwritten: choose another name")
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(private_pem)
        with open(public, "xb") as f:
            f.write(public_pem)
    except OSError as exc:
        raise ApprovalError(
            f"cannot write key {exc.filename}: {exc.strerror}; choose a prefix in a folder that exists and is writable"
        ) from None


def _existing_pair(private: Path, public: Path, key: SigningKey | None) -> SigningKey:
    found = load_signing_key(private)
    if load_verifying_key(public).keyid != found.keyid or (key is not None and key.keyid != found.keyid):
        raise ApprovalError(
            f"{private} and {public} are not one key pair (or not the key given); keys are never overwritten: "
            "choose another name"
        )
    return found


def load_signing_key(source: str | Path | bytes | None = None, *, env: str = SIGNING_KEY_ENV) -> SigningKey:
    """A signing key from PEM bytes/text, a file path, or (with no source) the environment
    variable `env`, which holds PEM text or a file path."""
    where = "signing key"
    if source is None:
        value = os.environ.get(env)
        if not value:
            raise ApprovalError(f"no signing key: pass one, or set {env} to a PEM key or the path of one")
        source, where = value, f"${env}"
    if isinstance(source, bytes) or (isinstance(source, str) and _is_pem(source)):
        return SigningKey.from_pem(source, source=where)
    path = Path(source)
    return SigningKey.from_pem(key_file(path, "signing key"), source=str(path))


def load_signing_keys(
    keys: SigningKey | str | bytes | Path | Iterable[SigningKey | str | bytes | Path] | None,
) -> list[SigningKey]:
    """Signing keys from one key, PEM data or path, a sequence of them, or None (the environment)."""
    items = [keys] if keys is None or isinstance(keys, (SigningKey, str, bytes, Path)) else keys
    return [k if isinstance(k, SigningKey) else load_signing_key(k) for k in items]


def load_verifying_key(source: VerifyingKey | SigningKey | str | os.PathLike[str] | bytes) -> VerifyingKey:
    """A trusted public key from itself, a signing key's public half, PEM bytes/text, or a file path."""
    if isinstance(source, VerifyingKey):
        return source
    if isinstance(source, SigningKey):
        return source.public_key
    if isinstance(source, bytes) or (isinstance(source, str) and _is_pem(source)):
        return VerifyingKey.from_pem(source)
    path = Path(source)
    return VerifyingKey.from_pem(key_file(path, "public key"), source=str(path))


def key_file(path: Path, what: str) -> bytes:
    """A key file's bytes through the one bounded, regular-file-only local read."""
    try:
        return read_local_file(path, limit=KEY_FILE_LIMIT, what=f"a PEM {what}")
    except ConfigurationError as exc:
        raise ApprovalError(f"cannot read {what} {path}: {exc}") from None
