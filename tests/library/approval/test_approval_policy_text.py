"""A policy written out for a trainer: the CLI parses its options back to an equal policy, and
its Python source evaluates to one."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainvault.approval import ApprovalPolicy, load_verifying_key
from trainvault.approval.keys import write_keypair
from trainvault.cli import build_parser
from trainvault.cli.approval import policy_from_args
from trainvault.contamination.contract import BenchmarkLimits
from trainvault.errors import ApprovalError, ConfigurationError, TrainVaultError

SHA = "ab" * 32


@pytest.fixture
def key_files(tmp_path: Path) -> list[str]:
    return [str(write_keypair(tmp_path / name)[1]) for name in ("scanner-a", "scanner-b")]


def policies(keys: list[str]) -> list[tuple[ApprovalPolicy, list[str]]]:
    loaded = [load_verifying_key(k) for k in keys]
    return [
        (ApprovalPolicy(), []),
        (ApprovalPolicy(scanner_keys=loaded[:1]), keys[:1]),
        (
            ApprovalPolicy(
                scanner_keys=loaded,
                scanner_threshold=2,
                rescan_min_shards=5,
                rescan_fraction=(3, 1000),  # not a whole percent: the CLI takes it as N/D
                rescan_seed=7,
            ),
            keys,
        ),
        (ApprovalPolicy(scanner_keys=loaded, rescan_min_shards=0, rescan_fraction=(0, 1)), keys),
        (ApprovalPolicy(allow_exclusions=True), []),
        (ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 20), unscanned_fields=["meta.url", "b"]), []),
        (ApprovalPolicy(max_removed_fraction=(1, 10)), []),
        (ApprovalPolicy(scanner_keys=loaded[:1], max_removed_fraction=(3, 1000), rescan_seed=2), keys[:1]),
    ]


def parsed(words: list[str], command: str) -> ApprovalPolicy:
    required = ["--step", "0"] if command == "trace" else []
    argv = [command, "approval.json", "--sha256", SHA, "--trusted-key", "a.pub", *required, *words]
    args = build_parser().parse_args(argv)
    policy: ApprovalPolicy = policy_from_args(args)
    return policy


@pytest.mark.parametrize("command", ["trace", "read", "verify"])
def test_the_cli_parses_a_policys_options_back_to_the_same_policy(key_files: list[str], command: str) -> None:
    for policy, paths in policies(key_files):
        words = policy.cli_words(paths)
        assert parsed(words, command) == policy, words


def test_a_policys_python_source_evaluates_to_the_same_policy(key_files: list[str]) -> None:
    scope = {"ApprovalPolicy": ApprovalPolicy, "load_verifying_key": load_verifying_key}
    pinned = ApprovalPolicy(evaluation_release_sha256=SHA, verifier_contract_sha256="cd" * 32)
    for policy, paths in [*policies(key_files), (pinned, [])]:
        source = policy.python_source(paths)
        assert eval(source, scope) == policy, source


def test_defaults_are_left_out_but_an_exclusion_allowance_keeps_its_limit() -> None:
    assert ApprovalPolicy().cli_words() == []
    assert ApprovalPolicy().python_source() == "ApprovalPolicy()"
    allowed = ApprovalPolicy(allow_exclusions=True)
    assert allowed.cli_words() == ["--allow-exclusions", "--max-excluded", "1/100"]
    assert allowed.python_source() == "ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 100))"
    assert ApprovalPolicy(max_removed_fraction=(1, 100)).cli_words() == []


def test_the_removal_limit_is_written_and_parsed_as_a_fraction() -> None:
    policy = ApprovalPolicy(max_removed_fraction=(1, 10))
    assert policy.cli_words() == ["--max-removed", "1/10"]
    assert policy.python_source() == "ApprovalPolicy(max_removed_fraction=(1, 10))"
    for command in ("verify", "amend", "removed-reads"):
        extra = {"amend": ["--removals", "r.json"], "removed-reads": ["--state", "s.json"]}.get(command, [])
        assert parsed(["--max-removed", "1/20", *extra], command).max_removed_fraction == (1, 20)
    with pytest.raises(TrainVaultError, match=r"--max-removed \(N/D\) takes a whole number, got 'x'"):
        parsed(["--max-removed", "x/2"], "verify")
    with pytest.raises(ApprovalError, match=r"ApprovalPolicy.max_removed_fraction must be .* got \(3, 2\)"):
        parsed(["--max-removed", "3/2"], "verify")


def test_key_files_must_hold_the_policys_keys(key_files: list[str]) -> None:
    policy = ApprovalPolicy(scanner_keys=[load_verifying_key(key_files[0])])
    for paths in ([], key_files[1:], key_files):
        with pytest.raises(ConfigurationError, match="do not hold the policy's 1 scanner key"):
            policy.cli_words(paths)
        with pytest.raises(ConfigurationError, match="do not hold the policy's 1 scanner key"):
            policy.python_source(paths)


def test_what_the_command_line_cannot_take_is_refused_not_dropped() -> None:
    for policy in (
        ApprovalPolicy(evaluation_release_sha256=SHA),
        ApprovalPolicy(allowed_producers={"trainvault": ["1.0"]}),
        ApprovalPolicy(min_policy=BenchmarkLimits(max_contaminated_fraction={"*": [1, 10]})),
    ):
        with pytest.raises(ConfigurationError, match="command line cannot take"):
            policy.cli_words()
    with pytest.raises(ConfigurationError, match="does not write out"):
        ApprovalPolicy(allowed_producers={"trainvault": ["1.0"]}).python_source()
