"""What the OMS export signs and refuses: the statement model_signing itself would write for the
folder, one bundle per signer, ECDSA keys only, a folder that holds exactly what the approval
binds, files outside it named as not covered; and the `oms-export` and `keygen` commands."""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from model_signing import verifying
from support.approval_chain import TINY_JSONL, make_records

from trainvault import ApprovalError, ConflictError, TrainVault
from trainvault.approval import SigningKey, collect_producer_pins, write_keypair
from trainvault.approval.ecdsa import EcdsaSigningKey, load_ecdsa_signing_key, write_ecdsa_keypair
from trainvault.approval.oms import export_oms
from trainvault.canonical import sha256_hex
from trainvault.cli import main
from trainvault.contamination import jsonl_benchmark

MODEL_SIGNING = Path(sys.executable).with_name("model_signing")
PINS = collect_producer_pins(code_revision="test")


def approved(base: Path | str, vault: TrainVault | None = None, **approve: Any) -> tuple[TrainVault, Any, SigningKey]:
    vault = vault or TrainVault()
    saver = vault.dataset_saver(f"{base}/ds/data-manifest-v1.json")
    for shard in range(2):
        saver.save("train", None, make_records(shard, 10), shard_id=str(shard))
    manifest = saver.commit_manifest()
    key = SigningKey.generate()
    record = vault.approve(
        manifest.uri, benchmarks=[jsonl_benchmark("tiny", TINY_JSONL)], signing_keys=key, pins=PINS, **approve
    )
    return vault, vault.open_approved(record.uri, record.sha256, trusted_keys=[key.public_key]), key


def statement(bundle: Path) -> dict[str, Any]:
    return json.loads(base64.b64decode(json.loads(bundle.read_bytes())["dsseEnvelope"]["payload"]))


