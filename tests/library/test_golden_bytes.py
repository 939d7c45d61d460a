"""Bytes on storage do not drift: the README's dataset (msgpack.zst, jsonl.gz, parquet) and
its whole custody chain, signed with a fixed key, hash exactly as recorded when the fixture
was written. A change here changes every publication's and approval's sha256."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"


def test_publication_and_chain_bytes_match_the_recorded_digests() -> None:
    out = subprocess.run(
        [sys.executable, str(GOLDEN / "build_chain.py")], capture_output=True, text=True, timeout=300, check=True
    )
    written = json.loads(out.stdout)
    expected = json.loads((GOLDEN / "chain-digests.json").read_text())
    assert sorted(written) == sorted(expected), "objects written differ from the recorded set"
    changed = [uri for uri in expected if written[uri] != expected[uri]]
    assert not changed, f"{len(changed)} objects changed bytes, e.g. {changed[:5]}"
    assert any(uri.endswith("approval-v1.dsse.json") for uri in written)


#: The data manifests' digests as recorded before descriptor packs existed (main at 15e5f2c).
PRE_PACK_MANIFESTS = {
    "memory://golden/dataset/data-manifest-unpacked.json": "ce1d022ade164bf77f4ca42fc979eddac29a12cf11d98839e687826c2898bc74",
}


def test_a_manifest_without_a_pack_keeps_its_pre_pack_bytes() -> None:
    # The new optional field is omitted when absent, so manifests published before packs still
    # hash (and are approved) as they were.
    expected = json.loads((GOLDEN / "chain-digests.json").read_text())
    for uri, digest in PRE_PACK_MANIFESTS.items():
        assert expected[uri] == digest
