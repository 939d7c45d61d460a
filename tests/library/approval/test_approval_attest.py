"""Reports and scan manifests signed by the scanner, and the gate's seeded re-scan of shards.

A forged "clean" report (hits deleted, counts recomputed, so it is self-consistent) is the
attack: signed by an untrusted key it is refused naming that key; signed by a trusted key
it is refused by the re-scan whenever the contaminated shard is drawn, and without scanner
keys the gate re-scans every shard, so it is always refused.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, ManifestError, ObjectRef, TrainVault, UntrustedSignerError
from trainvault.approval import ApprovalPolicy, SigningKey, read_attested, write_approval
from trainvault.approval.attestation import attestation_statement
from trainvault.approval.dsse import sign_envelope
from trainvault.approval.gate import approve_dataset
from trainvault.approval.record import open_approved
from trainvault.approval.rescan import sample_shards
from trainvault.approval.scan_manifest import TrainingScanManifest
from trainvault.canonical import canonical_json
from trainvault.contamination import (
    ContaminationReport,
    exclusions_from_report,
    jsonl_benchmark,
    load_index,
    publish_release,
)
from trainvault.contamination.contract import DEFAULT_CONTRACT, V1_CONTRACT
from trainvault.publication.pinned import Publication

SCANNER = SigningKey.generate()


def forge_clean(report: ContaminationReport) -> ContaminationReport:
    """The report with every contaminated item deleted and its counts and verdicts recomputed."""
    obj = report.model_dump(mode="json", by_alias=True)
    obj["contaminated_items"] = []
    for b in obj["benchmarks"]:
        b.update(n_contaminated=0, contaminated_fraction=[0, b["n_checkable"]])
        b["pass"] = True
    obj["pass"] = True
    return ContaminationReport.from_obj(obj)


def trusting(**options: Any) -> ApprovalPolicy:
    return ApprovalPolicy(scanner_keys=[SCANNER.public_key], **options)


@pytest.fixture
def signed(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path / "clean"), shards=4, scanner_key=SCANNER)


@pytest.fixture
def dirty(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    """Four train shards and one valid shard, signed; the last train shard (train/hard/s3) is contaminated."""
    return build_chain(TrainVault(), str(tmp_path / "dirty"), shards=4, contaminate=True, scanner_key=SCANNER)


def seed_drawing(chain: Any, key: str, drawn: bool, policy: ApprovalPolicy) -> int:
    """A re-scan seed whose sample does (or does not) include shard `key` (``split/key``)."""
    publication = Publication.load(chain.vault.storage, chain.manifest_uri)
    for seed in range(1000):
        _, groups = sample_shards(publication, ApprovalPolicy(**{**policy.__dict__, "rescan_seed": seed}))
        if (key in {f"{s}/{e.key}" for g in groups for s, e in g}) == drawn:
            return seed
    raise AssertionError(f"no seed in 0..999 {'draws' if drawn else 'skips'} {key}")


def test_signed_chain_is_approved_with_signers_and_rescan_recorded(signed: Any, tmp_path: Path) -> None:
    approved = approve_dataset(signed.vault, signed.request(), policy=trusting(rescan_seed=7))
    att = approved.summary.attestation
    assert att is not None
    assert att.report_signers == [SCANNER.keyid] and att.scan_manifest_signers == [SCANNER.keyid]
    # 5 distinct shards: max(2, ceil(5 * 2 / 100)) = 2 re-scanned, drawn by the seed.
    assert att.rescan.seed == 7 and att.rescan.shards_total == 5 and len(att.rescan.shards) == 2
    again = approve_dataset(signed.vault, signed.request(), policy=trusting(rescan_seed=7))
    assert again.summary.attestation.rescan.shards == att.rescan.shards
    # The approval records who signed and what was re-scanned; a trainer re-opens it under the same policy.
    key = SigningKey.generate()
    written = write_approval(signed.vault, str(tmp_path / "approval.json"), approved, signing_keys=key)
    opened = open_approved(
        signed.vault, written.uri, written.sha256, trusted_keys=[key.public_key], policy=trusting(rescan_seed=7)
    )
    assert opened.summary.attestation.report_signers == [SCANNER.keyid]
    with pytest.raises(UntrustedSignerError):
        open_approved(
            signed.vault,
            written.uri,
            written.sha256,
            trusted_keys=[key.public_key],
            policy=ApprovalPolicy(scanner_keys=[key.public_key]),
        )


def test_unsigned_documents_are_refused_when_scanner_keys_are_trusted(
    build_chain: Callable[..., Any], tmp_path: Path
) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "plain"), shards=2)
    with pytest.raises(UntrustedSignerError, match=r"training_scan_manifest .* is not signed"):
        approve_dataset(chain.vault, chain.request(), policy=trusting())
    scan = chain.attest(
        "scan.dsse.json",
        TrainingScanManifest.from_json_bytes(chain.vault.storage.get(chain.refs["training_scan_manifest"].uri)),
        SCANNER,
    )
    report, report_ref = chain.rescan("report.json", scan_sha256=scan.sha256)
    with pytest.raises(UntrustedSignerError, match=r"contamination_report .* is not signed"):
        approve_dataset(
            chain.vault, chain.request(training_scan_manifest=scan, contamination_report=report_ref), policy=trusting()
        )
    signed_report = chain.attest("report.dsse.json", report, SCANNER)
    approved = approve_dataset(
        chain.vault, chain.request(training_scan_manifest=scan, contamination_report=signed_report), policy=trusting()
    )
    assert approved.summary.attestation.report_signers == [SCANNER.keyid]


def test_forged_report_signed_by_an_untrusted_key_is_refused_naming_it(dirty: Any) -> None:
    mallory = SigningKey.generate()
    forged = dirty.attest("forged.dsse.json", forge_clean(dirty.extra["report"]), mallory)
    with pytest.raises(UntrustedSignerError) as err:
        approve_dataset(dirty.vault, dirty.request(contamination_report=forged), policy=trusting())
    assert err.value.keyids == (mallory.keyid,) and mallory.keyid in str(err.value)
    assert "not by 1 of the trusted scanner keys" in str(err.value)


def test_forged_report_signed_by_a_trusted_key_is_refused_when_the_rescan_draws_the_shard(dirty: Any) -> None:
    forged = dirty.attest("forged.dsse.json", forge_clean(dirty.extra["report"]), SCANNER)
    request = dirty.request(contamination_report=forged)
    # The genuine report fails the contract, as the forger wanted to hide.
    with pytest.raises(ApprovalError, match="fails under the contract's policy"):
        approve_dataset(dirty.vault, dirty.request(), policy=trusting(rescan_seed=1))
    draws = seed_drawing(dirty, "train/hard/s3", True, trusting())
    with pytest.raises(ApprovalError, match=r"re-scanning shard train/hard/s3 finds tiny item 'tiny-1' \(record 15\)"):
        approve_dataset(dirty.vault, request, policy=trusting(rescan_seed=draws))
    # A sample that misses the shard cannot see the forgery: that is what the sample size trades.
    misses = seed_drawing(dirty, "train/hard/s3", False, trusting())
    assert approve_dataset(dirty.vault, request, policy=trusting(rescan_seed=misses)).summary.contaminated_items == 0
    # Re-scanning every shard always sees it.
    with pytest.raises(ApprovalError, match="re-scanning shard train/hard/s3"):
        approve_dataset(dirty.vault, request, policy=trusting(rescan_fraction=(1, 1), rescan_seed=misses))


def test_without_scanner_keys_every_shard_is_rescanned(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "plain"), shards=3, contaminate=True)
    forged = chain.publish("forged.json", forge_clean(chain.extra["report"]))
    with pytest.raises(ApprovalError, match="re-scanning shard train/hard/s2 finds tiny item 'tiny-1'"):
        approve_dataset(chain.vault, chain.request(contamination_report=forged))
    assert ApprovalPolicy().rescan_count(1000) == 1000
    assert trusting().rescan_count(1000) == 20 and trusting().rescan_count(5) == 2 and trusting().rescan_count(1) == 1
    assert trusting(rescan_min_shards=0, rescan_fraction=(0, 1)).rescan_count(1000) == 0


def test_rescan_disabled_trusts_the_signature(dirty: Any) -> None:
    forged = dirty.attest("forged.dsse.json", forge_clean(dirty.extra["report"]), SCANNER)
    off = trusting(rescan_min_shards=0, rescan_fraction=(0, 1))
    approved = approve_dataset(dirty.vault, dirty.request(contamination_report=forged), policy=off)
    assert approved.summary.attestation.rescan.shards == []


def test_a_report_that_moves_a_hit_is_refused_by_the_rescan(dirty: Any) -> None:
    """Exclusions from a report that names the wrong record would leave the contaminated one in."""
    obj = dirty.extra["report"].model_dump(mode="json", by_alias=True)
    obj["contaminated_items"][0]["hits"][0]["record_index"] += 1
    report = ContaminationReport.from_obj(obj)
    moved = dirty.attest("moved.dsse.json", report, SCANNER)
    request = dirty.with_exclusions(
        exclusions_from_report(report, report_sha256=moved.sha256), contamination_report=moved
    )
    policy = trusting(allow_exclusions=True, max_excluded_fraction=(1, 10), rescan_fraction=(1, 1))
    with pytest.raises(ApprovalError, match="re-scanning shard train/hard/s3: the report lists 1 hit"):
        approve_dataset(dirty.vault, request, policy=policy)


def test_envelopes_of_the_wrong_kind_or_altered_are_refused(signed: Any) -> None:
    scan_bytes = signed.vault.storage.get(signed.refs["training_scan_manifest"].uri)
    # The signed scan manifest bound as the report.
    as_report = signed.put_raw("scan-as-report.json", scan_bytes)
    with pytest.raises(ApprovalError, match="attests another kind of document"):
        approve_dataset(signed.vault, signed.request(contamination_report=as_report), policy=trusting())
    # A payload swapped under the signatures.
    env = json.loads(scan_bytes)
    env["payload"] = env["payload"][:-8] + "AAAAAAA="
    altered = signed.put_raw("altered.json", json.dumps(env).encode())
    with pytest.raises(UntrustedSignerError, match=SCANNER.keyid):
        approve_dataset(signed.vault, signed.request(training_scan_manifest=altered), policy=trusting())


def test_read_attested_reads_plain_documents_only_without_trusted_keys(signed: Any) -> None:
    raw = signed.vault.storage.get(signed.refs["contamination_report"].uri)
    got = read_attested(raw, ContaminationReport, trusted_keys=[SCANNER.public_key], source="r")
    assert got.signers == (SCANNER.keyid,) and got.document == signed.extra["report"]
    assert read_attested(raw, ContaminationReport, trusted_keys=None, source="r").signers == ()
    plain = signed.extra["report"].to_json_bytes()
    assert read_attested(plain, ContaminationReport, trusted_keys=None, source="r").document == signed.extra["report"]
    with pytest.raises(UntrustedSignerError, match="is not signed"):
        read_attested(plain, ContaminationReport, trusted_keys=[SCANNER.public_key], source="r")
    with pytest.raises(ManifestError):
        read_attested(
            b'{"payloadType": "x", "payload": "", "signatures": [], "payloadType": "y"}',
            ContaminationReport,
            trusted_keys=None,
            source="r",
        )


@pytest.mark.parametrize(
    "options, match",
    [
        ({"rescan_fraction": (3, 2)}, "rescan_fraction"),
        ({"rescan_fraction": 0.02}, "rescan_fraction"),
        ({"rescan_min_shards": -1}, "rescan_min_shards"),
        ({"rescan_seed": "7"}, "rescan_seed"),
        ({"max_excluded_fraction": (1, 0)}, "max_excluded_fraction"),
        ({"allow_exclusions": "yes"}, "allow_exclusions"),
        ({"scanner_keys": [SCANNER.public_key], "scanner_threshold": 2}, "threshold"),
        ({"scanner_keys": []}, "no trusted keys"),
        ({"scanner_keys": ["not a key"]}, "cannot read public key"),
    ],
)
def test_bad_policies_are_refused(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ApprovalError, match=match):
        ApprovalPolicy(**options)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda st: st.update(_type="https://example.invalid/other"), "not an in-toto statement"),
        (lambda st: st.update(subject=[{"name": "x", "digest": "0" * 64}]), "its subject"),
        (lambda st: st.update(subject=[{"name": "x", "digest": {"sha256": "0" * 64}}]), "its subject"),
        (lambda st: st["predicate"].update(version=2), "version 2 is not supported"),
        (lambda st: st.update(predicate=[]), "expected a JSON object"),
    ],
)
def test_malformed_signed_statements_are_refused(signed: Any, edit: Any, match: str) -> None:
    statement = attestation_statement(signed.extra["report"])
    edit(statement)
    data = sign_envelope(canonical_json(statement), [SCANNER]).to_json_bytes()
    bad = signed.put_raw("bad.dsse.json", data)
    with pytest.raises(ApprovalError, match=f"contamination_report is not a readable .*{match}"):
        approve_dataset(signed.vault, signed.request(contamination_report=bad), policy=trusting())


def test_a_report_that_calls_uncheckable_items_checkable_is_refused(
    eval_items: list[dict[str, str]], build_chain: Callable[..., Any], tmp_path: Path
) -> None:
    """The uncheckable items are what the bound contract makes of the bound release, not the
    report's say: a self-consistent report hiding them would pass the uncheckable limit, and
    no re-scan of shards (here: every shard, even with it disabled) would notice."""
    chain = build_chain(TrainVault(), str(tmp_path / "short"), shards=2)
    items = [*eval_items, {"id": "tiny-short", "text": "zulu yankee xray"}]
    release = publish_release(
        chain.vault.storage,
        str(tmp_path / "release2"),
        "evals-test",
        [jsonl_benchmark("tiny", b"".join(json.dumps(it).encode() + b"\n" for it in items))],
    )
    contract = chain.refs["verifier_contract"]
    index = load_index(chain.vault, release, contract)
    honest, honest_ref = chain.rescan("honest.json", index=index)
    bound = {"evaluation_release": ObjectRef(uri=release.uri, sha256=release.sha256)}
    assert [(u.item_id, u.reason) for u in honest.uncheckable_items] == [("tiny-short", "too-short")]
    with pytest.raises(
        ApprovalError,
        match=r"fails under the contract's policy \(tiny: 0 of 4 checkable items "
        r"contaminated, 1 of 5 uncheckable\)",
    ):
        approve_dataset(chain.vault, chain.request(contamination_report=honest_ref, **bound))
    obj = honest.model_dump(mode="json", by_alias=True)
    obj["uncheckable_items"] = []
    obj["benchmarks"][0].update(
        n_checkable=5, n_uncheckable=0, uncheckable_fraction=[0, 5], contaminated_fraction=[0, 5], **{"pass": True}
    )
    obj["pass"] = True
    hidden = chain.publish("hidden.json", ContaminationReport.from_obj(obj))
    with pytest.raises(ApprovalError, match="has 0 uncheckable items and 0 hot n-grams; the bound contract makes 1"):
        approve_dataset(chain.vault, chain.request(contamination_report=hidden, **bound))
    # An uncheckable item with another reason.
    obj = honest.model_dump(mode="json", by_alias=True)
    obj["uncheckable_items"][0]["reason"] = "template-only"
    relabelled = chain.publish("relabelled.json", ContaminationReport.from_obj(obj))
    with pytest.raises(ApprovalError, match="lists tiny item 'tiny-short' as uncheckable"):
        approve_dataset(chain.vault, chain.request(contamination_report=relabelled, **bound))


def test_a_report_whose_contaminated_item_is_not_the_release_s_is_refused(
    build_chain: Callable[..., Any], tmp_path: Path
) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "dirty"), shards=2, contaminate=True)
    for field, value in (("total_ngrams", 7), ("item_sha256", "0" * 64)):
        obj = chain.extra["report"].model_dump(mode="json", by_alias=True)
        obj["contaminated_items"][0][field] = value
        ref = chain.publish(f"{field}.json", ContaminationReport.from_obj(obj))
        with pytest.raises(
            ApprovalError, match=r"lists tiny item 'tiny-1' .* as contaminated, which is not a checkable"
        ):
            approve_dataset(chain.vault, chain.request(contamination_report=ref))


@pytest.mark.parametrize("bound, scanned", [(DEFAULT_CONTRACT, V1_CONTRACT), (V1_CONTRACT, DEFAULT_CONTRACT)])
def test_a_report_made_under_the_other_method_is_refused(
    build_chain: Callable[..., Any], tmp_path: Path, bound: Any, scanned: Any
) -> None:
    """A v1 report bound with a v2 contract (or the reverse), even when it names the bound
    contract's digest, is not judged: its hits and counts mean another normalisation."""
    chain = build_chain(TrainVault(), str(tmp_path / "cross"), shards=2, contaminate=True, contract=bound)
    contract = chain.refs["verifier_contract"]
    release = chain.refs["evaluation_release"]
    other = chain.publish("other-contract.json", scanned)
    index = load_index(chain.vault, release, other)
    report, ref = chain.rescan("other-method.json", index=index)
    assert report.method.id == scanned.method.id != bound.method.id
    with pytest.raises(ApprovalError, match="judged verifier contract"):
        approve_dataset(chain.vault, chain.request(contamination_report=ref))
    obj = report.model_dump(mode="json", by_alias=True)
    obj["verifier_contract"]["sha256"] = contract.sha256
    relabelled = chain.publish("relabelled-method.json", ContaminationReport.from_obj(obj))
    with pytest.raises(ApprovalError, match="made with another method"):
        approve_dataset(chain.vault, chain.request(contamination_report=relabelled))


def test_duplicate_keys_in_a_signed_report_or_in_exclusions_are_refused(dirty: Any) -> None:
    policy = trusting(allow_exclusions=True, max_excluded_fraction=(1, 10))
    report = dirty.refs["contamination_report"]
    excl = exclusions_from_report(dirty.extra["report"], report_sha256=report.sha256).to_json_bytes()
    hidden = dirty.put_raw("dup-exclusions.json", excl[:-1] + b',"records":[]}')
    with pytest.raises(ApprovalError, match=r"exclusions is not a readable .*key 'records' appears more than once"):
        approve_dataset(dirty.vault, dirty.request(sidecars={"exclusions": hidden}), policy=policy)
    # Signed by the trusted scanner key: the signature holds, the statement still means two things.
    payload = base64.b64decode(json.loads(dirty.vault.storage.get(report.uri))["payload"])
    twice = dirty.put_raw(
        "dup-report.dsse.json", sign_envelope(payload[:-1] + b',"_type":"x"}', [SCANNER]).to_json_bytes()
    )
    with pytest.raises(ApprovalError, match="its signed statement\\): key '_type' appears more than once"):
        approve_dataset(dirty.vault, dirty.request(contamination_report=twice), policy=policy)