def local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def test_the_statement_is_the_one_model_signing_signs_for_the_folder(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    private, _, _ = write_ecdsa_keypair(tmp_path / "signer")
    written = export_oms(vault, opened, private)
    ours = statement(local(written.uri))
    theirs_path = tmp_path / "theirs.sig"
    subprocess.run(
        [
            *(str(MODEL_SIGNING), "sign", "key", str(tmp_path / "ds"), "--private_key", str(private)),
            *("--signature", str(theirs_path), "--ignore-paths", str(tmp_path / "ds" / "oms")),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    theirs = statement(theirs_path)
    assert ours["subject"] == theirs["subject"] and ours["subject"][0]["digest"]["sha256"] == written.subject_sha256
    assert ours["predicate"]["resources"] == theirs["predicate"]["resources"]
    names = [r["name"] for r in ours["predicate"]["resources"]]
    assert "approval-v1.dsse.json" in names and "evaluation/items/tiny.jsonl" in names
    assert written.files == len(names) and written.not_covered == ()


def test_each_signer_writes_its_own_bundle_and_each_verifies(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    pairs = [write_ecdsa_keypair(tmp_path / name) for name in ("first", "second")]
    bundles = [local(export_oms(vault, opened, private).uri) for private, _, _ in pairs]
    assert bundles[0] != bundles[1] and {b.parent.name for b in bundles} == {"oms"}
    for bundle, (_, public, _) in zip(bundles, pairs, strict=True):
        verifying.Config().use_elliptic_key_verifier(public_key=public).verify(tmp_path / "ds", bundle)


def test_a_bundle_written_inside_the_folder_is_skipped_by_the_statement_it_carries(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    private, public, _ = write_ecdsa_keypair(tmp_path / "signer")
    written = export_oms(vault, opened, private, out=str(tmp_path / "ds" / "dataset.sigstore.json"))
    assert "dataset.sigstore.json" in statement(local(written.uri))["predicate"]["serialization"]["ignore_paths"]
    verifying.Config().use_elliptic_key_verifier(public_key=public).verify(tmp_path / "ds", local(written.uri))


def test_a_bound_file_under_the_signatures_folder_is_refused(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path, record_uri=str(tmp_path / "ds" / "oms" / "approval-v1.dsse.json"))
    with pytest.raises(ApprovalError, match="a path model_signing skips"):
        export_oms(vault, opened, EcdsaSigningKey.generate())


def test_exporting_again_writes_nothing_and_another_signature_there_is_a_conflict(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    private, _, _ = write_ecdsa_keypair(tmp_path / "signer")
    first = export_oms(vault, opened, private)
    before = local(first.uri).stat().st_mtime_ns
    assert export_oms(vault, opened, private) == first  # RFC 6979: the same statement and key, the same bytes
    assert local(first.uri).stat().st_mtime_ns == before
    with pytest.raises(ConflictError):  # another key's bundle where this one lies
        export_oms(vault, opened, EcdsaSigningKey.generate(), out=first.uri)
    assert sha256_hex(local(first.uri).read_bytes()) == first.sha256


def test_an_ed25519_key_is_refused_naming_the_key_to_make(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    private, _, _ = write_keypair(tmp_path / "ed")
    with pytest.raises(ApprovalError, match="keygen --type ecdsa-p256"):
        export_oms(vault, opened, private)
    assert not (tmp_path / "ds" / "oms").exists()


def test_an_unbound_file_in_the_folder_is_refused_before_signing(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    (tmp_path / "ds" / "notes.txt").write_text("not approved")
    with pytest.raises(ApprovalError, match=r"does not bind \(notes\.txt\)"):
        export_oms(vault, opened, EcdsaSigningKey.generate())
    assert not (tmp_path / "ds" / "oms").exists()


def test_a_missing_or_resized_shard_is_refused_before_signing(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    shard = tmp_path / "ds" / "shards" / "train" / "_" / "1.msgpack.zst"
    shard.write_bytes(shard.read_bytes() + b"x")
    with pytest.raises(ApprovalError, match=r"1\.msgpack\.zst is \d+ bytes, approved at"):
        export_oms(vault, opened, EcdsaSigningKey.generate())
    shard.unlink()
    with pytest.raises(ApprovalError, match=r"1\.msgpack\.zst is missing"):
        export_oms(vault, opened, EcdsaSigningKey.generate())


def test_an_approval_not_opened_from_its_record_is_refused(tmp_path: Path) -> None:
    from trainvault.approval.gate import approve_dataset

    vault, opened, _ = approved(tmp_path)
    in_process = approve_dataset(vault, opened.request)
    with pytest.raises(ApprovalError, match="open_approved it"):
        export_oms(vault, in_process, EcdsaSigningKey.generate())


def test_documents_outside_the_folder_are_named_not_covered_and_the_folder_verifies(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path, release_root=str(tmp_path / "evaluations"))
    private, public, _ = write_ecdsa_keypair(tmp_path / "signer")
    written = export_oms(vault, opened, private)
    assert [Path(u).name for u in written.not_covered] == ["evaluation-release-v1.json", "tiny.jsonl"]
    verifying.Config().use_elliptic_key_verifier(public_key=public).verify(tmp_path / "ds", local(written.uri))


def test_a_p384_key_signs_and_verifies(tmp_path: Path) -> None:
    vault, opened, _ = approved(tmp_path)
    raw = ec.generate_private_key(ec.SECP384R1())
    pem = raw.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = tmp_path / "p384.pub"
    public.write_bytes(load_ecdsa_signing_key(pem).public_pem())
    written = export_oms(vault, opened, pem, out=str(tmp_path / "p384.sigstore.json"))
    verifying.Config().use_elliptic_key_verifier(public_key=public).verify(tmp_path / "ds", local(written.uri))


def test_an_ecdsa_key_hides_its_material_and_does_not_pickle(tmp_path: Path) -> None:
    private, public, key = write_ecdsa_keypair(tmp_path / "k")
    assert private.stat().st_mode & 0o777 == 0o600
    assert key.hint[:16] in repr(key) and "PRIVATE" not in repr(key)
    with pytest.raises(TypeError):
        pickle.dumps(key)
    with pytest.raises(ApprovalError, match="already exists"):
        write_ecdsa_keypair(tmp_path / "k")
    with pytest.raises(ApprovalError, match="not an unencrypted PEM private key"):
        load_ecdsa_signing_key(public)


def test_an_export_on_s3_verifies_on_a_local_copy_of_the_prefix(
    s3_vault: TrainVault, s3_bucket: str, tmp_path: Path
) -> None:
    vault, opened, _ = approved(f"s3://{s3_bucket}", s3_vault)
    private, public, _ = write_ecdsa_keypair(tmp_path / "signer")
    written = vault.export_oms(opened, str(private))
    prefix = f"s3://{s3_bucket}/ds/"
    assert written.root == prefix[:-1] and written.uri.startswith(prefix + "oms/") and written.not_covered == ()
    copy = tmp_path / "ds"
    for obj in vault.storage.list(prefix):  # what copying the prefix to a folder gives
        dest = copy / obj.uri[len(prefix) :]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(vault.storage.get(obj.uri))
    verifying.Config().use_elliptic_key_verifier(public_key=public).verify(copy, copy / written.uri[len(prefix) :])


def test_keygen_and_oms_export_commands_write_a_bundle_the_verifier_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, opened, key = approved(tmp_path)
    trusted = tmp_path / "approver.pub"
    trusted.write_bytes(key.public_key.to_pem())
    assert main(["keygen", "--type", "ecdsa-p256", "--out", str(tmp_path / "oms")]) == 0
    assert "ECDSA P-256" in capsys.readouterr().out
    record = opened.approval
    argv = ["oms-export", record.uri, "--sha256", record.sha256, "--trusted-key", str(trusted), "--quiet"]
    assert main([*argv, "--signing-key", str(tmp_path / "oms.key")]) == 0
    out = capsys.readouterr().out
    bundle = Path(out.split("oms signature ")[1].split()[0].removeprefix("file://"))
    assert "model_signing verify key" in out
    verifying.Config().use_elliptic_key_verifier(public_key=tmp_path / "oms.pub").verify(tmp_path / "ds", bundle)
    # An approval key is refused in one line, naming the key type to make.
    assert main([*argv, "--signing-key", str(tmp_path / "approver.pub"), "--out", str(tmp_path / "x.json")]) == 1
    assert "not an unencrypted PEM private key" in capsys.readouterr().err


def signed_and_opened(chain: Any, tmp_path: Path, request: Any, policy: Any = None) -> Any:
    from trainvault.approval import write_approval
    from trainvault.approval.gate import approve_dataset

    key = SigningKey.generate()
    gated = approve_dataset(chain.vault, request, policy=policy)
    written = write_approval(chain.vault, f"{chain.root}/ds/approval-v1.dsse.json", gated, signing_keys=key)
    return chain.vault.open_approved(written.uri, written.sha256, trusted_keys=[key], policy=policy)


def test_an_approval_with_exclusions_signs_whole_shards_and_names_the_exclusions_outside(
    build_chain: Any, tmp_path: Path
) -> None:
    from trainvault import ApprovalPolicy
    from trainvault.contamination import exclusions_from_report

    chain = build_chain(TrainVault(), str(tmp_path / "dirty"), shards=3, contaminate=True)
    report = chain.extra["report"]
    exclusions = exclusions_from_report(report, report_sha256=chain.refs["contamination_report"].sha256)
    policy = ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 10))
    opened = signed_and_opened(chain, tmp_path, chain.with_exclusions(exclusions), policy)
    assert opened.exclusions is not None and len(opened.exclusions.records) == 1
    private, public, _ = write_ecdsa_keypair(tmp_path / "signer")
    written = export_oms(chain.vault, opened, private)
    assert opened.bindings["exclusions"].uri in written.not_covered  # bound, but outside ds/
    names = [r["name"] for r in statement(local(written.uri))["predicate"]["resources"]]
    assert "shards/train/hard/s2.msgpack.zst" in names  # the shard that holds the excluded record, whole
    verifying.Config().use_elliptic_key_verifier(public_key=public).verify(
        tmp_path / "dirty" / "ds", local(written.uri)
    )


def test_a_manifest_without_a_descriptor_pack_lists_every_descriptor(build_chain: Any, tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path / "old"), shards=2, packed=False)
    opened = signed_and_opened(chain, tmp_path, chain.request())
    assert opened.manifest.descriptor_pack is None
    private, public, _ = write_ecdsa_keypair(tmp_path / "signer")
    written = export_oms(chain.vault, opened, private)
    names = [r["name"] for r in statement(local(written.uri))["predicate"]["resources"]]
    assert not any(n.startswith("descriptor-packs/") for n in names)
    shards = [e for split in opened.manifest.splits.values() for e in split.shards]
    assert sorted(n for n in names if n.endswith(".complete.json")) == sorted(
        e.descriptor_uri.rsplit("/ds/", 1)[1] for e in shards
    )
    verifying.Config().use_elliptic_key_verifier(public_key=public).verify(tmp_path / "old" / "ds", local(written.uri))


def test_a_revocation_beside_a_record_in_the_folder_fails_the_old_export_and_refuses_a_new_one(tmp_path: Path) -> None:
    vault, opened, key = approved(tmp_path)
    private, public, _ = write_ecdsa_keypair(tmp_path / "signer")
    written = export_oms(vault, opened, private)
    vault.revoke(opened.approval.uri, reason="licence withdrawn", signing_keys=key)  # revocations/ beside the record
    with pytest.raises(ValueError, match="Extra files"):  # model_signing: the folder is no longer what was signed
        verifying.Config().use_elliptic_key_verifier(public_key=public).verify(tmp_path / "ds", local(written.uri))
    with pytest.raises(ApprovalError, match=r"does not bind \(revocations/"):
        export_oms(vault, opened, EcdsaSigningKey.generate())
