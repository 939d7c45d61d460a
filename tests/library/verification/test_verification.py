"""The lifecycle's fused verification pass on a real local store: one read per shard serves
the scan, the profile and the field survey; results stored by content are reused without a
read and refused when damaged; the scan manifest and the gate's re-scan read no shard again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import TrainVault
from trainvault.approval import SigningKey, build_training_scan_manifest
from trainvault.cards.fields import survey_fields
from trainvault.contamination.scan import scan_shard
from trainvault.errors import ConfigurationError, IntegrityError
from trainvault.profile import profile_publication
from trainvault.publication.pinned import Publication
from trainvault.storage.reads import READS
from trainvault.verification import (
    profile_from_surveys,
    shard_field_surveys,
    stored_survey,
    stored_verification,
    verify_shard,
)
from trainvault.verification.fused import survey_key
from trainvault.verification.results import key_uri

#: The key the verification pass signs its stored results with.
SCANNER = SigningKey.generate()
#: build_chain keeps each shard's records by shard id, the valid shard's as "valid".
RECORDS_OF = {"v0": "valid"}


@pytest.fixture
def chain(build_chain: Callable[..., Any], tmp_path: Path) -> Any:
    return build_chain(TrainVault(), str(tmp_path), shards=3, records_per_shard=40, contaminate=True)


def entries(chain: Any) -> list[tuple[str, Any]]:
    manifest = Publication.load(chain.vault.storage, chain.manifest_uri).manifest
    return [(split, e) for split, sm in manifest.splits.items() for e in sm.shards]


def test_one_read_serves_scan_profile_and_survey_and_a_second_pass_reads_nothing(chain, tmp_path) -> None:
    storage, folder = chain.vault.storage, str(tmp_path / "results")
    shards = entries(chain)
    before = READS.snapshot()
    first = {
        e.key: verify_shard(storage, folder, "msgpack.zst", split, e, chain.index, signing_key=SCANNER)
        for split, e in shards
    }
    assert (READS.snapshot() - before).streamed == sum(e.size_bytes for _, e in shards)
    assert all(v.read for v in first.values())
    for _, e in shards:  # the scan is scan_shard's
        assert first[e.key].scan == scan_shard(storage, "msgpack.zst", e, chain.index)
    assert any(v.scan.items for v in first.values())  # the contaminated shard's hit is there
    before = READS.snapshot()
    again = {
        e.key: verify_shard(storage, folder, "msgpack.zst", split, e, chain.index, signing_key=SCANNER)
        for split, e in shards
    }
    assert (READS.snapshot() - before).streamed == 0 and not any(v.read for v in again.values())
    assert {k: v.scan for k, v in again.items()} == {k: v.scan for k, v in first.items()}

    by_split: dict[str, list] = {}
    for split, e in shards:
        by_split.setdefault(split, []).append(
            (e, stored_survey(storage, folder, "msgpack.zst", e, scanner_key=SCANNER.public_key))
        )
    merged = profile_from_surveys(chain.manifest_uri, chain.refs["data_manifest"].sha256, by_split)
    read = profile_publication(storage, chain.manifest_uri, raise_on_invalid=False)
    assert merged.sidecars() == read.sidecars()
    surveys = shard_field_surveys(by_split)
    for split in by_split:
        for e, _ in by_split[split]:
            want, count = survey_fields(chain.records[RECORDS_OF.get(e.shard_id, e.shard_id)])
            got, got_count = surveys[split][e.key]
            assert got_count == count and [s.state() for s in got] == [s.state() for s in want]


def test_stored_verification_finds_what_verify_shard_reuses_without_the_index(chain, tmp_path) -> None:
    storage, folder = chain.vault.storage, str(tmp_path / "results")
    split, entry = entries(chain)[0]
    digests = {"release_sha256": chain.index.release_sha256, "contract_sha256": chain.index.contract_sha256}
    assert (
        stored_verification(storage, folder, "msgpack.zst", entry, **digests, scanner_key=SCANNER.public_key).verified
        is None
    )
    made = verify_shard(storage, folder, "msgpack.zst", split, entry, chain.index, signing_key=SCANNER)
    before = READS.snapshot()
    found = stored_verification(
        storage, folder, "msgpack.zst", entry, **digests, scanner_key=SCANNER.public_key
    ).verified
    assert (READS.snapshot() - before).streamed == 0
    assert found is not None and not found.read
    assert (found.scan, found.survey) == (made.scan, made.survey)
    # Results stored under another release are not this one's.
    other = {**digests, "release_sha256": "0" * 64}
    assert (
        stored_verification(storage, folder, "msgpack.zst", entry, **other, scanner_key=SCANNER.public_key).verified
        is None
    )


def test_a_shard_verified_after_its_lookup_is_read_once_and_its_results_not_looked_up_again(chain, tmp_path) -> None:
    storage, folder = chain.vault.storage, str(tmp_path / "results")
    split, entry = entries(chain)[0]
    digests = {"release_sha256": chain.index.release_sha256, "contract_sha256": chain.index.contract_sha256}
    made = verify_shard(storage, folder, "msgpack.zst", split, entry, chain.index, signing_key=SCANNER)
    survey_path = Path(
        key_uri(folder, "survey", survey_key(entry, "msgpack.zst"), SCANNER.public_key).removeprefix("file://")
    )

    def reverify(**lookup: Any) -> tuple[Any, Any]:
        """The survey lost, the scan kept: the shard is read again, for the survey."""
        survey_path.unlink(missing_ok=True)
        before = READS.snapshot()
        verified = verify_shard(
            storage, folder, "msgpack.zst", split, entry, chain.index, signing_key=SCANNER, **lookup
        )
        return verified, READS.snapshot() - before

    _, looked_up_inside = reverify()
    survey_path.unlink()
    stored = stored_verification(storage, folder, "msgpack.zst", entry, **digests, scanner_key=SCANNER.public_key)
    assert stored.scan is not None and stored.survey is None and stored.verified is None
    again, handed = reverify(stored=stored)
    # The same stream, and the stored scan not fetched a second time (READS counts what reads
    # return: the absent survey's lookup returns nothing either way).
    assert handed.streamed == looked_up_inside.streamed == entry.size_bytes
    scan_path = Path(stored.scan_uri.removeprefix("file://"))
    assert looked_up_inside.requests - handed.requests == 1
    assert looked_up_inside.bytes - handed.bytes == scan_path.stat().st_size
    assert again.read and (again.scan, again.survey) == (made.scan, made.survey)
    assert stored_survey(storage, folder, "msgpack.zst", entry, scanner_key=SCANNER.public_key) == made.survey
    # A lookup made under another release is refused, not trusted for this index.
    other = stored_verification(
        storage, folder, "msgpack.zst", entry, **{**digests, "release_sha256": "0" * 64}, scanner_key=SCANNER.public_key
    )
    with pytest.raises(ConfigurationError, match="for another shard, release, contract or scanner key than"):
        verify_shard(storage, folder, "msgpack.zst", split, entry, chain.index, signing_key=SCANNER, stored=other)
    # So is one made under another scanner's key: its results are not this signer's to reuse.
    theirs = stored_verification(storage, folder, "msgpack.zst", entry, **digests, scanner_key=SigningKey.generate())
    with pytest.raises(ConfigurationError, match="for another shard, release, contract or scanner key than"):
        verify_shard(storage, folder, "msgpack.zst", split, entry, chain.index, signing_key=SCANNER, stored=theirs)


def test_a_damaged_or_misnamed_stored_result_is_recomputed_and_replaced_where_no_one_can_recompute_refused(
    chain, tmp_path, caplog
) -> None:
    storage, folder = chain.vault.storage, str(tmp_path / "results")
    (split, a), (_, b) = entries(chain)[:2]
    made = verify_shard(storage, folder, "msgpack.zst", split, a, chain.index, signing_key=SCANNER)
    verify_shard(storage, folder, "msgpack.zst", split, b, chain.index, signing_key=SCANNER)
    survey_a, survey_b = (
        Path(key_uri(folder, "survey", survey_key(e, "msgpack.zst"), SCANNER.public_key).removeprefix("file://"))
        for e in (a, b)
    )
    original = survey_a.read_bytes()
    survey_a.write_bytes(b"{not json")
    # A reader that cannot recompute (the profile, the card) refuses it, naming it.
    with pytest.raises(IntegrityError, match=f"no trusted stored survey at .*{survey_a.name}.*not authenticated"):
        stored_survey(storage, folder, "msgpack.zst", a, scanner_key=SCANNER.public_key)
    with caplog.at_level("WARNING", logger="trainvault.verification"):
        again = verify_shard(storage, folder, "msgpack.zst", split, a, chain.index, signing_key=SCANNER)
    assert f"{survey_a.name}: stored per-shard result not trusted, not reused" in caplog.text
    assert again.read and again.survey == made.survey and survey_a.read_bytes() == original  # replaced
    survey_a.write_bytes(survey_b.read_bytes())  # b's result, signed, under a's name
    with pytest.raises(IntegrityError, match="signed for another key than its name says"):
        stored_survey(storage, folder, "msgpack.zst", a, scanner_key=SCANNER.public_key)
    survey_a.write_bytes(original)
    assert (
        stored_survey(storage, folder, "msgpack.zst", a, scanner_key=SCANNER.public_key).key.shard.shard_sha256
        == a.sha256
    )


def test_a_changed_shard_yields_no_result(chain, tmp_path) -> None:
    storage, folder = chain.vault.storage, str(tmp_path / "results")
    split, entry = entries(chain)[0]
    path = Path(entry.uri.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        verify_shard(storage, folder, "msgpack.zst", split, entry, chain.index, signing_key=SCANNER)
    assert not Path(folder).exists() or not any(Path(folder).iterdir())
    with pytest.raises(IntegrityError, match=r"no trusted stored survey at .* \(none is stored\)"):
        stored_survey(storage, folder, "msgpack.zst", entry, scanner_key=SCANNER.public_key)


def test_the_scan_manifest_lists_verified_shards_without_reading_them(chain) -> None:
    shards = {e.uri for _, e in entries(chain)}
    before = READS.snapshot()
    full = build_training_scan_manifest(chain.vault, chain.manifest_uri)
    streamed_full = (READS.snapshot() - before).streamed
    before = READS.snapshot()
    listed = build_training_scan_manifest(chain.vault, chain.manifest_uri, verified=shards)
    streamed = (READS.snapshot() - before).streamed
    assert listed == full
    assert streamed_full - streamed == sum(e.size_bytes for _, e in entries(chain))


def test_the_gate_rescans_from_its_hash_pass_reading_each_shard_once(build_chain: Callable[..., Any], tmp_path) -> None:
    from trainvault.approval import ApprovalPolicy

    clean = build_chain(TrainVault(), str(tmp_path), shards=3, records_per_shard=40)
    shard_bytes = sum(e.size_bytes for _, e in entries(clean))
    before = READS.snapshot()
    approved = clean.vault.approve_dataset(clean.request(), policy=ApprovalPolicy())  # no scanner keys: every shard
    assert (READS.snapshot() - before).streamed == shard_bytes
    assert approved.summary.shards == len(entries(clean)) and approved.summary.files_hashed > len(entries(clean))


def test_the_croissant_card_from_stored_surveys_is_the_card_that_reads_every_record(
    build_chain: Callable[..., Any], tmp_path
) -> None:
    from trainvault.approval import SigningKey, with_record, write_approval
    from trainvault.cards.croissant import croissant_card

    clean = build_chain(TrainVault(), str(tmp_path), shards=3, records_per_shard=40)
    storage, folder = clean.vault.storage, str(tmp_path / "results")
    by_split: dict[str, list] = {}
    for split, e in entries(clean):
        verify_shard(storage, folder, "msgpack.zst", split, e, clean.index, signing_key=SCANNER)
        by_split.setdefault(split, []).append(
            (e, stored_survey(storage, folder, "msgpack.zst", e, scanner_key=SCANNER.public_key))
        )
    key = SigningKey.generate()
    approved = clean.vault.approve_dataset(clean.request())
    record = write_approval(clean.vault, f"{clean.root}/approval.json", approved, signing_keys=[key])
    opened = with_record(clean.vault, approved, record.uri, record.sha256, trusted_keys=[key.public_key])
    surveys = shard_field_surveys(by_split)
    before = READS.snapshot()
    card = croissant_card(clean.vault, opened, surveys=surveys)
    assert (READS.snapshot() - before).streamed == 0  # no shard read
    assert card == croissant_card(clean.vault, opened)
    (key_, (fields, records)) = next(iter(surveys["train"].items()))
    short = {**surveys, "train": {**surveys["train"], key_: (fields, records - 1)}}
    with pytest.raises(
        IntegrityError, match=f"shard train/{key_}: the field survey given counts {records - 1} records"
    ):
        croissant_card(clean.vault, opened, surveys=short)


def test_a_card_with_exclusions_reads_only_the_shards_it_copies(chain, tmp_path) -> None:
    from trainvault.approval import ApprovalPolicy, SigningKey, write_approval
    from trainvault.cards.croissant import croissant_card
    from trainvault.contamination import exclusions_from_report

    storage, folder = chain.vault.storage, str(tmp_path / "results")
    by_split: dict[str, list] = {}
    for split, e in entries(chain):
        verify_shard(storage, folder, "msgpack.zst", split, e, chain.index, signing_key=SCANNER)
        by_split.setdefault(split, []).append(
            (e, stored_survey(storage, folder, "msgpack.zst", e, scanner_key=SCANNER.public_key))
        )
    report_sha256 = chain.refs["contamination_report"].sha256
    exclusions = exclusions_from_report(chain.extra["report"], report_sha256=report_sha256)
    affected = {(r.split, r.shard) for r in exclusions.records}
    allow = ApprovalPolicy(allow_exclusions=True, max_excluded_fraction=(1, 2))
    approved = chain.vault.approve_dataset(chain.with_exclusions(exclusions), policy=allow)
    key = SigningKey.generate()
    record = write_approval(chain.vault, f"{chain.root}/approval.json", approved, signing_keys=[key])
    opened = chain.vault.open_approved(record.uri, record.sha256, trusted_keys=[key.public_key], policy=allow)
    copied = [e for split, e in entries(chain) if (split, e.key) in affected]
    assert copied and len(copied) < len(entries(chain))
    before = READS.snapshot()
    card = croissant_card(chain.vault, opened, surveys=shard_field_surveys(by_split))
    # Each shard with excluded records read once, for its clean copy and its survey; no other shard.
    read = READS.snapshot() - before
    assert read.streamed == sum(e.size_bytes for e in copied)
    assert card == croissant_card(chain.vault, opened)  # the card that surveys every approved record
