"""Revocations: a signed withdrawal of an approval refuses its open and its loaders' resumes,
and counts only when the trainer's trusted keys signed it to their threshold."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, ManifestError, TrainVault
from trainvault.approval import SigningKey, write_approval
from trainvault.approval.revocation import find_revocations
from trainvault.approval.revoke import revoke
from trainvault.cli import main
from trainvault.errors import RevokedError

APPROVER = SigningKey.generate()
SECOND = SigningKey.generate()
STRANGER = SigningKey.generate()
REASON = "licence withdrawn by the publisher of shard s1"


@pytest.fixture
def approved(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    chain = build_chain(TrainVault(), str(tmp_path), shards=3, records_per_shard=20, block_bytes=256)
    gated = chain.vault.approve_dataset(chain.request())
    written = write_approval(chain.vault, f"{chain.root}/approval.json", gated, signing_keys=[APPROVER, SECOND])
    return chain, written


def open_it(chain: Any, written: Any, revocations: Any, keys: Any = (APPROVER,), threshold: int = 1) -> Any:
    return chain.vault.open_approved(
        written.uri,
        written.sha256,
        trusted_keys=[k.public_key for k in keys],
        threshold=threshold,
        revocations=revocations,
    )


def test_a_revoked_approval_is_refused_naming_the_revocation_and_its_reason(approved: Any) -> None:
    chain, written = approved
    prefix = f"{chain.root}/revocations"
    assert open_it(chain, written, prefix).summary.shards == 4  # nothing there yet: it opens
    rev = revoke(chain.vault, written.uri, reason=REASON, signing_keys=[APPROVER])
    beside = written.uri.rsplit("/", 1)[0]  # the default prefix: beside the record; content-named
    assert rev.uri == f"{beside}/revocations/{written.sha256}/{rev.sha256}.dsse.json"
    with pytest.raises(RevokedError, match="licence withdrawn") as info:
        open_it(chain, written, prefix)
    assert info.value.revocation == rev.uri and info.value.reason == REASON and rev.uri in str(info.value)
    with pytest.raises(RevokedError):
        open_it(chain, written, [rev.uri])  # the file itself
    with pytest.raises(RevokedError):
        chain.vault.open_approved(
            written.uri, written.sha256, trusted_keys=[APPROVER.public_key], revocations=prefix, audit=True
        )
    # Without a revocation source nothing is checked; revoking again writes the same object.
    assert open_it(chain, written, None).summary.shards == 4
    assert revoke(chain.vault, written.uri, reason=REASON, signing_keys=[APPROVER]).ref == rev.ref


def test_a_revocation_of_another_approval_is_ignored(approved: Any, build_chain: Callable[..., Any]) -> None:
    chain, written = approved
    other_chain = build_chain(TrainVault(), f"{chain.root}/other", shards=2, records_per_shard=10, seed_offset=7)
    other = write_approval(
        other_chain.vault,
        f"{other_chain.root}/approval.json",
        other_chain.vault.approve_dataset(other_chain.request()),
        signing_keys=[APPROVER],
    )
    rev = revoke(chain.vault, other.uri, reason=REASON, signing_keys=[APPROVER])
    # Copied into this approval's folder, or passed as a file: signed by the right key, for another approval.
    prefix = f"{chain.root}/revocations"
    copied = f"{prefix}/{written.sha256}/copied.dsse.json"
    chain.vault.storage.put_create(copied, chain.vault.storage.get(rev.uri))
    assert open_it(chain, written, prefix).summary.shards == 4
    assert open_it(chain, written, [rev.uri]).summary.shards == 4
    (found,) = find_revocations(chain.vault, [rev.uri], written.sha256, trusted_keys=[APPROVER.public_key])
    assert not found.counts and other.sha256 in str(found.ignored)
    with pytest.raises(RevokedError):
        open_it(chain, other, [rev.uri])


def test_a_revocation_counts_only_when_threshold_trusted_keys_signed_it(approved: Any) -> None:
    chain, written = approved
    prefix = f"{chain.root}/revocations"
    revoke(chain.vault, written.uri, reason="untrusted", signing_keys=[STRANGER])
    revoke(chain.vault, written.uri, reason="one of two", signing_keys=[APPROVER])
    found = find_revocations(
        chain.vault, prefix, written.sha256, trusted_keys=[APPROVER.public_key, SECOND.public_key], threshold=2
    )
    assert len(found) == 2 and not any(f.counts for f in found)
    assert all("not signed by 2 of the trusted keys" in str(f.ignored) for f in found)
    assert open_it(chain, written, prefix, keys=(APPROVER, SECOND), threshold=2).summary.shards == 4
    # Under threshold 1 the approver's own revocation counts; the stranger's never does.
    with pytest.raises(RevokedError, match="one of two"):
        open_it(chain, written, prefix, keys=(APPROVER,))
    revoke(chain.vault, written.uri, reason="both", signing_keys=[APPROVER, SECOND])
    with pytest.raises(RevokedError, match="both"):
        open_it(chain, written, prefix, keys=(APPROVER, SECOND), threshold=2)


def test_revocations_are_found_on_every_store(
    vault_root: tuple[TrainVault, str], build_chain: Callable[..., Any]
) -> None:
    vault, root = vault_root
    chain = build_chain(vault, root, shards=2, records_per_shard=10)
    written = write_approval(
        vault, f"{root}/approval.json", vault.approve_dataset(chain.request()), signing_keys=APPROVER
    )
    prefix = f"{root}/revocations"
    assert open_it(chain, written, prefix).summary.shards == 3  # two train shards and one valid
    rev = revoke(vault, written.uri, reason=REASON, signing_keys=[APPROVER], prefix=prefix)
    with pytest.raises(RevokedError) as info:
        open_it(chain, written, prefix)
    assert info.value.revocation == rev.uri


def _tampered(raw: bytes) -> bytes:
    """The envelope with its statement's reason changed, signatures kept."""
    envelope = json.loads(raw)
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["reason"] = "something else"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    return json.dumps(envelope).encode()


