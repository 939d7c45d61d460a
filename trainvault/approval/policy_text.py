"""An `ApprovalPolicy` written out for a trainer to paste: as CLI options and as Python source.

Both forms come from one policy object, so the command a dataset's page prints and the snippet
beside it ask for the same thing; the CLI parses its form back to an equal policy (the tests
hold that round trip). Key objects cannot be written out: the caller names the files they
were loaded from, and each file is checked to hold the key the policy trusts.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainvault.approval.keys import load_verifying_key
from trainvault.approval.policy import ApprovalPolicy
from trainvault.errors import ConfigurationError

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


def policy_cli_words(policy: ApprovalPolicy, scanner_key_paths: Sequence[str] = ()) -> list[str]:
    """`policy` as the options of ``trainvault verify|read|trace`` (defaults left out)."""
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
    if policy.allow_exclusions:
        words.append("--allow-exclusions")
        if policy.max_excluded_fraction != _DEFAULT.max_excluded_fraction:
            words += ["--max-excluded", _fraction(policy.max_excluded_fraction)]
    return words + [w for f in policy.unscanned_fields for w in ("--unscanned-field", f)]


def policy_python_source(policy: ApprovalPolicy, scanner_key_paths: Sequence[str] = ()) -> str:
    """`policy` as a Python expression (defaults left out), for a scope that imports
    `ApprovalPolicy` and `load_verifying_key` from `trainvault.approval`."""
    for name in ("allowed_producers", "min_policy"):
        if getattr(policy, name) != getattr(_DEFAULT, name):
            raise ConfigurationError(f"this policy sets {name}, which policy_python_source does not write out")
    paths = _key_paths(policy, scanner_key_paths)
    args = [f"scanner_keys=[{', '.join(f'load_verifying_key({p!r})' for p in paths)}]"] if paths else []
    for name in _PYTHON_FIELDS:
        value = getattr(policy, name)
        if value != getattr(_DEFAULT, name):
            args.append(f"{name}={list(value) if name == 'unscanned_fields' else value!r}")
    return f"ApprovalPolicy({', '.join(args)})"
