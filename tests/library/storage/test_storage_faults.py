"""Storage under faults, through a loopback proxy in front of the real S3 test server.

Every run through faults must give exactly the records and digests of a fault-free run.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import urllib.request
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from trainvault import (
    ConflictError,
    IntegrityError,
    StorageTimeoutError,
    TrainVault,
    iter_shard,
)
from trainvault.storage import Storage
from trainvault.storage.recovery import STATS

RECORDS = 1200


def records(shard_id: str) -> list[dict]:
    rng = random.Random(shard_id)
    return [
        {"id": f"{shard_id}-{i}", "text": "".join(rng.choice("abcdefgh ") for _ in range(400))} for i in range(RECORDS)
    ]


@pytest.fixture
def proxy(faults: ModuleType, s3_server):
    px = faults.FaultProxy(int(s3_server.rsplit(":", 1)[1])).start()
    yield px
    px.stop()


@pytest.fixture
def faulty_vault(s3_config: Callable[..., Any]) -> Callable[..., TrainVault]:
    """`faulty_vault(proxy, **overrides)`: a vault that reaches S3 through `proxy`."""

    def make(proxy: Any, **overrides: Any) -> TrainVault:
        # obstore's own retries off: every fault reaches trainvault's recovery.
        settings = dict(
            client_retries=0, read_timeout_s=2.0, recovery_window_s=20.0, backoff_initial_s=0.01, backoff_max_s=0.2
        )
        settings.update(overrides)
        return TrainVault(storage=s3_config(proxy.endpoint, **settings))

    return make


def publish(vault: TrainVault, root: str, shard_ids=("a", "b")):
    saver = vault.dataset_saver(f"{root}/data-manifest-v1.json", block_bytes=16 << 10)
    for sid in shard_ids:
        saver.save("train", None, records(sid), shard_id=sid)
    return saver.commit_manifest().document


def fingerprint(manifest) -> list[tuple]:
    return [
        (s.key, s.sha256, s.size_bytes, s.record_count, s.descriptor_sha256) for s in manifest.splits["train"].shards
    ]


@pytest.fixture(scope="module")
def baseline(s3_config: Callable[..., Any], s3_server):
    """One fault-free publication, shared by the read tests (they never write to it)."""
    bucket = f"clean-{uuid.uuid4().hex[:12]}"
    urllib.request.urlopen(urllib.request.Request(f"{s3_server}/{bucket}", method="PUT"), timeout=5).read()
    return publish(TrainVault(storage=s3_config(s3_server)), f"s3://{bucket}/clean")


def test_saver_commits_through_lost_responses_and_503s(
    faulty_vault: Callable[..., TrainVault],
    faults: ModuleType,
    s3_config: Callable[..., Any],
    proxy,
    baseline,
    s3_bucket,
) -> None:
    vault = faulty_vault(proxy)
    root = f"s3://{s3_bucket}/faulty"
    # The first data object's PUT lands but its response is lost; then a burst of 503s.
    proxy.arm(faults.Rule(mode="drop", method="PUT", path_contains="a.msgpack.zst"))
    saver = vault.dataset_saver(f"{root}/data-manifest-v1.json", block_bytes=16 << 10)
    saver.save("train", None, records("a"), shard_id="a")
    proxy.arm(faults.Rule(mode="503", method="PUT", times=2))  # the data PUT, then the descriptor PUT
    saver.save("train", None, records("b"), shard_id="b")
    proxy.arm(faults.Rule(mode="drop", method="PUT", path_contains="data-manifest"))
    manifest = saver.commit_manifest().document
    assert proxy.fired == 4
    assert fingerprint(manifest) == fingerprint(baseline)
    # A clean reader sees the same publication.
    assert TrainVault(storage=s3_config(proxy.endpoint)).load_manifest(f"{root}/data-manifest-v1.json") == manifest


def test_lost_create_response_over_someone_elses_object_is_a_conflict(
    faulty_vault: Callable[..., TrainVault], faults: ModuleType, proxy, s3_vault, s3_bucket
) -> None:
    uri = f"s3://{s3_bucket}/obj"
    s3_vault.storage.put_create(uri, b"theirs")
    proxy.arm(faults.Rule(mode="503", method="PUT"))
    with pytest.raises(ConflictError):
        faulty_vault(proxy).storage.put_create(uri, b"ours")
    assert s3_vault.storage.get(uri) == b"theirs"


CUTS = [1, 100, 1000, 4095, 4096, 16_000, 16_385, 65_536, 100_000, 131_072, 150_000, 190_000]


@pytest.mark.parametrize("offset", CUTS)
def test_reads_survive_a_cut_body(
    faulty_vault: Callable[..., TrainVault], faults: ModuleType, proxy, baseline, offset
) -> None:
    vault = faulty_vault(proxy)
    shard = baseline.splits["train"].shard("_/a")
    assert shard.size_bytes > max(CUTS)
    proxy.arm(faults.Rule(mode="rst" if offset % 2 else "fin", cut_after=offset, path_contains="a.msgpack.zst"))
    got = list(iter_shard(baseline.data_format, shard, storage=vault.storage))
    assert proxy.fired == 1
    assert got == records("a")


def test_stream_resumes_at_the_last_byte_and_logs_it(
    faulty_vault: Callable[..., TrainVault], faults: ModuleType, proxy, baseline, caplog
) -> None:
    vault = faulty_vault(proxy)
    shard = baseline.splits["train"].shard("_/b")
    before = STATS.snapshot()
    proxy.arm(faults.Rule(mode="fin", cut_after=20_000, times=3, path_contains="b.msgpack.zst"))
    with caplog.at_level(logging.INFO, logger="trainvault.storage"):
        data = b"".join(vault.storage.stream(shard.uri, chunk_size=8192))
    assert len(data) == shard.size_bytes

    assert hashlib.sha256(data).hexdigest() == shard.sha256
    assert STATS.snapshot()["resumes"] - before["resumes"] == 3
    resumed = [r.getMessage() for r in caplog.records if "resuming" in r.getMessage()]
    assert len(resumed) == 3 and all("b.msgpack.zst at byte" in m for m in resumed)
    assert "testing-secret" not in caplog.text
    ranges = [e for e in proxy.log if e["method"] == "GET" and "b.msgpack.zst" in e["target"]]
    assert len(ranges) == 4


def test_object_replaced_mid_stream_is_refused(
    faulty_vault: Callable[..., TrainVault], faults: ModuleType, proxy, s3_vault, s3_bucket
) -> None:
    uri = f"s3://{s3_bucket}/replaced.bin"
    original = bytes(range(256)) * 2048  # 512 KiB
    s3_vault.storage.put(uri, original)
    replace = lambda: s3_vault.storage.put(uri, original[::-1])  # noqa: E731
    proxy.arm(faults.Rule(mode="fin", cut_after=200_000, on_fire=replace))
    with pytest.raises(IntegrityError, match="changed while it was being read"):
        b"".join(faulty_vault(proxy).storage.stream(uri, chunk_size=4096))


def test_a_read_that_never_progresses_ends_with_a_timeout(
    faulty_vault: Callable[..., TrainVault], faults: ModuleType, proxy, s3_vault, s3_bucket
) -> None:
    uri = f"s3://{s3_bucket}/stalled.bin"
    s3_vault.storage.put(uri, b"x" * 100_000)
    proxy.arm(faults.Rule(mode="stall", cut_after=10, times=1000, stall_s=10))
    vault = faulty_vault(proxy, read_timeout_s=0.5, recovery_window_s=2.0)
    started = time.monotonic()
    with pytest.raises(StorageTimeoutError, match=r"no progress for \d+ s .*recovery window 2 s"):
        b"".join(vault.storage.stream(uri, chunk_size=4096))
    assert time.monotonic() - started < 15


def test_missing_objects_fail_at_once_through_the_proxy(
    faulty_vault: Callable[..., TrainVault], proxy, s3_bucket
) -> None:
    from trainvault import ObjectNotFoundError

    st: Storage = faulty_vault(proxy, recovery_window_s=60).storage
    started = time.monotonic()
    with pytest.raises(ObjectNotFoundError):
        st.get(f"s3://{s3_bucket}/absent")
    assert time.monotonic() - started < 5  # not retried for the recovery window


@pytest.mark.slow
def test_reads_survive_cuts_at_100_random_offsets(
    faulty_vault: Callable[..., TrainVault], faults: ModuleType, proxy, baseline
) -> None:
    vault = faulty_vault(proxy)
    shard = baseline.splits["train"].shard("_/a")
    rng = random.Random(20261129)
    for offset in sorted(rng.randrange(1, shard.size_bytes) for _ in range(100)):
        proxy.arm(faults.Rule(mode=rng.choice(["fin", "rst"]), cut_after=offset, path_contains="a.msgpack.zst"))
        assert list(iter_shard(baseline.data_format, shard, storage=vault.storage)) == records("a"), offset


@pytest.mark.parametrize("mode", ["fin", "rst"])
def test_training_loader_reads_every_record_through_cut_bodies(
    faulty_vault: Callable[..., TrainVault], faults: ModuleType, s3_config: Callable[..., Any], proxy, baseline, mode
) -> None:
    uri = baseline.splits["train"].shards[0].uri.rsplit("/shards/", 1)[0] + "/data-manifest-v1.json"

    def read(vault: TrainVault) -> list[str]:
        loader = vault.ungated_loader_factory(
            uri,
            collate_fn=lambda rs: [r["id"] for r in rs],
            shuffle=True,
            seed=7,
            dataloader_args={"batch_size": 50, "num_workers": 0},
        ).load("train")
        return [i for batch in loader for i in batch]

    clean = read(TrainVault(storage=s3_config(proxy.endpoint)))
    assert sorted(clean) == sorted(r["id"] for sid in ("a", "b") for r in records(sid))
    # Cut every data-object response, three times over, at different depths.
    proxy.arm(faults.Rule(mode=mode, cut_after=3_000, times=3, path_contains=".msgpack.zst"))
    assert read(faulty_vault(proxy)) == clean
    assert proxy.fired == 3
