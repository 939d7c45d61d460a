"""A trainer's open of a signed record: its metadata only, no shard byte; custody at each block."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, IntegrityError, TrainVault
from trainvault.approval import SigningKey, write_approval
from trainvault.approval.dsse import sign_envelope
from trainvault.approval.record import approval_statement
from trainvault.canonical import canonical_json, sha256_hex
from trainvault.storage.reads import READS

KEY = SigningKey.generate()


@pytest.fixture
def approved(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    chain = build_chain(TrainVault(), str(tmp_path), shards=4, records_per_shard=40, block_bytes=512)
    approved = chain.vault.approve_dataset(chain.request())
    written = write_approval(chain.vault, f"{chain.root}/approval.json", approved, signing_keys=KEY)
    return chain, approved, written


def open_counted(chain: Any, written: Any, **kw: Any) -> tuple[Any, Any]:
    before = READS.snapshot()
    opened = chain.vault.open_approved(written.uri, written.sha256, trusted_keys=[KEY.public_key], **kw)
    return opened, READS.snapshot() - before


def bound_bytes(chain: Any, approved: Any, written: Any) -> int:
    """The record, every document it binds, its release's benchmark files and the descriptor pack,
    each once (the release's items are read from the bytes its binding was hashed from)."""
    st = chain.vault.storage
    docs = {written.uri} | {ref.uri for ref in approved.bindings.values()}
    release_dir = approved.bindings["evaluation_release"].uri.rsplit("/", 1)[0]
    docs |= {o.uri for o in st.list(release_dir)}
    pack = approved.manifest.descriptor_pack
    assert pack is not None
    docs.add(pack.uri)
    return sum(st.head(u).size for u in docs)


def test_open_reads_the_bound_documents_and_no_shard_byte(approved: Any) -> None:
    chain, gated, written = approved
    opened, reads = open_counted(chain, written)
    shards = sum(e.size_bytes for _, e in gated._result.publication.entries())
    assert reads.streamed == 0  # hashing streams shards; nothing was streamed
    assert reads.bytes == bound_bytes(chain, gated, written)
    assert opened.summary == gated.summary and opened.manifest_sha256 == gated.manifest_sha256
    # The audit reads every shard byte again.
    _, audited = open_counted(chain, written, audit=True)
    assert audited.streamed >= shards
    ids = [r["id"] for b in opened.loader_factory(collate_fn=list).load("train") for r in b]
    assert ids == [r["id"] for k in ("s0", "s1", "s2", "s3") for r in chain.records[k]]


def test_a_shard_altered_after_approval_is_refused_at_its_first_altered_block(approved: Any) -> None:
    chain, gated, written = approved
    entry = gated.manifest.splits["train"].shard("easy/s1")
    data = bytearray(chain.vault.storage.get(entry.uri))
    data[-3] ^= 0x10  # same size: only the block digests can tell
    chain.vault.storage.put(entry.uri, bytes(data))
    opened, _ = open_counted(chain, written)
    got: list[str] = []
    with pytest.raises(IntegrityError, match=r"easy/s1.*block \d+ sha256|block \d+ sha256.*easy/s1"):
        for batch in opened.loader_factory(collate_fn=list).load("train"):
            got.extend(r["id"] for r in batch)
    before = [r["id"] for k in ("s0", "s1") for r in chain.records[k]]
    assert got == before[: len(got)] and len(got) >= len(chain.records["s0"])
    with pytest.raises(ApprovalError, match="changed after it was scanned"):
        open_counted(chain, written, audit=True)


@pytest.mark.parametrize("change", ["truncate", "extend", "delete"])
def test_a_shard_resized_or_deleted_after_approval_fails_the_open(approved: Any, change: str) -> None:
    chain, gated, written = approved
    entry = gated.manifest.splits["train"].shard("hard/s3")
    st = chain.vault.storage
    if change == "delete":
        st.delete(entry.uri)
    else:
        data = st.get(entry.uri)
        st.put(entry.uri, data[:-1] if change == "truncate" else data + b"\0")
    found = "is missing" if change == "delete" else f"is {entry.size_bytes + (1 if change == 'extend' else -1)} bytes"
    with pytest.raises(ApprovalError, match=rf"shard 'hard/s3' .* {found}, approved at {entry.size_bytes} bytes"):
        open_counted(chain, written)


def test_a_bound_document_altered_after_approval_fails_the_open(approved: Any) -> None:
    chain, gated, written = approved
    ref = gated.bindings["contamination_report"]
    chain.vault.storage.put(ref.uri, chain.vault.storage.get(ref.uri) + b" ")
    with pytest.raises(ApprovalError, match=r"contamination_report .* it was replaced or altered"):
        open_counted(chain, written)


def test_a_record_whose_signed_summary_lies_is_refused(approved: Any) -> None:
    chain, gated, _ = approved
    statement = approval_statement(gated)
    statement["predicate"]["verification"]["records"] += 1
    data = sign_envelope(canonical_json(statement), [KEY]).to_json_bytes()
    uri = f"{chain.root}/lying-approval.json"
    chain.vault.storage.put_create(uri, data)
    with pytest.raises(
        ApprovalError,
        match=r"signed summary does not describe what it binds .*records 166, the bound documents say 165",
    ):
        chain.vault.open_approved(uri, sha256_hex(data), trusted_keys=[KEY.public_key])
