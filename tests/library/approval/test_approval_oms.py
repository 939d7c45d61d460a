"""The OMS export checked by the real verifier, `model_signing` (its command and its Python API):
an exported dataset in each format is accepted as it lies, and refused after any change to its
folder (a shard renamed, swapped, deleted, truncated or changed; a file added; the manifest
edited) and under another key."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from model_signing import verifying
from support.approval_chain import TINY_JSONL, make_records

from trainvault import TrainVault
from trainvault.approval import SigningKey, collect_producer_pins
from trainvault.approval.ecdsa import write_ecdsa_keypair
from trainvault.approval.oms import export_oms
from trainvault.contamination import jsonl_benchmark

FORMATS = ("msgpack.zst", "jsonl.gz", "parquet")
MODEL_SIGNING = Path(sys.executable).with_name("model_signing")
TINY = jsonl_benchmark("tiny", TINY_JSONL)


@dataclass(frozen=True)
class Exported:
    folder: Path  # the dataset's folder, as exported
    signature: Path  # the bundle, inside the folder (oms/)
    public: Path
    other_public: Path
    shard_ext: str


def approved_folder(base: Path, data_format: str) -> tuple[TrainVault, str, str, SigningKey]:
    """A three-shard dataset in `data_format` under base/ds, approved: (vault, record uri, sha256, key)."""
    vault = TrainVault()
    saver = vault.dataset_saver(str(base / "ds" / "data-manifest-v1.json"), data_format=data_format)
    for shard in range(3):
        saver.save("train", None, make_records(shard, 12), shard_id=str(shard))
    manifest = saver.commit_manifest()
    key = SigningKey.generate()
    pins = collect_producer_pins(code_revision="test")
    record = vault.approve(manifest.uri, benchmarks=[TINY], signing_keys=key, pins=pins)
    return vault, record.uri, record.sha256, key


@pytest.fixture(scope="module", params=FORMATS)
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Exported:
    base = tmp_path_factory.mktemp(request.param.replace(".", "-"))
    vault, uri, sha256, key = approved_folder(base, request.param)
    approved = vault.open_approved(uri, sha256, trusted_keys=[key.public_key])
    private, public, _ = write_ecdsa_keypair(base / "oms-signer")
    _, other_public, _ = write_ecdsa_keypair(base / "someone-else")
    written = export_oms(vault, approved, private)
    return Exported(base / "ds", Path(written.uri.removeprefix("file://")), public, other_public, request.param)


def cli_verify(folder: Path, signature: Path, public: Path) -> tuple[bool, str]:
    done = subprocess.run(
        [str(MODEL_SIGNING), "verify", "key", str(folder), "--signature", str(signature), "--public_key", str(public)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode == 0 and "Verification succeeded" in done.stdout, done.stdout + done.stderr


def api_verify(folder: Path, signature: Path, public: Path) -> tuple[bool, str]:
    try:
        verifying.Config().use_elliptic_key_verifier(public_key=public).verify(folder, signature)
    except ValueError as exc:  # what model_signing raises for every refusal
        return False, str(exc)
    return True, ""


VERIFIERS = {"cli": cli_verify, "api": api_verify}


def shard(folder: Path, ext: str, n: int) -> Path:
    return folder / "shards" / "train" / "_" / f"{n}.{ext}"


def rename(folder: Path, ext: str) -> None:
    shard(folder, ext, 0).rename(shard(folder, ext, 0).with_name(f"7.{ext}"))


def swap(folder: Path, ext: str) -> None:
    a, b = shard(folder, ext, 0), shard(folder, ext, 1)
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)


def delete(folder: Path, ext: str) -> None:
    shard(folder, ext, 2).unlink()


def truncate(folder: Path, ext: str) -> None:
    p = shard(folder, ext, 1)
    p.write_bytes(p.read_bytes()[:-1])


def change(folder: Path, ext: str) -> None:
    p = shard(folder, ext, 1)
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))


def add_file(folder: Path, ext: str) -> None:
    (folder / "shards" / "train" / "_" / "extra.jsonl").write_bytes(b'{"id": "smuggled"}\n')


def edit_manifest(folder: Path, ext: str) -> None:
    p = folder / "data-manifest-v1.json"
    doc = json.loads(p.read_bytes())
    doc["splits"]["train"]["shards"][0]["record_count"] += 1
    p.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")))


TAMPERS: dict[str, Callable[[Path, str], None]] = {
    "renamed": rename,
    "swapped": swap,
    "deleted": delete,
    "truncated": truncate,
    "changed": change,
    "added": add_file,
    "manifest edited": edit_manifest,
}


@pytest.mark.parametrize("how", VERIFIERS)
def test_the_verifier_accepts_the_exported_folder(exported: Exported, how: str) -> None:
    ok, output = VERIFIERS[how](exported.folder, exported.signature, exported.public)
    assert ok, output


@pytest.mark.parametrize("how", VERIFIERS)
@pytest.mark.parametrize("tamper", TAMPERS)
def test_the_verifier_refuses_a_changed_folder(exported: Exported, tmp_path: Path, tamper: str, how: str) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(exported.folder, copy)
    TAMPERS[tamper](copy, exported.shard_ext)
    signature = copy / exported.signature.relative_to(exported.folder)
    ok, output = VERIFIERS[how](copy, signature, exported.public)
    assert not ok
    assert "Signature mismatch" in output or "Verification failed" in output, output


@pytest.mark.parametrize("how", VERIFIERS)
def test_the_verifier_refuses_another_key(exported: Exported, how: str) -> None:
    ok, output = VERIFIERS[how](exported.folder, exported.signature, exported.other_public)
    assert not ok
    assert "Key mismatch" in output, output


def test_another_key_is_refused_by_its_signature_when_the_bundle_names_no_key(
    exported: Exported, tmp_path: Path
) -> None:
    """The key hint is unauthenticated: without it the verifier checks the signature itself."""
    bundle = json.loads(exported.signature.read_bytes())
    bundle["verificationMaterial"]["publicKey"].pop("hint")
    hintless = tmp_path / "hintless.sigstore.json"
    hintless.write_text(json.dumps(bundle))
    ok, output = cli_verify(exported.folder, hintless, exported.other_public)
    assert not ok and "Verification failed" in output, output
    with pytest.raises(InvalidSignature):
        verifying.Config().use_elliptic_key_verifier(public_key=exported.other_public).verify(exported.folder, hintless)
    ok, output = cli_verify(exported.folder, hintless, exported.public)  # the signer's key still verifies it
    assert ok, output