def test_a_tampered_revocation_does_not_count(approved: Any) -> None:
    chain, written = approved
    rev = revoke(chain.vault, written.uri, reason=REASON, signing_keys=[APPROVER], prefix=f"{chain.root}/elsewhere")
    forged = f"{chain.root}/forged.dsse.json"
    chain.vault.storage.put_create(forged, _tampered(chain.vault.storage.get(rev.uri)))
    assert open_it(chain, written, [forged]).summary.shards == 4


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"format": "trainvault.revocation"}',
        b'{"payload": "!!", "payloadType": "application/vnd.in-toto+json", "signatures": []}',
        "approval",  # another kind of signed document: the approval record itself
        "wrong-kind",  # a revocation statement whose predicate is not a revocation
    ],
)
def test_a_malformed_revocation_is_a_typed_error(approved: Any, content: Any) -> None:
    chain, written = approved
    prefix = f"{chain.root}/revocations"
    if content == "approval":
        content = chain.vault.storage.get(written.uri)
    elif content == "wrong-kind":
        rev = revoke(chain.vault, written.uri, reason=REASON, signing_keys=[APPROVER], prefix=f"{chain.root}/x")
        envelope = json.loads(chain.vault.storage.get(rev.uri))
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["predicate"] = {"format": "trainvault.revocation", "version": 1, "reason": REASON}
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        content = json.dumps(envelope).encode()
    bad = f"{prefix}/{written.sha256}/bad.dsse.json"
    chain.vault.storage.put_create(bad, content)
    with pytest.raises(ManifestError, match=r"bad\.dsse\.json"):
        open_it(chain, written, prefix)
    with pytest.raises(ManifestError, match=r"bad\.dsse\.json"):
        open_it(chain, written, [bad])


