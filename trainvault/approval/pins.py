"""Producer pins (producer-pins-v1.json): the package versions and code revision that produced the data.

They play the role of SLSA's resolved dependencies: the contamination report binds them by
digest, and the gate checks them against the producers the shard descriptors record and
against a trainer's allowlist.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Iterable
from typing import Literal

from pydantic import Field, field_validator

from trainvault.documents import Document, StrictModel
from trainvault.errors import ManifestError
from trainvault.publication.bound import Bound, write_document
from trainvault.storage.store import StorageSource, storage_of

PINS_NAME = "producer-pins-v1.json"


def canonical_package_name(name: str) -> str:
    """PEP 503 normalised name: ``Foo_Bar`` and ``foo-bar`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


class PackagePin(StrictModel):
    name: str = Field(min_length=1, max_length=200)
    version: str = Field(min_length=1, max_length=200)


class ProducerPins(Document):
    """producer-pins-v1: packages (sorted by normalised name, each once), code revision, Python."""

    KIND = "trainvault.producer-pins"

    format: Literal["trainvault.producer-pins"] = "trainvault.producer-pins"
    version: Literal[1] = 1
    packages: list[PackagePin] = Field(min_length=1)
    code_revision: str | None = None
    python: str

    @field_validator("packages")
    @classmethod
    def _sorted(cls, value: list[PackagePin]) -> list[PackagePin]:
        names = [canonical_package_name(p.name) for p in value]
        if names != sorted(set(names)) or any(p.name != n for p, n in zip(value, names, strict=False)):
            raise ValueError("packages must be sorted by PEP 503 normalised name, each once, names normalised")
        return value

    def version_of(self, package: str) -> str | None:
        """The pinned version of `package`, or None when it is not pinned."""
        name = canonical_package_name(package)
        return next((p.version for p in self.packages if p.name == name), None)


def git_revision(path: str = ".") -> str | None:
    """``git rev-parse HEAD`` of the checkout at `path`, with ``+dirty`` when it has changes; None outside git."""
    try:
        head = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def collect_producer_pins(
    packages: Iterable[str] = ("trainvault",), *, code_revision: str | None = None
) -> ProducerPins:
    """Pins of the installed versions of `packages` (trainvault is always included)."""
    names = sorted({canonical_package_name(p) for p in (*packages, "trainvault")})
    pins = []
    for name in names:
        try:
            pins.append(PackagePin(name=name, version=importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            raise ManifestError(f"cannot pin package {name!r}: it is not installed") from None
    return ProducerPins(
        packages=pins,
        code_revision=code_revision,
        python=f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}",
    )


def write_producer_pins(storage: StorageSource, uri: str, pins: ProducerPins) -> Bound[ProducerPins]:
    """Publish the pins create-only; its digest is of the bytes written."""
    return write_document(storage_of(storage), uri, pins)
