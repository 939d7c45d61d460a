"""DatasetSaver on real stores: publication layout, restart, crashes, curricula, bad input."""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from trainvault import (
    ConflictError,
    DataManifest,
    EncodeError,
    IntegrityError,
    InvalidNameError,
    ManifestError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    TrainVault,
    iter_shard,
)
from trainvault.canonical import sha256_hex
from trainvault.publication.saver import DatasetSaver
from trainvault.storage import StorageConfig
from trainvault.uris import join_uri, normalize_uri

#: This folder: where the fresh interpreter below finds test_saver.
HERE = Path(__file__).resolve().parent


def records_for(split: str, stage: str | None, shard_id: str, n: int = 20) -> list[dict]:
    rng = random.Random(f"{split}/{stage}/{shard_id}")  # deterministic per shard
    return [
        {"id": f"{split}-{stage}-{shard_id}-{i}", "text": " ".join(str(rng.random()) for _ in range(8)), "n": i}
        for i in range(n)
    ]


def untouchable() -> Iterator[dict]:
    raise AssertionError("records were consumed although the shard is complete")
    yield {}  # pragma: no cover


def manifest_uri(root: str) -> str:
    return join_uri(root, "data-manifest-v1.json")


def list_keys(vault: TrainVault, root: str) -> list[str]:
    root = normalize_uri(root)
    return [o.uri[len(root) + 1 :] for o in vault.storage.list(root)]


def test_publication_layout_and_manifest_fields(vault_root: tuple[TrainVault, str]) -> None:
    vault, root = vault_root
    saver = vault.dataset_saver(manifest_uri(root), block_bytes=256)
    a = saver.save("train", "easy", records_for("train", "easy", "0"), curriculum_metadata={"w": 1}, shard_id="0")
    saver.save("train", "easy", records_for("train", "easy", "1"), curriculum_metadata={"w": 1}, shard_id="1")
    saver.save("train", None, records_for("train", None, "x"), shard_id="x")
    saver.save("valid", None, records_for("valid", None, "0"), shard_id="0")
    manifest = saver.commit_manifest().document
    pack = manifest.descriptor_pack
    assert pack is not None and pack.uri == join_uri(root, "descriptor-packs", f"{pack.sha256}.json")
    assert sha256_hex(vault.storage.get(pack.uri)) == pack.sha256 and pack.size == len(vault.storage.get(pack.uri))

    assert sorted(list_keys(vault, root)) == sorted(
        [
            "data-manifest-v1.json",
            f"descriptor-packs/{pack.sha256}.json",
            "shards/train/easy/0.msgpack.zst",
            "shards/train/easy/0.complete.json",
            "shards/train/easy/1.msgpack.zst",
            "shards/train/easy/1.complete.json",
            "shards/train/_/x.msgpack.zst",
            "shards/train/_/x.complete.json",
            "shards/valid/_/0.msgpack.zst",
            "shards/valid/_/0.complete.json",
        ]
    )
    raw = json.loads(vault.storage.get(manifest_uri(root)))
    assert set(raw) == {"format", "version", "data_format", "splits", "descriptor_pack"}
    assert raw["descriptor_pack"] == {"uri": pack.uri, "sha256": pack.sha256, "size": pack.size}
    assert raw["data_format"] == "msgpack.zst" and raw["version"] == 1
    entry = raw["splits"]["train"]["shards"][1]
    assert set(entry) == {
        "key",
        "curriculum_stage",
        "shard_id",
        "uri",
        "size_bytes",
        "sha256",
        "record_count",
        "descriptor_uri",
        "descriptor_sha256",
    }
    assert [s["key"] for s in raw["splits"]["train"]["shards"]] == ["_/x", "easy/0", "easy/1"]
    assert raw["splits"]["train"]["curricula"] == {"easy": {"shards": ["easy/0", "easy/1"], "metadata": {"w": 1}}}
    assert "time" not in json.dumps(raw)
    # Canonical JSON on storage: sorted keys, no whitespace.
    assert vault.storage.get(manifest_uri(root)) == manifest.to_json_bytes()

    loaded = vault.load_manifest(manifest_uri(root))
    assert loaded == manifest
    got = list(iter_shard(loaded.data_format, loaded.splits["train"].shard("easy/0"), storage=vault.storage))
    assert got == records_for("train", "easy", "0")
    assert a == loaded.splits["train"].shard("easy/0")
    desc = json.loads(vault.storage.get(a.descriptor_uri))
    assert desc["record_count"] == 20 and len(desc["blocks"]) > 1 and desc["producer"]["library"] == "trainvault"


