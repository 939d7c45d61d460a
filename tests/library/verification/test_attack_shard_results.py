"""Issue 34 item 2, as an attacker with write access to the results folder but no scanner key
would try it: a clean scan written over a contaminated shard's stored result, under its own
correct key (made of public digests). The next pass must not reuse it: it names the object
in the log, reads the shard again, and the report still finds the contamination."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import TrainVault
from trainvault.approval import SigningKey
from trainvault.canonical import canonical_json
from trainvault.contamination import reduce_report
from trainvault.errors import ApprovalError, IntegrityError
from trainvault.publication.pinned import Publication
from trainvault.verification import stored_verification, verify_shard
from trainvault.verification.fused import scan_key, survey_key
from trainvault.verification.results import StoredScan, key_uri, store_result

SCANNER = SigningKey.generate()
LOGGER = "trainvault.verification"


@pytest.fixture
def chain(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path), shards=3, records_per_shard=40, contaminate=True)


def verify_all(chain: Any, folder: str, key: SigningKey = SCANNER) -> tuple[Any, dict[str, Any]]:
    """The verification pass over every shard under `key`, and the report its results reduce to."""
    manifest = Publication.load(chain.vault.storage, chain.manifest_uri).manifest
    verified = {
        e.key: verify_shard(chain.vault.storage, folder, "msgpack.zst", split, e, chain.index, signing_key=key)
        for split, sm in manifest.splits.items()
        for e in sm.shards
    }
    report = reduce_report(
        chain.index,
        manifest,
        [v.scan for v in verified.values()],
        data_manifest_sha256=chain.refs["data_manifest"].sha256,
        scan_manifest_sha256=chain.refs["training_scan_manifest"].sha256,
        producer_pins_sha256=chain.refs["producer_pins"].sha256,
    )
    return report, verified


def contaminated(chain: Any, verified: dict[str, Any], folder: str) -> tuple[Any, Path]:
    """The entry of the one shard with hits, and the path of its stored scan in `folder`."""
    manifest = Publication.load(chain.vault.storage, chain.manifest_uri).manifest
    (entry,) = [e for sm in manifest.splits.values() for e in sm.shards if verified[e.key].scan.items]
    key = clean_forgery(verified, entry).key
    return entry, Path(key_uri(folder, "scan", key, SCANNER.public_key).removeprefix("file://"))


def clean_forgery(verified: dict[str, Any], entry: Any) -> StoredScan:
    """The contaminated shard's stored scan with its hits removed: a clean result under its own key."""
    result = verified[entry.key].scan
    key = scan_key(entry, "msgpack.zst", release_sha256=result.release_sha256, contract_sha256=result.contract_sha256)
    return StoredScan(key=key, result=result.model_copy(update={"items": []}))


def assert_recomputed(chain: Any, folder: str, path: Path, caplog: Any, entry: Any) -> None:
    """The next pass names the forged object, reads the shard, and finds the contamination again."""
    caplog.clear()
    with caplog.at_level("WARNING", logger=LOGGER):
        report, verified = verify_all(chain, folder)
    assert f"{path.name}: stored per-shard result not trusted, not reused" in caplog.text
    assert verified[entry.key].read and verified[entry.key].scan.items
    assert not report.passed and report.contaminated_items
    # The recomputed, signed result replaced the forgery: the pass after reuses it.
    _, again = verify_all(chain, folder)
    assert not any(v.read for v in again.values()) and again[entry.key].scan.items


def test_a_clean_result_forged_over_a_contaminated_shards_is_recomputed_and_the_report_fails(
    chain, tmp_path, caplog
) -> None:
    folder = str(tmp_path / "results")
    report, verified = verify_all(chain, folder)
    assert not report.passed
    entry, path = contaminated(chain, verified, folder)
    forged = clean_forgery(verified, entry)
    # What the store held before signed results (an unsigned v1 document), and the same forgery
    # as v2 in an envelope nobody signed: neither is reused.
    v1 = {**forged.model_dump(mode="json"), "version": 1}
    unsigned = {"payload": base64.b64encode(forged.to_json_bytes()).decode(), "payloadType": forged.PAYLOAD_TYPE}
    for data in (canonical_json(v1), forged.to_json_bytes(), canonical_json({**unsigned, "signatures": []})):
        path.write_bytes(data)
        assert_recomputed(chain, folder, path, caplog, entry)


