"""The policy the approver's gate applied travels in the signed record; a trainer's policy is held against it."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, TrainVault
from trainvault.approval import ApprovalPolicy, SigningKey, write_approval
from trainvault.approval.applied import AppliedPolicy
from trainvault.approval.dsse import sign_envelope
from trainvault.approval.gate import approve_dataset
from trainvault.approval.record import approval_statement
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.cli import main
from trainvault.contamination import exclusions_from_report
from trainvault.errors import UnscannedFieldError

APPROVER = SigningKey.generate()
SCANNER = SigningKey.generate()
#: The approver's: text left unscanned on purpose, exclusions allowed, scanner keys and a sampled re-scan.
LOOSE = ApprovalPolicy(
    unscanned_fields=["notes"],
    allow_exclusions=True,
    max_excluded_fraction=(1, 10),
    scanner_keys=[SCANNER.public_key],
    rescan_min_shards=1,
    rescan_fraction=(1, 100),
    rescan_seed=3,
)


@pytest.fixture(scope="module")
def record(
    build_chain: Callable[..., Any], make_records: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """Five shards whose last holds an evaluation item (excluded), each record with a long `notes` field the
    contract does not scan, approved under LOOSE."""
    root = tmp_path_factory.mktemp("applied")

    def records(i: int) -> list[dict[str, Any]]:
        return [{**r, "notes": " ".join(f"note{j}" for j in range(40))} for r in make_records(i, 20, i == 4)]

    chain = build_chain(TrainVault(), str(root), shards=5, shard_records=records, scanner_key=SCANNER)
    ex = exclusions_from_report(chain.extra["report"], report_sha256=chain.refs["contamination_report"].sha256)
    approved = approve_dataset(chain.vault, chain.with_exclusions(ex), policy=LOOSE)
    written = write_approval(chain.vault, f"{root}/approval.json", approved, signing_keys=APPROVER)
    return chain, approved, written


def open_with(chain: Any, written: Any, policy: ApprovalPolicy, **kw: Any) -> Any:
    return chain.vault.open_approved(
        written.uri, written.sha256, trusted_keys=[APPROVER.public_key], policy=policy, **kw
    )


def test_the_signed_record_carries_the_applied_policy(record: Any) -> None:
    chain, approved, written = record
    applied = approved.summary.policy
    assert applied is not None
    assert (applied.unscanned_fields, applied.allow_exclusions, applied.max_excluded_fraction) == (
        ["notes"],
        True,
        [1, 10],
    )
    assert applied.scanner_keys == [SCANNER.keyid] and (applied.shards_rescanned, applied.shards_total) == (1, 6)
    statement = approval_statement(approved)
    assert AppliedPolicy.model_validate(statement["predicate"]["verification"]["policy"]) == applied
    opened = open_with(chain, written, LOOSE)
    assert opened.summary.policy == applied


def test_a_record_whose_policy_was_edited_does_not_verify(record: Any) -> None:
    chain, _, written = record
    envelope = json.loads(chain.vault.storage.get(written.uri))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["verification"]["policy"]["unscanned_fields"] = []
    envelope["payload"] = base64.b64encode(canonical_json(statement)).decode()
    data = json.dumps(envelope).encode()
    uri = written.uri.replace("approval.json", "edited.json")
    chain.vault.storage.put_create(uri, data)
    with pytest.raises(ApprovalError, match="signature"):
        chain.vault.open_approved(uri, sha256_hex(data), trusted_keys=[APPROVER.public_key], policy=LOOSE)


def test_a_trainer_stricter_than_the_approver_is_refused_naming_what_differs(record: Any) -> None:
    chain, _, written = record
    without_text = ApprovalPolicy(**{**_fields(LOOSE), "unscanned_fields": ()})
    with pytest.raises(UnscannedFieldError, match=r"let record field\(s\) 'notes' go unscanned") as info:
        open_with(chain, written, without_text)
    assert info.value.fields == ("notes",)
    larger = ApprovalPolicy(**{**_fields(LOOSE), "rescan_min_shards": 3})
    with pytest.raises(
        ApprovalError, match="re-scanned 1 of 6 shards; this trainer's policy asks for a larger re-scan"
    ):
        open_with(chain, written, larger)
    no_scanner = ApprovalPolicy(unscanned_fields=["notes"], allow_exclusions=True, max_excluded_fraction=(1, 10))
    with pytest.raises(ApprovalError, match=r"trusts no scanner key .*audit=True"):
        open_with(chain, written, no_scanner)
    # The audit runs the gate under the trainer's own policy instead: every shard re-scanned.
    audited = open_with(chain, written, no_scanner, audit=True)
    assert audited.summary.policy is not None and audited.summary.policy.shards_rescanned == 6


def test_an_equal_or_looser_trainer_opens(record: Any) -> None:
    chain, approved, written = record
    looser = ApprovalPolicy(**{**_fields(LOOSE), "unscanned_fields": ["notes", "meta"], "rescan_min_shards": 0})
    assert open_with(chain, written, looser).manifest_sha256 == approved.manifest_sha256


def test_a_record_without_a_recorded_policy_opens_only_by_audit(record: Any) -> None:
    chain, approved, _ = record
    statement = approval_statement(approved)
    del statement["predicate"]["verification"]["policy"]
    data = sign_envelope(canonical_json(statement), [APPROVER]).to_json_bytes()
    uri = f"{chain.root}/older-approval.json"
    chain.vault.storage.put_create(uri, data)
    with pytest.raises(ApprovalError, match=r"does not record the policy its gate applied .*audit=True"):
        chain.vault.open_approved(uri, sha256_hex(data), trusted_keys=[APPROVER.public_key], policy=LOOSE)
    opened = chain.vault.open_approved(
        uri, sha256_hex(data), trusted_keys=[APPROVER.public_key], policy=LOOSE, audit=True
    )
    assert opened.manifest_sha256 == approved.manifest_sha256


def test_verify_prints_the_applied_policy(record: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, written = record
    (tmp_path / "approver.pub").write_bytes(APPROVER.public_key.to_pem())
    (tmp_path / "scanner.pub").write_bytes(SCANNER.public_key.to_pem())
    args = ["verify", written.uri, "--sha256", written.sha256, "--trusted-key", str(tmp_path / "approver.pub")]
    args += ["--scanner-key", str(tmp_path / "scanner.pub"), "--rescan", "1", "1", "--allow-exclusions"]
    args += ["--max-excluded", "1/10", "--unscanned-field", "notes", "--quiet"]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "approved under:\n" in out
    assert f"  scanner keys: {SCANNER.keyid[:16]} (threshold 1)\n  re-scanned: 1 of 6 shards\n" in out
    assert "  exclusions: allowed, at most 1/10\n" in out
    assert "  unscanned fields allowed: notes (found carrying text: notes)\n" in out


def _fields(policy: ApprovalPolicy) -> dict[str, Any]:
    return {f: getattr(policy, f) for f in policy.__dataclass_fields__}