@pytest.mark.parametrize("data_format", ["msgpack.zst", "jsonl.gz", "parquet"])
def test_each_format_round_trips_through_the_saver(tmp_path, data_format: str) -> None:
    vault = TrainVault()
    saver = vault.dataset_saver(str(tmp_path / "m.json"), data_format=data_format, block_bytes=300)
    saver.save("train", None, records_for("train", None, "0", n=50), shard_id="0")
    manifest = saver.commit_manifest().document
    shard = manifest.splits["train"].shards[0]
    assert shard.uri.endswith(f"0.{data_format}")
    assert list(iter_shard(data_format, shard)) == records_for("train", None, "0", n=50)


def test_commit_is_idempotent_and_a_different_publication_conflicts(vault_root) -> None:
    vault, root = vault_root
    saver = vault.dataset_saver(manifest_uri(root))
    saver.save("train", None, records_for("train", None, "0"), shard_id="0")
    first = saver.commit_manifest().document
    assert saver.commit_manifest().document == first
    # A fresh process (a new saver) committing the same publication: still idempotent.
    assert vault.dataset_saver(manifest_uri(root)).commit_manifest().document == first

    saver.save("train", None, records_for("train", None, "1"), shard_id="1")
    with pytest.raises(ConflictError, match="different publication"):
        saver.commit_manifest()
    assert vault.load_manifest(manifest_uri(root)) == first


def test_restarted_saver_reuses_complete_shard_without_touching_records(vault_root) -> None:
    vault, root = vault_root
    first = vault.dataset_saver(manifest_uri(root)).save(
        "train", "easy", records_for("train", "easy", "0"), curriculum_metadata={"k": 1}, shard_id="0"
    )
    restarted = pickle.loads(pickle.dumps(vault.dataset_saver(manifest_uri(root))))
    again = restarted.save("train", "easy", untouchable(), curriculum_metadata={"k": 1}, shard_id="0")
    assert again == first
    assert restarted.recover("train", "easy", shard_id="0") == first
    with pytest.raises(ConflictError, match="curriculum_metadata"):
        restarted.save("train", "easy", untouchable(), curriculum_metadata={"k": 2}, shard_id="0")


def test_crash_between_data_and_descriptor(vault_root) -> None:
    vault, root = vault_root
    saver = vault.dataset_saver(manifest_uri(root))
    entry = saver.save("train", None, records_for("train", None, "0"), shard_id="0")
    # Simulate the crash: the data object landed, the descriptor did not.
    vault.storage.delete(entry.descriptor_uri)
    with pytest.raises(ManifestError, match="belong to no complete shard"):
        saver.commit_manifest()
    assert not vault.storage.exists(manifest_uri(root))
    with pytest.raises(ObjectNotFoundError, match="no completion descriptor"):
        saver.recover("train", None, shard_id="0")

    # Re-deriving different bytes is refused, naming the shard.
    with pytest.raises(ConflictError, match=r"shard train/_/0 is not deterministic"):
        vault.dataset_saver(manifest_uri(root)).save("train", None, records_for("train", None, "other"), shard_id="0")
    assert not vault.storage.exists(entry.descriptor_uri)

    # Identical bytes complete it.
    redone = vault.dataset_saver(manifest_uri(root)).save("train", None, records_for("train", None, "0"), shard_id="0")
    assert redone == entry
    assert saver.commit_manifest().document.splits["train"].shards == [entry]