def test_a_result_signed_by_another_key_is_not_reused(chain, tmp_path, caplog) -> None:
    folder = str(tmp_path / "results")
    _, verified = verify_all(chain, folder)
    entry, path = contaminated(chain, verified, folder)
    attacker = SigningKey.generate()
    store_result(chain.vault.storage, str(path), clean_forgery(verified, entry), attacker, replace=True)
    assert_recomputed(chain, folder, path, caplog, entry)
    # The key id only names the folder: the genuine results copied into another scanner's
    # folder are not that scanner's, and are refused by a reader trusting it.
    release, contract = chain.index.release_sha256, chain.index.contract_sha256
    lookup = {"release_sha256": release, "contract_sha256": contract}
    genuine = stored_verification(chain.vault.storage, folder, "msgpack.zst", entry, **lookup, scanner_key=SCANNER)
    other = stored_verification(chain.vault.storage, folder, "msgpack.zst", entry, **lookup, scanner_key=attacker)
    for mine, theirs in ((genuine.scan_uri, other.scan_uri), (genuine.survey_uri, other.survey_uri)):
        chain.vault.storage.put(theirs, chain.vault.storage.get_document(mine))
    with caplog.at_level("WARNING", logger=LOGGER):
        found = stored_verification(chain.vault.storage, folder, "msgpack.zst", entry, **lookup, scanner_key=attacker)
    assert found.scan is None and found.survey is None and found.verified is None
    assert found.refused == {found.scan_uri, found.survey_uri}


def test_scanners_with_different_keys_keep_their_results_apart(chain, tmp_path) -> None:
    folder = str(tmp_path / "results")
    verify_all(chain, folder)
    other = SigningKey.generate()
    _, theirs = verify_all(chain, folder, key=other)
    assert all(v.read for v in theirs.values())  # nothing signed by it yet
    _, mine = verify_all(chain, folder)
    assert not any(v.read for v in mine.values())  # and it replaced none of the first scanner's


def test_one_altered_byte_of_a_signed_result_is_not_reused(chain, tmp_path, caplog) -> None:
    folder = str(tmp_path / "results")
    _, verified = verify_all(chain, folder)
    entry, path = contaminated(chain, verified, folder)
    genuine = path.read_bytes()
    payload = json.loads(genuine)["payload"]
    at = genuine.index(payload.encode()) + len(payload) // 2
    altered = bytearray(genuine)
    altered[at] = ord("B") if altered[at] != ord("B") else ord("C")  # still base64: only the signature can tell
    path.write_bytes(bytes(altered))
    assert_recomputed(chain, folder, path, caplog, entry)
    assert path.read_bytes() == genuine


def test_a_forged_survey_is_refused_by_readers_that_cannot_recompute_and_recomputed_by_the_pass(
    chain, tmp_path, caplog
) -> None:
    from trainvault.verification import stored_survey

    folder = str(tmp_path / "results")
    _, verified = verify_all(chain, folder)
    entry, _ = contaminated(chain, verified, folder)
    path = Path(key_uri(folder, "survey", survey_key(entry, "msgpack.zst"), SCANNER.public_key).removeprefix("file://"))
    genuine = path.read_bytes()
    path.write_bytes(verified[entry.key].survey.model_copy(update={"fields": []}).to_json_bytes())
    with pytest.raises(IntegrityError, match=f"no trusted stored survey at .*{path.name}"):
        stored_survey(chain.vault.storage, folder, "msgpack.zst", entry, scanner_key=SCANNER.public_key)
    with caplog.at_level("WARNING", logger=LOGGER):
        _, again = verify_all(chain, folder)
    assert f"{path.name}: stored per-shard result not trusted, not reused" in caplog.text and again[entry.key].read
    assert path.read_bytes() == genuine


def test_a_scanner_key_that_is_not_a_key_is_refused(chain, tmp_path) -> None:
    manifest = Publication.load(chain.vault.storage, chain.manifest_uri).manifest
    entry = manifest.split("train").shards[0]
    digests = {"release_sha256": chain.index.release_sha256, "contract_sha256": chain.index.contract_sha256}
    with pytest.raises(ApprovalError, match="not a PEM public key"):
        stored_verification(
            chain.vault.storage, str(tmp_path / "results"), "msgpack.zst", entry, **digests, scanner_key=b"-----BEGIN x"
        )
