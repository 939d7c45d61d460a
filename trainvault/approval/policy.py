"""What a trainer expects of an approval: the policy the gate judges a request against."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainvault.approval.dsse import trusted_key_set
from trainvault.canonical import is_sha256_hex
from trainvault.contamination.contract import DEFAULT_CONTRACT, BenchmarkLimits
from trainvault.errors import ApprovalError


def is_field_path(name: object) -> bool:
    """Whether `name` names a record field: a key, or a dotted path of keys such as ``meta.title``."""
    return isinstance(name, str) and bool(name) and not name.startswith(".") and not name.endswith(".")


def _ratio(value: Any, what: str) -> tuple[int, int]:
    """A fraction ``(n, d)`` of ints with ``0 <= n <= d`` and ``d >= 1``."""
    ok = (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and value[1] >= 1
        and 0 <= value[0] <= value[1]
    )
    if not ok:
        raise ApprovalError(
            f"ApprovalPolicy.{what} must be (numerator, denominator) ints with 0 <= n <= d, d >= 1, got {value!r}"
        )
    return int(value[0]), int(value[1])


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
    - `scanner_keys`, `scanner_threshold`: the public keys trusted to sign contamination
      reports and scan manifests, and how many of them must sign. None: no report is
      trusted, so the gate re-scans every shard (and accepts unsigned documents).
    - `rescan_min_shards`, `rescan_fraction`: with scanner keys, the gate re-scans
      max(`rescan_min_shards`, `rescan_fraction` of the shards) distinct shards (default
      max(2, 2/100)); 0 and (0, 1) disable the re-scan. `rescan_seed` seeds the sample
      (None: a fresh random seed each time, recorded in the summary).
    - `allow_exclusions`, `max_excluded_fraction`: whether a request may bind an
      exclusions document, and at most which fraction of the manifest's records it may
      exclude (default 1/100).
    - `unscanned_fields`: record fields (dotted paths, e.g. ``meta.title``) that may carry
      text the verifier contract does not scan, because the trainer never trains on them;
      a name exempts itself and every field below it. Default: none, so a contract that
      leaves a text-carrying field unscanned is denied (`UnscannedFieldError`).
    """

    evaluation_release_sha256: str | None = None
    verifier_contract_sha256: str | None = None
    allowed_producers: Mapping[str, Collection[str]] | None = None
    min_policy: BenchmarkLimits = field(default_factory=lambda: DEFAULT_CONTRACT.policy)
    scanner_keys: Collection[Any] | None = None
    scanner_threshold: int = 1
    rescan_min_shards: int = 2
    rescan_fraction: tuple[int, int] = (2, 100)
    rescan_seed: int | None = None
    allow_exclusions: bool = False
    max_excluded_fraction: tuple[int, int] = (1, 100)
    unscanned_fields: Collection[str] = ()

    def __post_init__(self) -> None:
        for name in ("evaluation_release_sha256", "verifier_contract_sha256"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and is_sha256_hex(value)):
                raise ApprovalError(f"ApprovalPolicy.{name} must be a 64-character lowercase hex sha256, got {value!r}")
        if self.allowed_producers is not None:
            if not isinstance(self.allowed_producers, Mapping):
                raise TypeError(
                    f"ApprovalPolicy.allowed_producers maps package names to versions, not {self.allowed_producers!r}"
                )
            for name, versions in self.allowed_producers.items():
                if isinstance(versions, str):
                    raise ApprovalError(
                        f"ApprovalPolicy.allowed_producers[{name!r}] must be a collection of versions, not a string"
                    )
        self._check_scanner()
        object.__setattr__(self, "rescan_fraction", _ratio(self.rescan_fraction, "rescan_fraction"))
        object.__setattr__(self, "max_excluded_fraction", _ratio(self.max_excluded_fraction, "max_excluded_fraction"))
        if not isinstance(self.allow_exclusions, bool):
            raise ApprovalError(f"ApprovalPolicy.allow_exclusions must be True or False, got {self.allow_exclusions!r}")
        fields = self.unscanned_fields
        if (
            isinstance(fields, (str, bytes))
            or not isinstance(fields, Collection)
            or not all(is_field_path(f) for f in fields)
        ):
            raise ApprovalError(
                f"ApprovalPolicy.unscanned_fields must be a list of field names (dotted paths such as "
                f"'meta.title'), got {fields!r}"
            )
        object.__setattr__(self, "unscanned_fields", tuple(sorted(set(fields))))

    def _check_scanner(self) -> None:
        for name in ("rescan_min_shards", "scanner_threshold"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ApprovalError(f"ApprovalPolicy.{name} must be a non-negative int, got {value!r}")
        if self.rescan_seed is not None and (
            not isinstance(self.rescan_seed, int) or isinstance(self.rescan_seed, bool)
        ):
            raise ApprovalError(f"ApprovalPolicy.rescan_seed must be an int or None, got {self.rescan_seed!r}")
        if self.scanner_keys is None:
            return
        # Keys are loaded once, here: a bad key or threshold fails when the policy is made.
        keys = trusted_key_set(self.scanner_keys, self.scanner_threshold)
        object.__setattr__(self, "scanner_keys", tuple(keys))

    def rescan_count(self, shards: int) -> int:
        """How many of `shards` distinct shards the gate re-scans (all of them without scanner keys)."""
        if self.scanner_keys is None:
            return shards
        n, d = self.rescan_fraction
        return min(shards, max(self.rescan_min_shards, -(-shards * n // d)))