def test_altered_data_object_is_detected_on_reuse(tmp_path) -> None:
    vault = TrainVault()
    saver = vault.dataset_saver(str(tmp_path / "ds" / "data-manifest-v1.json"))
    entry = saver.save("train", None, records_for("train", None, "0"), shard_id="0")
    path = tmp_path / "ds" / "shards" / "train" / "_" / "0.msgpack.zst"
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="does not match its completion descriptor"):
        saver.save("train", None, untouchable(), shard_id="0")
    with pytest.raises(IntegrityError):
        list(iter_shard("msgpack.zst", entry))


def test_a_saver_that_does_not_rehash_reuses_by_size_reads_no_shard_byte_and_says_what_it_wrote(vault_root) -> None:
    from trainvault.storage.reads import READS

    vault, root = vault_root
    first_saver = vault.dataset_saver(manifest_uri(root))
    first = first_saver.save("train", None, records_for("train", None, "0"), shard_id="0")
    assert first_saver.wrote("train", "_/0")
    saver = vault.dataset_saver(manifest_uri(root), rehash_reused=False)
    before = READS.snapshot()
    assert saver.save("train", None, untouchable(), shard_id="0") == first
    assert saver.recover("train", None, shard_id="0") == first
    read = READS.snapshot() - before
    # The descriptor twice (save, recover) and a head of the data object each time: no shard byte.
    assert read.bytes == 2 * len(vault.storage.get(first.descriptor_uri)) and read.requests == 4
    assert not saver.wrote("train", "_/0")
    # A data object of another size is refused by either; same-size changes are the verification pass's and the gate's.
    vault.storage.delete(first.uri)
    vault.storage.put_create(first.uri, b"short")
    with pytest.raises(IntegrityError, match="5 bytes, its completion descriptor says"):
        saver.save("train", None, untouchable(), shard_id="0")
    with pytest.raises(IntegrityError, match="5 bytes, its completion descriptor says"):
        saver.recover("train", None, shard_id="0")


def test_register_curriculum_rules(vault_root) -> None:
    vault, root = vault_root
    saver = vault.dataset_saver(manifest_uri(root))
    first = saver.save("train", None, records_for("train", None, "d1"), shard_id="delta-001")
    second = saver.save("train", None, records_for("train", None, "d2"), shard_id="delta-002")
    staged = saver.save("train", "easy", records_for("train", "easy", "0"), shard_id="0")
    other_split = saver.save("valid", None, records_for("valid", None, "0"), shard_id="0")

    saver.register_curriculum("train", "small", [first])
    saver.register_curriculum("train", "large", [second, first], curriculum_metadata={"order": "reversed"})
    saver.register_curriculum("train", "small", [first])  # idempotent
    saver.register_curriculum(
        "train", "large", ["_/delta-002", "_/delta-001"], curriculum_metadata={"order": "reversed"}
    )

    with pytest.raises(ConflictError, match="already registered"):
        saver.register_curriculum("train", "small", [first, second])
    with pytest.raises(ManifestError, match="listed twice"):
        saver.register_curriculum("train", "dup", [first, first])
    with pytest.raises(ManifestError, match="not saved or recovered"):
        saver.register_curriculum("train", "bad", ["_/nope"])
    with pytest.raises(ManifestError, match="not saved or recovered"):
        saver.register_curriculum("train", "cross", [other_split])  # a valid-split shard in train
    with pytest.raises(ConflictError, match="inferred from save"):
        saver.register_curriculum("train", "easy", [first])
    saver.register_curriculum("train", "easy", [staged])  # the same as the inferred stage: fine
    with pytest.raises(InvalidNameError, match="reserved"):
        saver.register_curriculum("train", "_", [first])

    manifest = saver.commit_manifest().document
    cur = manifest.splits["train"].curricula
    assert cur["small"].shards == ["_/delta-001"]
    assert cur["large"].shards == ["_/delta-002", "_/delta-001"]  # caller order kept
    assert cur["large"].metadata == {"order": "reversed"}
    assert cur["easy"].shards == ["easy/0"]
    # Every physical shard is listed once in the split.
    assert [s.key for s in manifest.splits["train"].shards] == ["_/delta-001", "_/delta-002", "easy/0"]

    # After a restart: recover, register the same selections, and the commit is idempotent.
    restarted = vault.dataset_saver(manifest_uri(root))
    with pytest.raises(ManifestError, match="not saved or recovered"):
        restarted.register_curriculum("train", "small", ["_/delta-001"])
    a = restarted.recover("train", None, shard_id="delta-001")
    b = restarted.recover("train", None, shard_id="delta-002")
    restarted.register_curriculum("train", "small", [a])
    restarted.register_curriculum("train", "large", [b, a], curriculum_metadata={"order": "reversed"})
    assert restarted.commit_manifest().document == manifest


