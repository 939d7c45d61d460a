"""A policy written out for a trainer: the CLI parses its options back to an equal policy, and
its Python source evaluates to one."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainvault.approval import ApprovalPolicy, load_verifying_key
from trainvault.approval.keys import write_keypair
from trainvault.approval.policy_text import policy_cli_words, policy_python_source
from trainvault.cli import build_parser
from trainvault.cli.approval import policy_from_args
from trainvault.contamination.contract import BenchmarkLimits
from trainvault.errors import ConfigurationError

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
        words = policy_cli_words(policy, paths)
        assert parsed(words, command) == policy, words


def test_a_policys_python_source_evaluates_to_the_same_policy(key_files: list[str]) -> None:
    scope = {"ApprovalPolicy": ApprovalPolicy, "load_verifying_key": load_verifying_key}
    pinned = ApprovalPolicy(evaluation_release_sha256=SHA, verifier_contract_sha256="cd" * 32)
    for policy, paths in [*policies(key_files), (pinned, [])]:
        source = policy_python_source(policy, paths)
        assert eval(source, scope) == policy, source


def test_defaults_are_left_out() -> None:
    assert policy_cli_words(ApprovalPolicy()) == []
    assert policy_python_source(ApprovalPolicy()) == "ApprovalPolicy()"


def test_key_files_must_hold_the_policys_keys(key_files: list[str]) -> None:
    policy = ApprovalPolicy(scanner_keys=[load_verifying_key(key_files[0])])
    for paths in ([], key_files[1:], key_files):
        with pytest.raises(ConfigurationError, match="do not hold the policy's 1 scanner key"):
            policy_cli_words(policy, paths)
        with pytest.raises(ConfigurationError, match="do not hold the policy's 1 scanner key"):
            policy_python_source(policy, paths)


def test_what_the_command_line_cannot_take_is_refused_not_dropped() -> None:
    for policy in (
        ApprovalPolicy(evaluation_release_sha256=SHA),
        ApprovalPolicy(allowed_producers={"trainvault": ["1.0"]}),
        ApprovalPolicy(min_policy=BenchmarkLimits(max_contaminated_fraction={"*": [1, 10]})),
    ):
        with pytest.raises(ConfigurationError, match="command line cannot take"):
            policy_cli_words(policy)
    with pytest.raises(ConfigurationError, match="does not write out"):
        policy_python_source(ApprovalPolicy(allowed_producers={"trainvault": ["1.0"]}))
