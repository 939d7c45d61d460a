"""What a trainer expects of an approval: the policy the gate judges a request against."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from trainvault.canonical import is_sha256_hex
from trainvault.contamination.contract import DEFAULT_CONTRACT, Policy
from trainvault.errors import ApprovalError


@dataclass(frozen=True)
class ApprovalPolicy:
    """What the trainer expects; the gate denies whatever these do not allow.

    - `evaluation_release_sha256`: the release the trainer will evaluate on (None: any
      release the report binds).
    - `verifier_contract_sha256`: the exact contract to accept (None: any contract this
      library implements whose policy is no looser than `min_policy`).
    - `allowed_producers`: package name -> allowed versions; every producer pin must be
      listed (unknown packages and stale or revoked versions are denied). None: no allowlist,
      but pins must still match the producers the shard descriptors record.
    - `min_policy`: the loosest contamination policy accepted (default: the library's,
      none contaminated and at most 1/20 uncheckable).
    """

    evaluation_release_sha256: str | None = None
    verifier_contract_sha256: str | None = None
    allowed_producers: Mapping[str, Collection[str]] | None = None
    min_policy: Policy = field(default_factory=lambda: DEFAULT_CONTRACT.policy)

    def __post_init__(self) -> None:
        for name in ("evaluation_release_sha256", "verifier_contract_sha256"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and is_sha256_hex(value)):
                raise ApprovalError(f"ApprovalPolicy.{name} must be a 64-character lowercase hex sha256, got {value!r}")
        if self.allowed_producers is not None:
            if not isinstance(self.allowed_producers, Mapping):
                raise TypeError(f"ApprovalPolicy.allowed_producers maps package names to versions, not {self.allowed_producers!r}")
            for name, versions in self.allowed_producers.items():
                if isinstance(versions, str):
                    raise ApprovalError(
                        f"ApprovalPolicy.allowed_producers[{name!r}] must be a collection of versions, not a string"
                    )