def test_bad_sources_and_requests_are_refused(approved: Any) -> None:
    chain, written = approved
    rev = revoke(chain.vault, written.uri, reason=REASON, signing_keys=[APPROVER])
    with pytest.raises(ApprovalError, match="is a file, not a prefix"):
        open_it(chain, written, rev.uri)  # a file where a prefix belongs would list nothing: refused
    with pytest.raises(ApprovalError, match="cannot read revocation"):
        open_it(chain, written, [f"{chain.root}/no-such.dsse.json"])
    with pytest.raises(TypeError, match="prefix"):
        open_it(chain, written, 3)
    for reason in ("", "   ", "x" * 4001):
        with pytest.raises(ApprovalError, match="reason"):
            revoke(chain.vault, written.uri, reason=reason, signing_keys=[APPROVER])
    with pytest.raises(ApprovalError, match="not a signed approval record"):
        revoke(chain.vault, chain.manifest_uri, reason=REASON, signing_keys=[APPROVER])
    with pytest.raises(ApprovalError, match="no approval record"):
        revoke(chain.vault, f"{chain.root}/nothing.json", reason=REASON, signing_keys=[APPROVER])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_resuming_after_the_revocation_refuses(approved: Any, workers: int) -> None:
    chain, written = approved
    prefix = f"{chain.root}/revocations"
    opened = open_it(chain, written, prefix)
    factory = opened.loader_factory(collate_fn=list, dataloader_args={"batch_size": 8, "num_workers": workers})
    whole = [[r["id"] for r in batch] for batch in factory.load("train")]
    loader = factory.load("train")
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    fresh = factory.load("train")
    fresh.load_state_dict(state)  # not revoked yet: it resumes where it was
    assert [[r["id"] for r in batch] for batch in fresh] == whole[1:]
    revoke(chain.vault, written.uri, reason=REASON, signing_keys=[APPROVER])
    with pytest.raises(RevokedError, match="licence withdrawn"):
        factory.load("train").load_state_dict(state)
    with pytest.raises(RevokedError):
        loader.load_state_dict(state)


def test_a_mixture_loader_resuming_after_the_revocation_refuses(approved: Any) -> None:
    from trainvault.mixtures import Mixture, MixtureComponent

    chain, written = approved
    mixture = Mixture(
        "train", [MixtureComponent("easy", 1, "easy", run_out="drop"), MixtureComponent("hard", 1, "hard")]
    )
    factory = open_it(chain, written, f"{chain.root}/revocations").loader_factory(
        collate_fn=list, dataloader_args={"batch_size": 4}
    )
    loader = factory.load_mixture(mixture)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    factory.load_mixture(mixture).load_state_dict(state)  # not revoked yet
    revoke(chain.vault, written.uri, reason=REASON, signing_keys=[APPROVER])
    with pytest.raises(RevokedError, match="licence withdrawn"):
        factory.load_mixture(mixture).load_state_dict(state)


def test_the_cli_revokes_and_verify_reports_it(
    approved: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain, written = approved
    key, pub = tmp_path / "approver.key", tmp_path / "approver.pub"
    key.write_bytes(APPROVER.to_pem())
    pub.write_bytes(APPROVER.public_key.to_pem())
    verify = ["verify", written.uri, "--sha256", written.sha256, "--trusted-key", str(pub), "--quiet"]
    prefix = f"{chain.root}/revocations"
    assert main([*verify, "--revocations", prefix]) == 0
    assert "revocations: not revoked (0 found" in capsys.readouterr().out
    assert main(["revoke", written.uri, "--reason", REASON, "--signing-key", str(key)]) == 0
    out = capsys.readouterr().out
    assert f"reason   {REASON}" in out and f"{prefix}/{written.sha256}/" in out
    assert main([*verify, "--revocations", prefix]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trainvault: error: approval") and "was revoked by" in err and REASON in err
    assert main(verify) == 0
    assert "revocations: not checked" in capsys.readouterr().out
    assert main([*verify, "--revocations", prefix, "--revocation", "x"]) == 1
    assert "not both" in capsys.readouterr().err
