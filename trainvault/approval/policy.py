"""What a trainer expects of an approval: the policy the gate judges a request against, and
its two written forms (CLI options, Python source) for a trainer to paste: both come from one
policy object, so a dataset's page cannot print a command and a snippet that ask for different things."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainvault.approval.dsse import trusted_key_set
from trainvault.approval.keys import load_verifying_key
from trainvault.canonical import is_sha256_hex
from trainvault.contamination.contract import DEFAULT_CONTRACT, BenchmarkLimits
from trainvault.errors import ApprovalError, ConfigurationError


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
    - `max_removed_fraction`: at most which fraction of the approval's records its amendments
      may take down before the trainer's open refuses the amended view (default 1/100; the
      gate does not use it).
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
    max_removed_fraction: tuple[int, int] = (1, 100)
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
        for name in ("max_excluded_fraction", "max_removed_fraction"):
            object.__setattr__(self, name, _ratio(getattr(self, name), name))
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

    def cli_words(self, scanner_key_paths: Sequence[str] = ()) -> list[str]:
        """This policy as the options of ``trainvault verify|read|trace``, defaults left out (an
        exclusion allowance keeps its limit); the CLI parses them back to an equal policy.
        `scanner_key_paths`: the files of `scanner_keys`, in order (key objects cannot be written
        out; each file is checked to hold its key)."""
        return _cli_words(self, scanner_key_paths)

    def python_source(self, scanner_key_paths: Sequence[str] = ()) -> str:
        """This policy as a Python expression, defaults left out (an exclusion allowance keeps its
        limit), for a scope that imports `ApprovalPolicy` and `load_verifying_key` from
        `trainvault.approval`."""
        return _python_source(self, scanner_key_paths)


_DEFAULT = ApprovalPolicy()
# What `trainvault verify|read|trace` cannot take as options: a policy that sets one has no CLI form.
_NOT_ON_THE_CLI = ("evaluation_release_sha256", "verifier_contract_sha256", "allowed_producers", "min_policy")
# What the Python form writes when it differs from the default, in this order.
_PYTHON_FIELDS = (
    "scanner_threshold",
    "rescan_min_shards",
    "rescan_fraction",
    "rescan_seed",
    "allow_exclusions",
    "max_excluded_fraction",
    "max_removed_fraction",
    "unscanned_fields",
    "evaluation_release_sha256",
    "verifier_contract_sha256",
)


def _key_paths(policy: ApprovalPolicy, paths: Sequence[str]) -> list[str]:
    """`paths` when they hold exactly the policy's scanner keys; `ConfigurationError` otherwise."""
    paths = list(paths)
    trusted = tuple(policy.scanner_keys or ())
    if tuple(dict.fromkeys(load_verifying_key(p) for p in paths)) != trusted:
        raise ConfigurationError(
            f"scanner key files {paths} do not hold the policy's {len(trusted)} scanner key(s) in order: "
            "pass the files the policy's scanner_keys were loaded from"
        )
    return paths


def _fraction(value: tuple[int, int]) -> str:
    return f"{value[0]}/{value[1]}"


def _cli_words(policy: ApprovalPolicy, scanner_key_paths: Sequence[str]) -> list[str]:
    set_here = [name for name in _NOT_ON_THE_CLI if getattr(policy, name) != getattr(_DEFAULT, name)]
    if set_here:
        raise ConfigurationError(
            f"this policy sets {', '.join(set_here)}, which the trainvault command line cannot take: "
            "open the approval from Python with the policy instead"
        )
    words = [w for p in _key_paths(policy, scanner_key_paths) for w in ("--scanner-key", p)]
    if policy.scanner_keys is not None:
        if policy.scanner_threshold != _DEFAULT.scanner_threshold:
            words += ["--scanner-threshold", str(policy.scanner_threshold)]
        rescan = (policy.rescan_min_shards, policy.rescan_fraction)
        if rescan != (_DEFAULT.rescan_min_shards, _DEFAULT.rescan_fraction):
            words += ["--rescan", str(policy.rescan_min_shards), _fraction(policy.rescan_fraction)]
    if policy.rescan_seed is not None:
        words += ["--rescan-seed", str(policy.rescan_seed)]
    if policy.allow_exclusions:  # with the limit always: what a trainer accepts should be read, not looked up
        words += ["--allow-exclusions", "--max-excluded", _fraction(policy.max_excluded_fraction)]
    if policy.max_removed_fraction != _DEFAULT.max_removed_fraction:
        words += ["--max-removed", _fraction(policy.max_removed_fraction)]
    return words + [w for f in policy.unscanned_fields for w in ("--unscanned-field", f)]


def _python_source(policy: ApprovalPolicy, scanner_key_paths: Sequence[str]) -> str:
    for name in ("allowed_producers", "min_policy"):
        if getattr(policy, name) != getattr(_DEFAULT, name):
            raise ConfigurationError(f"this policy sets {name}, which python_source does not write out")
    paths = _key_paths(policy, scanner_key_paths)
    args = [f"scanner_keys=[{', '.join(f'load_verifying_key({p!r})' for p in paths)}]"] if paths else []
    for name in _PYTHON_FIELDS:
        value = getattr(policy, name)
        # An exclusion allowance is written with its limit always, as on the command line.
        if value != getattr(_DEFAULT, name) or (name == "max_excluded_fraction" and policy.allow_exclusions):
            args.append(f"{name}={list(value) if name == 'unscanned_fields' else value!r}")
    return f"ApprovalPolicy({', '.join(args)})"
