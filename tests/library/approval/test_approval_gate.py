"""The approval gate: every row of the attack table is denied; a clean chain is approved on every store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, ObjectRef, TrainVault
from trainvault.approval import ApprovalPolicy, ApprovedDataset, ProducerPins, build_training_scan_manifest
from trainvault.approval.hashing import HashProgress
from trainvault.approval.pins import PackagePin
from trainvault.contamination import VerifierContract, jsonl_benchmark, load_index, publish_release
from trainvault.contamination.contract import V2_CONTRACT, BenchmarkLimits
from trainvault.version import __version__


@pytest.fixture
def chain(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path))


def denied(vault: TrainVault, request: Any, match: str, **kw: Any) -> None:
    with pytest.raises(ApprovalError, match=match):
        vault.approve_dataset(request, **kw)


def flip_byte(vault: TrainVault, uri: str, offset: int) -> None:
    data = bytearray(vault.storage.get(uri))
    data[offset] ^= 0x01
    vault.storage.put(uri, bytes(data))


def shard_uri(chain: Any, key: str, split: str = "train") -> str:
    manifest = chain.vault.load_manifest(chain.manifest_uri)
    return manifest.splits[split].shard(key).uri


def test_clean_chain_is_approved_on_every_store(
    build_chain: Callable[..., Any], vault_root: tuple[TrainVault, str]
) -> None:
    vault, root = vault_root
    chain = build_chain(vault, root, shards=2, records_per_shard=10)
    seen: list[HashProgress] = []
    approved = vault.approve_dataset(chain.request(), progress=seen.append)
    assert isinstance(approved, ApprovedDataset)
    assert approved.manifest_sha256 == chain.refs["data_manifest"].sha256
    assert approved.summary.records == 25 and approved.summary.shards == 3
    # The 6 bound documents, 3 shards and the descriptor pack (one object holding the 3 descriptors)
    # hashed, with progress up to all of them: the bar counts what the summary counts.
    assert seen and seen[-1].files_done == seen[-1].files_total == approved.summary.files_hashed == 6 + 3 + 1
    assert seen[-1].bytes_done == seen[-1].bytes_total


def test_request_as_json_bytes_and_missing_binding(chain: Any) -> None:
    vault = chain.vault
    assert vault.approve_dataset(chain.request().to_json_bytes()).summary.shards == 4
    obj = json.loads(chain.request().to_json_bytes())
    del obj["producer_pins"]
    denied(vault, obj, "producer_pins")


# -- data changed after it was scanned ------------------------------------------------------------


def test_swapped_shard_of_the_same_size(chain: Any) -> None:
    uri = shard_uri(chain, "easy/s1")
    size = chain.vault.storage.head(uri).size
    flip_byte(chain.vault, uri, size // 2)
    assert chain.vault.storage.head(uri).size == size
    denied(chain.vault, chain.request(), r"easy/s1.*changed after it was scanned")


def test_two_shards_exchanged(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    # Equal-sized shards: the same records in another order give another shard of one size.
    vault = TrainVault()
    chain = build_chain(vault, str(tmp_path), shards=3, records_per_shard=30)
    a, b = shard_uri(chain, "easy/s0"), shard_uri(chain, "easy/s1")
    da, db = vault.storage.get(a), vault.storage.get(b)
    vault.storage.put(a, db)
    vault.storage.put(b, da)
    denied(vault, chain.request(), "changed after it was scanned")


@pytest.mark.parametrize("change", ["truncate", "extend"])
def test_truncated_and_extended_shards(chain: Any, change: str) -> None:
    uri = shard_uri(chain, "hard/s2")
    data = chain.vault.storage.get(uri)
    chain.vault.storage.put(uri, data[:-7] if change == "truncate" else data + b"\0" * 7)
    denied(chain.vault, chain.request(), r"hard/s2.*(truncated or extended)")


def test_manifest_edited_in_place(chain: Any) -> None:
    raw = json.loads(chain.vault.storage.get(chain.manifest_uri))
    raw["splits"]["valid"]["shards"].pop()
    chain.vault.storage.put(chain.manifest_uri, json.dumps(raw).encode())
    denied(chain.vault, chain.request(), "data_manifest .* has sha256 .* the request binds")


def test_manifest_edited_and_rebound(chain: Any) -> None:
    # An edited manifest bound by its new digest: the scan manifest and report judged the old one.
    raw = json.loads(chain.vault.storage.get(chain.manifest_uri))
    raw["splits"]["valid"]["shards"].pop()
    from trainvault.canonical import canonical_json

    ref = chain.put_raw("../ds/data-manifest-edited.json", canonical_json(raw))
    denied(chain.vault, chain.request(data_manifest=ref), "training_scan_manifest was made for data manifest")


def test_descriptor_edited(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    # A manifest written before descriptor packs binds each descriptor object itself.
    chain = build_chain(TrainVault(), str(tmp_path), packed=False)
    manifest = chain.vault.load_manifest(chain.manifest_uri)
    assert manifest.descriptor_pack is None
    desc = manifest.splits["train"].shard("easy/s0").descriptor_uri
    flip_byte(chain.vault, desc, 10)
    denied(chain.vault, chain.request(), r"descriptor .*changed after it was scanned")


def test_unpacked_manifest_is_approved_and_loads(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), packed=False)
    approved = chain.vault.approve_dataset(chain.request())
    # 4 shards and their 4 descriptors hashed, one by one.
    assert approved.summary.files_hashed == 8 + len(chain.refs)
    got = [r for batch in approved.loader_factory(collate_fn=list).load("train") for r in batch]
    assert got == [r for k in ("s0", "s1", "s2") for r in chain.records[k]]


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "swap"])
def test_descriptor_pack_damaged_is_refused(chain: Any, damage: str) -> None:
    pack = chain.vault.load_manifest(chain.manifest_uri).descriptor_pack
    assert pack is not None
    data = chain.vault.storage.get(pack.uri)
    if damage == "flip":
        flip_byte(chain.vault, pack.uri, len(data) // 2)
    elif damage == "truncate":
        chain.vault.storage.put(pack.uri, data[:-7])
    elif damage == "delete":
        chain.vault.storage.delete(pack.uri)
    else:  # a canonical pack of the same size whose descriptor disagrees with the manifest
        changed = data.replace(b'"zstd_level":3', b'"zstd_level":4', 1)
        assert changed != data and len(changed) == len(data)
        chain.vault.storage.put(pack.uri, changed)
    assert chain.vault.storage.exists(pack.uri) == (damage != "delete")
    # The gate reads the pack first, checked against the manifest's binding, for the re-scan's
    # descriptors: a changed pack is refused there, before the hash pass.
    what = {
        "flip": "altered after publication",
        "truncate": "truncated",
        "delete": "is missing",
        "swap": "altered after publication",
    }[damage]
    denied(chain.vault, chain.request(), rf"descriptor-packs/{pack.sha256}\.json.*({what})")


def test_loose_descriptor_is_not_read_by_the_gate(chain: Any) -> None:
    # With a pack, the gate binds each descriptor through the pack's copy (checked against the
    # manifest's descriptor_sha256): the loose descriptor objects are never fetched.
    manifest = chain.vault.load_manifest(chain.manifest_uri)
    for _, split in manifest.splits.items():
        for entry in split.shards:
            chain.vault.storage.delete(entry.descriptor_uri)
    approved = chain.vault.approve_dataset(chain.request())
    assert approved.summary.files_hashed == 4 + 1 + len(chain.refs)
    got = [r for batch in approved.loader_factory(collate_fn=list).load("train") for r in batch]
    assert got == [r for k in ("s0", "s1", "s2") for r in chain.records[k]]


def test_scan_manifest_missing_a_file(chain: Any) -> None:
    scan = build_training_scan_manifest(chain.vault, chain.manifest_uri)
    files = [f for f in scan.files if not f.uri.endswith("s1.msgpack.zst")]
    from trainvault.approval.scan_manifest import ScanTotals, TrainingScanManifest

    t = scan.totals
    partial = TrainingScanManifest(
        data_manifest_sha256=scan.data_manifest_sha256,
        files=files,
        totals=ScanTotals(
            files=len(files),
            file_bytes=sum(f.size_bytes for f in files),
            shards=t.shards,
            records=t.records,
            shard_bytes=t.shard_bytes,
        ),
    )
    ref = chain.publish("scan-partial.json", partial)
    _, report = chain.rescan("report-partial.json", scan_sha256=ref.sha256)
    denied(chain.vault, chain.request(training_scan_manifest=ref, contamination_report=report), "never scanned")


# -- reports for something else --------------------------------------------------------------------


def test_report_for_other_data(build_chain: Callable[..., Any], chain: Any, tmp_path: Path) -> None:
    other = build_chain(chain.vault, str(tmp_path / "other"), seed_offset=7)
    denied(chain.vault, chain.request(contamination_report=other.refs["contamination_report"]), "report for other data")


def test_report_for_another_evaluation_release(eval_items: list[dict[str, str]], chain: Any) -> None:
    vault = chain.vault
    items = b"".join(
        json.dumps({"id": f"x{i}", "text": eval_items[i]["text"] + " zulu"}).encode() + b"\n" for i in range(3)
    )
    release = publish_release(vault.storage, f"{chain.root}/release2", "evals-other", [jsonl_benchmark("other", items)])
    index = load_index(vault, release, chain.refs["verifier_contract"])
    _, report = chain.rescan("report-other-release.json", index=index)
    denied(vault, chain.request(contamination_report=report), "another evaluation release")
    # Binding that release too passes the chain, but not a trainer who evaluates on the first one.
    rebound = chain.request(
        contamination_report=report, evaluation_release=ObjectRef(uri=release.uri, sha256=release.sha256)
    )
    assert vault.approve_dataset(rebound)
    denied(
        vault,
        rebound,
        "not the release this trainer evaluates on",
        policy=ApprovalPolicy(evaluation_release_sha256=chain.refs["evaluation_release"].sha256),
    )


def test_forged_pass_flag(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), contaminate=True)
    report = chain.extra["report"]
    assert report.passed is False and report.contaminated_items
    denied(chain.vault, chain.request(), "fails under the contract's policy")
    forged = report.model_copy(
        update={"passed": True, "benchmarks": [b.model_copy(update={"passed": True}) for b in report.benchmarks]}
    )
    ref = chain.publish("report-forged.json", forged)
    denied(chain.vault, chain.request(contamination_report=ref), r"tiny: 1 of 4 checkable items contaminated")


def test_loosened_policy(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), contaminate=True)
    report = chain.extra["report"]
    loose = BenchmarkLimits(max_contaminated_fraction={"*": [1, 1]})
    # The report's policy loosened after the scan, verdict rewritten to match.
    edited = report.model_copy(
        update={
            "policy": loose,
            "passed": True,
            "benchmarks": [b.model_copy(update={"passed": True}) for b in report.benchmarks],
        }
    )
    ref = chain.publish("report-loose.json", edited)
    denied(chain.vault, chain.request(contamination_report=ref), "policy differs from the bound verifier contract")
    # A loosened contract and an honest scan under it: refused unless the trainer accepts that policy.
    contract = chain.publish("contract-loose.json", VerifierContract(policy=loose))
    index = load_index(chain.vault, chain.refs["evaluation_release"], contract)
    _, report_ref = chain.rescan("report-under-loose.json", index=index)
    request = chain.request(verifier_contract=contract, contamination_report=report_ref)
    denied(chain.vault, request, "looser than the accepted")
    assert chain.vault.approve_dataset(request, policy=ApprovalPolicy(min_policy=loose))


def test_a_floor_that_counts_uncounted_matches_refuses_a_contract_that_does_not(
    build_chain: Callable[..., Any], tmp_path: Path
) -> None:
    counting = ApprovalPolicy(min_policy=BenchmarkLimits(count_uncounted=True))
    chain = build_chain(TrainVault(), str(tmp_path / "v3"))  # the default contract: an evidence rule
    denied(chain.vault, chain.request(), "count_uncounted false", policy=counting)
    assert chain.vault.approve_dataset(chain.request(), policy=ApprovalPolicy())
    # Without an evidence rule every match counts: such a contract meets the floor.
    v2 = build_chain(TrainVault(), str(tmp_path / "v2"), contract=V2_CONTRACT)
    assert v2.vault.approve_dataset(v2.request(), policy=counting)


def test_contract_pin(chain: Any) -> None:
    denied(
        chain.vault,
        chain.request(),
        "not the contract this trainer pins",
        policy=ApprovalPolicy(verifier_contract_sha256="0" * 64),
    )


# -- producer pins ---------------------------------------------------------------------------------


def test_stale_producer_pins(chain: Any) -> None:
    stale = ProducerPins(packages=[PackagePin(name="trainvault", version="0.0.1")], python="3.11")
    pins = chain.publish_pins("pins-stale.json", stale)
    _, report = chain.rescan("report-stale-pins.json", pins_sha256=pins.sha256)
    denied(chain.vault, chain.request(producer_pins=pins, contamination_report=report), "stale pins")


def test_unknown_and_revoked_producers(chain: Any) -> None:
    denied(
        chain.vault,
        chain.request(),
        "not an allowed version",
        policy=ApprovalPolicy(allowed_producers={"trainvault": {"9.9.9"}}),
    )
    denied(
        chain.vault,
        chain.request(),
        "not in the trainer's allowlist",
        policy=ApprovalPolicy(allowed_producers={"pydantic": {"2"}}),
    )
    assert chain.vault.approve_dataset(
        chain.request(), policy=ApprovalPolicy(allowed_producers={"trainvault": {__version__}})
    )


def test_pins_the_report_did_not_judge(chain: Any) -> None:
    other = ProducerPins(packages=[PackagePin(name="trainvault", version=__version__)], python="3.99")
    pins = chain.publish_pins("pins-other.json", other)
    denied(chain.vault, chain.request(producer_pins=pins), "other producer pins")


def test_report_without_producer_pin_binding(chain: Any) -> None:
    obj = json.loads(chain.vault.storage.get(chain.refs["contamination_report"].uri))
    del obj["producer_pins"]
    from trainvault.canonical import canonical_json

    ref = chain.put_raw("report-no-pins.json", canonical_json(obj))
    denied(
        chain.vault, chain.request(contamination_report=ref), r"contamination_report is not a readable.*producer_pins"
    )


# -- paths -------------------------------------------------------------------------------------------


def test_manifest_uri_escaping_the_dataset_root(chain: Any) -> None:
    vault = chain.vault
    # A copy elsewhere keeps absolute URIs to the original shards: outside its own root.
    copy_uri = f"{chain.root}/copy/data-manifest-v1.json"
    vault.save_manifest(copy_uri, vault.load_manifest(chain.manifest_uri))
    from trainvault.canonical import sha256_hex

    ref = ObjectRef(uri=copy_uri, sha256=sha256_hex(vault.storage.get(copy_uri)))
    denied(vault, chain.request(data_manifest=ref), "escapes the root .*copy")
    # A relative URI with '..' is refused the same way.
    raw = json.loads(vault.storage.get(chain.manifest_uri))
    raw["splits"]["valid"]["shards"][0]["uri"] = "../release/items/tiny.jsonl"
    from trainvault.canonical import canonical_json

    ref = chain.put_raw("../ds/data-manifest-escape.json", canonical_json(raw))
    denied(vault, chain.request(data_manifest=ref), r"\.\.")


def test_replaced_bound_document(chain: Any) -> None:
    vault = chain.vault
    uri = chain.refs["verifier_contract"].uri
    vault.storage.put(uri, VerifierContract(max_hits_per_item=5).to_json_bytes())
    denied(vault, chain.request(), "verifier_contract .* has sha256")


def test_missing_object_is_a_denial(chain: Any) -> None:
    chain.vault.storage.delete(shard_uri(chain, "easy/s0"))
    denied(chain.vault, chain.request(), "does not exist")


def test_unknown_document_version(chain: Any) -> None:
    obj = json.loads(chain.vault.storage.get(chain.refs["producer_pins"].uri))
    obj["version"] = 2
    from trainvault.canonical import canonical_json

    ref = chain.put_raw("pins-v2.json", canonical_json(obj))
    denied(chain.vault, chain.request(producer_pins=ref), "upgrade trainvault")
