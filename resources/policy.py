"""The approval policy a dataset's gate applies, declared in the catalog's ``policy:`` block.

Trusted scanner keys make the gate re-scan a seeded sample of shards instead of every
shard; `allow_exclusions` lets contaminated records be left out of the approval (the
`contamination_exclusions` asset) up to `max_excluded_fraction`; `unscanned_fields` exempts
fields trainers never train on from the gate's text-field survey. Fractions are written
``N/D`` (``"2/100"``), as the ``trainvault`` command line takes them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from trainvault import ConfigurationError
from trainvault.approval.policy import is_field_path

if TYPE_CHECKING:
    from trainvault.approval import ApprovalPolicy, VerifyingKey

FRACTION = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_fraction(text: str, field: str) -> tuple[int, int]:
    """``"N/D"`` as ``(N, D)`` with ``0 <= N <= D`` and ``D >= 1``; `ConfigurationError` naming `field` otherwise."""
    m = FRACTION.match(text) if isinstance(text, str) else None
    if m is None or int(m.group(2)) < 1 or int(m.group(1)) > int(m.group(2)):
        raise ConfigurationError(
            f"field 'policy.{field}' is {text!r}, expected N/D with 0 <= N <= D and D >= 1 (e.g. 2/100)"
        )
    return int(m.group(1)), int(m.group(2))


class ApprovalPolicyConfig(dg.Config):
    """How the dataset's approval is judged beyond the verifier contract."""

    scanner_threshold: int = Field(default=1, description="signatures required from distinct trusted scanner keys")
    rescan_min_shards: int = Field(default=2, description="with scanner keys: re-scan at least this many shards")
    rescan_fraction: str = Field(default="2/100", description="with scanner keys: re-scan at least this fraction (N/D)")
    rescan_seed: int | None = Field(default=None, description="seed of the re-scan sample (None: random, recorded)")
    allow_exclusions: bool = Field(default=False, description="approve with contaminated records excluded")
    max_excluded_fraction: str = Field(default="1/100", description="at most this fraction of records excluded (N/D)")
    unscanned_fields: list[str] = Field(
        default_factory=list,
        description="record fields (dotted paths such as meta.title) trainers never train on: text the verifier "
        "contract leaves unscanned there does not deny the approval",
    )

    def approval_policy(
        self,
        scanner_keys: list[VerifyingKey] | None,
        *,
        evaluation_release_sha256: str | None = None,
        verifier_contract_sha256: str | None = None,
    ) -> ApprovalPolicy:
        """The library's `ApprovalPolicy` for this block, pinned to the run's release and contract."""
        from trainvault.approval import ApprovalPolicy

        return ApprovalPolicy(
            evaluation_release_sha256=evaluation_release_sha256,
            verifier_contract_sha256=verifier_contract_sha256,
            scanner_keys=scanner_keys or None,
            scanner_threshold=self.scanner_threshold,
            rescan_min_shards=self.rescan_min_shards,
            rescan_fraction=parse_fraction(self.rescan_fraction, "rescan_fraction"),
            rescan_seed=self.rescan_seed,
            allow_exclusions=self.allow_exclusions,
            max_excluded_fraction=parse_fraction(self.max_excluded_fraction, "max_excluded_fraction"),
            unscanned_fields=self.unscanned_fields,
        )

    def check(self) -> None:
        """What pydantic's types cannot say; `ConfigurationError` naming the field."""
        if self.rescan_min_shards < 0:
            raise ConfigurationError("field 'policy.rescan_min_shards' must be a non-negative integer")
        if self.scanner_threshold < 1:
            raise ConfigurationError("field 'policy.scanner_threshold' must be at least 1")
        parse_fraction(self.rescan_fraction, "rescan_fraction")
        parse_fraction(self.max_excluded_fraction, "max_excluded_fraction")
        bad = [f for f in self.unscanned_fields if not is_field_path(f)]
        if bad:
            raise ConfigurationError(
                f"field 'policy.unscanned_fields' holds {bad!r}: each must be a field name or a dotted path "
                "such as meta.title"
            )