@pytest.mark.parametrize("bad", ["../x", "", "x" * 200, ".", "..", "a/b", "sp ace", None, 7])
def test_bad_ids_are_refused_and_write_nothing(vault_root, bad) -> None:
    vault, root = vault_root
    saver = vault.dataset_saver(manifest_uri(root))
    with pytest.raises(InvalidNameError, match="invalid shard id"):
        saver.save("train", None, records_for("train", None, "0"), shard_id=bad)
    with pytest.raises(InvalidNameError, match="invalid split"):
        saver.save(bad, None, records_for("train", None, "0"), shard_id="0")
    if bad is not None:
        with pytest.raises(InvalidNameError, match="invalid curriculum stage"):
            saver.save("train", bad, records_for("train", None, "0"), shard_id="0")
    with pytest.raises(InvalidNameError, match="reserved"):
        saver.save("train", "_", records_for("train", None, "0"), shard_id="0")
    assert list_keys(vault, root) == []


def test_unencodable_record_mid_shard_writes_nothing(vault_root) -> None:
    vault, root = vault_root
    saver = vault.dataset_saver(manifest_uri(root), block_bytes=64)
    records = records_for("train", None, "0", n=30)
    records[17] = {"id": "bad", "value": object()}
    with pytest.raises(EncodeError, match=r"shard train/_/0: record 17"):
        saver.save("train", None, records, shard_id="0")
    assert list_keys(vault, root) == []


def test_a_shard_past_the_size_limit_is_refused(tmp_path) -> None:
    # The 5 GiB single-put limit, scaled down: the same code path refuses early.
    saver = DatasetSaver(TrainVault().storage, str(tmp_path / "m.json"), block_bytes=1024, max_shard_bytes=20_000)
    big = ({"i": i, "text": f"{i:x}" * 100} for i in range(10_000))
    with pytest.raises(ObjectTooLargeError, match="more shard ids"):
        saver.save("train", None, big, shard_id="0")
    assert not (tmp_path / "shards").exists()


def test_empty_shard_is_a_complete_shard_of_zero_records(vault_root) -> None:
    vault, root = vault_root
    saver = vault.dataset_saver(manifest_uri(root))
    entry = saver.save("train", None, [], shard_id="empty")
    assert (entry.record_count, entry.size_bytes) == (0, 0)
    assert saver.save("train", None, untouchable(), shard_id="empty") == entry
    manifest = saver.commit_manifest().document
    assert list(iter_shard(manifest.data_format, manifest.splits["train"].shards[0], storage=vault.storage)) == []


def test_stage_shards_must_agree_on_metadata(tmp_path) -> None:
    saver = TrainVault().dataset_saver(str(tmp_path / "m.json"))
    saver.save("train", "easy", [{"a": 1}], curriculum_metadata={"w": 1}, shard_id="0")
    saver.save("train", "easy", [{"a": 2}], curriculum_metadata={"w": 2}, shard_id="1")
    with pytest.raises(ConflictError, match="different curriculum_metadata"):
        saver.commit_manifest()


