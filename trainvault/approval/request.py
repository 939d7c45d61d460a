"""The approval request: every artifact the gate judges, each bound by (uri, sha256)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from trainvault.documents import Document
from trainvault.publication.manifest import validate_name
from trainvault.refs import ObjectRef, Referenced

#: The required bindings, in the order the gate reads them.
BINDINGS = (
    "data_manifest",
    "training_scan_manifest",
    "evaluation_release",
    "contamination_report",
    "verifier_contract",
    "producer_pins",
)


def _binding(value: Any) -> Any:
    """Any reference a writer returns (`ObjectRef`, `Bound`, a written record), as (uri, sha256):
    approval-request-v1 binds no size, and the gate hashes every byte anyway."""
    if isinstance(value, Referenced):
        value = value.ref
    if isinstance(value, ObjectRef):
        return value if value.size is None else ObjectRef(uri=value.uri, sha256=value.sha256)
    if isinstance(value, dict) and "size" in value:
        raise ValueError("approval-request-v1 binds an artifact by uri and sha256, without a size")
    return value


#: A bound artifact: an `ObjectRef` without its size.
_Bound = Annotated[ObjectRef, BeforeValidator(_binding)]


class ApprovalRequest(Document):
    """approval-request-v1: the six bound artifacts, plus optional authoritative sidecars
    (e.g. ``prepared-artifact-manifest``), each hashed by the gate."""

    KIND = "trainvault.approval-request"

    format: Literal["trainvault.approval-request"] = "trainvault.approval-request"
    version: Literal[1] = 1
    data_manifest: _Bound
    training_scan_manifest: _Bound
    evaluation_release: _Bound
    contamination_report: _Bound
    verifier_contract: _Bound
    producer_pins: _Bound
    sidecars: dict[str, _Bound] = Field(default_factory=dict)

    @field_validator("sidecars")
    @classmethod
    def _sidecar_names(cls, value: dict[str, ObjectRef]) -> dict[str, ObjectRef]:
        for name in value:
            validate_name("sidecar name", name)
            if name in BINDINGS:
                raise ValueError(f"sidecar name {name!r} is a required binding's name")
        return value

    def bindings(self) -> MappingProxyType[str, ObjectRef]:
        """Every binding by name (required ones first, then sidecars), read-only."""
        out = {name: getattr(self, name) for name in BINDINGS}
        out.update(self.sidecars)
        return MappingProxyType(out)
