"""The approval request: every artifact the gate judges, each bound by (uri, sha256)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Literal

from pydantic import Field, field_validator

from trainvault.documents import Document
from trainvault.publication.manifest import validate_name
from trainvault.refs import ArtifactRef

#: The required bindings, in the order the gate reads them.
BINDINGS = (
    "data_manifest",
    "training_scan_manifest",
    "evaluation_release",
    "contamination_report",
    "verifier_contract",
    "producer_pins",
)


class ApprovalRequest(Document):
    """approval-request-v1: the six bound artifacts, plus optional authoritative sidecars
    (e.g. ``prepared-artifact-manifest``), each hashed by the gate."""

    KIND = "trainvault.approval-request"

    format: Literal["trainvault.approval-request"] = "trainvault.approval-request"
    version: Literal[1] = 1
    data_manifest: ArtifactRef
    training_scan_manifest: ArtifactRef
    evaluation_release: ArtifactRef
    contamination_report: ArtifactRef
    verifier_contract: ArtifactRef
    producer_pins: ArtifactRef
    sidecars: dict[str, ArtifactRef] = Field(default_factory=dict)

    @field_validator("sidecars")
    @classmethod
    def _sidecar_names(cls, value: dict[str, ArtifactRef]) -> dict[str, ArtifactRef]:
        for name in value:
            validate_name("sidecar name", name)
            if name in BINDINGS:
                raise ValueError(f"sidecar name {name!r} is a required binding's name")
        return value

    def bindings(self) -> MappingProxyType[str, ArtifactRef]:
        """Every binding by name (required ones first, then sidecars), read-only."""
        out = {name: getattr(self, name) for name in BINDINGS}
        out.update(self.sidecars)
        return MappingProxyType(out)