def test_mixing_formats_in_one_publication_is_refused(tmp_path) -> None:
    vault = TrainVault()
    uri = str(tmp_path / "m.json")
    vault.dataset_saver(uri).save("train", None, [{"a": 1}], shard_id="0")
    other = vault.dataset_saver(uri, data_format="jsonl.gz")
    with pytest.raises(ConflictError, match=r"msgpack\.zst"):
        other.save("train", None, untouchable(), shard_id="0")
    other.save("train", None, [{"a": 1}], shard_id="1")
    with pytest.raises(ConflictError, match="one publication holds one format"):
        other.commit_manifest()


def test_commit_with_no_shards_is_refused(tmp_path) -> None:
    with pytest.raises(ManifestError, match="no complete shard"):
        TrainVault().dataset_saver(str(tmp_path / "m.json")).commit_manifest()


# -- the reference's ProcessPoolExecutor example, unchanged but for names -----------


def generate_data(split, curriculum_stage, shard_id):
    return records_for(split, curriculum_stage, str(shard_id), n=5)


def save_shard(job):
    saver, split, curriculum_stage, metadata, shard_id = job
    records = generate_data(split, curriculum_stage, shard_id)
    saver.save(split, curriculum_stage, records, curriculum_metadata=metadata, shard_id=str(shard_id))


def run_pool_example(saver: DatasetSaver) -> DataManifest:
    jobs = (
        [
            (saver, "train", stage["name"], stage, shard_id)
            for stage in [
                {"name": "easy", "family": "arithmetic", "weight": 1.0},
                {"name": "medium", "family": "control", "weight": 2.0},
                {"name": "hard", "family": "composition", "weight": 3.0},
            ]
            for shard_id in range(32)
        ]
        + [(saver, "valid", None, None, shard_id) for shard_id in range(4)]
        + [(saver, "test", None, None, shard_id) for shard_id in range(4)]
    )
    with ProcessPoolExecutor(max_workers=8) as pool:
        list(pool.map(save_shard, jobs))
    return saver.commit_manifest().document


def _pool_example_in_fresh_process(root: str, config: StorageConfig) -> str:
    """Run the example as a user's script would: a new interpreter whose parent has not
    touched object storage before the pool forks (see storage.py on fork safety)."""
    script = (
        "import pickle, sys; sys.path.insert(0, sys.argv[1]);"
        "from test_saver import run_pool_example, manifest_uri;"
        "from trainvault import TrainVault;"
        "vault = TrainVault(storage=pickle.loads(bytes.fromhex(sys.argv[3])));"
        "print(run_pool_example(vault.dataset_saver(manifest_uri(sys.argv[2]))).document_sha256())"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(HERE), root, pickle.dumps(config).hex()],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def check_pool_manifest(manifest: DataManifest) -> None:
    train = manifest.splits["train"]
    assert len(train.shards) == 96 and train.record_count == 96 * 5
    assert [s.key for s in train.shards[:3]] == ["easy/0", "easy/1", "easy/2"]  # natural order
    assert train.curricula["medium"].metadata == {"name": "medium", "family": "control", "weight": 2.0}
    assert len(train.curricula["hard"].shards) == 32
    assert [len(manifest.splits[s].shards) for s in ("valid", "test")] == [4, 4]


def test_process_pool_example_local(tmp_path) -> None:
    vault, root = TrainVault(), str(tmp_path / "dataset")
    # In this (test) process, after other tests used storage: the local store is fork-safe.
    manifest = run_pool_example(vault.dataset_saver(manifest_uri(root)))
    check_pool_manifest(manifest)
    # Running the whole example again reuses every shard and commits the same manifest.
    assert run_pool_example(vault.dataset_saver(manifest_uri(root))) == manifest


def test_process_pool_example_s3(s3_server, s3_bucket, s3_vault) -> None:
    root = f"s3://{s3_bucket}/path/to/dataset"
    digest = _pool_example_in_fresh_process(root, s3_vault.storage.config)
    manifest = s3_vault.load_manifest(manifest_uri(root))
    assert manifest.document_sha256() == digest
    check_pool_manifest(manifest)
    assert _pool_example_in_fresh_process(root, s3_vault.storage.config) == digest
