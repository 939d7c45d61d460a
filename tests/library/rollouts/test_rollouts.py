"""Rollout archives on a local folder and the S3 test server: immutability, keys, metadata
without payload reads, dedupe, release and gc (also racing writers), integrity, export, bad input."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trainvault import DatasetSaver, EncodeError, IntegrityError, ManifestError, ObjectNotFoundError, iter_shard
from trainvault.errors import ArchiveExistsError, ConfigurationError, ConflictError, StorageError
from trainvault.rollouts import RolloutArchive, iter_archive_samples
from trainvault.rollouts.cli import parse_duration
from trainvault.rollouts.documents import GcMarker
from trainvault.rollouts.pool import gc, object_uri
from trainvault.storage import Storage
from trainvault.uris import join_uri, normalize_uri


class CountingStorage(Storage):
    """A real Storage that counts object reads per URI (nothing about storage is faked)."""

    def __init__(self, config: Any = None):
        super().__init__(config)
        self.reads: Counter[str] = Counter()

    def get(self, uri: str, **kwargs: Any) -> bytes:
        self.reads[normalize_uri(uri)] += 1
        return super().get(uri, **kwargs)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        self.reads[normalize_uri(uri)] += 1
        return super().get_range(uri, start, end)

    def stream(self, uri: str, **kwargs: Any) -> Any:
        self.reads[normalize_uri(uri)] += 1
        return super().stream(uri, **kwargs)

    def object_reads(self, pool: str) -> dict[str, int]:
        prefix = join_uri(pool, "objects") + "/"
        return {u: n for u, n in self.reads.items() if u.startswith(prefix)}


@pytest.fixture(params=["local", "s3"])
def place(s3_config: Callable[..., Any], request: pytest.FixtureRequest, tmp_path: Path) -> tuple[CountingStorage, str]:
    """(counting storage, empty folder URI) on a local folder and on the S3 test server."""
    if request.param == "local":
        return CountingStorage(), normalize_uri(str(tmp_path / "rl"))
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return CountingStorage(s3_config(server)), f"s3://{bucket}/rl"


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ka = {k for k in a if not k.startswith("_")}
    if ka != set(b):
        return False
    return all(
        np.array_equal(np.asarray(a[k]), np.asarray(b[k])) if k in ("tokens", "logprobs") else a[k] == b[k] for k in ka
    )


def pool_objects(storage: Storage, pool: str) -> list[str]:
    return [o.uri for o in storage.list(join_uri(pool, "objects", "sha256"))]


def test_save_open_and_round_trip(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    samples = make_samples(150)
    uri = join_uri(root, "run-1.json")
    archive = RolloutArchive.save(uri, samples, rollout_id=11, evaluation=True, chunk_size=64, storage=st)
    pool = join_uri(root, "rollout-pool")
    assert archive.pool == pool and archive.rollout_id == 11 and archive.evaluation is True
    assert len(archive.index.chunks) == 3 and [c.sample_count for c in archive.index.chunks] == [64, 64, 22]
    assert len(pool_objects(st, pool)) == 3
    assert [o.uri for o in st.list(join_uri(pool, "owners"))] == [
        join_uri(pool, "owners", archive.index.owner + ".json")
    ]

    opened = RolloutArchive.open(uri, storage=st)
    loaded = opened.load_samples()
    assert len(loaded) == 150 and all(same(a, b) for a, b in zip(samples, loaded, strict=False))
    assert all("_queue_lease" not in s for s in loaded)
    assert loaded[0]["tokens"].dtype == np.int32
    raw = json.loads(st.get(uri))
    assert raw["format"] == "trainvault.rollout-archive" and raw["version"] == 1
    assert raw["samples"][5] == {"sample_key": "sample:5", "task_key": "task-2", "chunk": 0, "offset": 5}
    assert "live" not in json.dumps(raw)


def test_archives_are_immutable(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    uri = join_uri(root, "run.json")
    RolloutArchive.save(uri, make_samples(5), rollout_id=1, storage=st)
    before = st.get(uri)
    with pytest.raises(ArchiveExistsError, match=r"immutable.*choose a new path") as info:
        RolloutArchive.save(uri, make_samples(6, seed=1), rollout_id=2, storage=st)
    assert isinstance(info.value, ConflictError) and isinstance(info.value, FileExistsError)
    assert st.get(uri) == before
    assert len(RolloutArchive(uri, storage=st).load_samples()) == 5


def test_keys_duplicates_intersection_and_keyerror(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    samples = make_samples(20, index_mod=4)  # several samples share each index
    samples[3]["index"] = None  # no index: keyed by position
    uri = join_uri(root, "dup.json")
    archive = RolloutArchive.save(uri, samples, rollout_id="r-7", chunk_size=8, storage=st)

    keys = archive.keys()
    assert len(keys) == 20
    assert keys[:5] == [
        ("sample:0", "task-0"),
        ("sample:1", "task-1"),
        ("sample:2", "task-2"),
        ("position:3", "task-0"),
        ("sample:0", "task-1"),
    ]
    dup = archive.load_samples(sample_key="sample:2")
    assert [s["index"] for s in dup] == [2] * 5 and [s["task_id"] for s in dup] == [
        "task-2",
        "task-0",
        "task-1",
        "task-2",
        "task-0",
    ]
    assert [s["reward"] for s in dup] == [0.2, 0.6, 0.0, 0.4, 0.8]  # archive order kept
    both = archive.load_samples(sample_key="sample:2", task_key="task-0")
    assert [s["reward"] for s in both] == [0.6, 0.8]
    assert len(archive.load_samples(task_key="task-1")) == 7
    assert same(samples[3], archive.load_samples(sample_key="position:3")[0])
    with pytest.raises(KeyError):
        archive.load_samples(sample_key="sample:1", task_key="task-9")
    with pytest.raises(KeyError):
        archive.load_samples(sample_key="sample:999")


def test_metadata_and_keys_read_no_chunk(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    uri = join_uri(root, "meta.json")
    RolloutArchive.save(uri, make_samples(100), rollout_id=3, chunk_size=16, storage=st)
    pool = join_uri(root, "rollout-pool")
    st.reads.clear()

    seen: list[int] = []
    meta = RolloutArchive.check_metadata(uri, validate=lambda m: seen.append(len(m)), storage=st)
    archive = RolloutArchive(uri, storage=st)
    assert len(archive.keys()) == 100
    from trainvault.rollouts.cli import archive_summary

    summary = archive_summary(uri, st)
    assert st.object_reads(pool) == {}  # not one chunk read
    assert seen == [100] and len(meta) == 100
    assert meta[1] == {
        "index": 1,
        "task": "task-1",
        "reward": 0.1,
        "status": "completed",
        "lengths": {
            "logprobs": len(meta and make_samples(100)[1]["logprobs"]),
            "tokens": len(make_samples(100)[1]["tokens"]),
        },
    }
    assert summary["samples"] == 100 and summary["metadata"]["status"] == {"completed": 75, "truncated": 25}

    # A selection reads only the chunks it needs, each once.
    archive.load_samples(sample_key="sample:40")
    assert list(st.object_reads(pool).values()) == [1]
    assert next(iter(st.object_reads(pool))) == object_uri(pool, archive.index.chunks[2].sha256)


def test_metadata_sidecar_bound_to_its_archive(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    a = join_uri(root, "a.json")
    b = join_uri(root, "b.json")
    RolloutArchive.save(a, make_samples(10), rollout_id=1, describe_sample=None, storage=st)
    RolloutArchive.save(b, make_samples(10, seed=5), rollout_id=2, describe_sample=None, storage=st)
    with pytest.raises(ObjectNotFoundError, match=r"without sample metadata.*write_metadata_sidecar"):
        RolloutArchive.check_metadata(a, storage=st)

    side_b = RolloutArchive.write_metadata_sidecar(b, storage=st)
    st.reads.clear()
    meta = RolloutArchive.check_metadata(b, storage=st)
    assert len(meta) == 10 and meta[0]["task"] == "task-0"
    assert st.object_reads(join_uri(root, "rollout-pool")) == {}

    st.put(a + ".metadata.json", st.get(side_b))  # b's sidecar planted beside a
    with pytest.raises(ManifestError, match="describes another archive"):
        RolloutArchive.check_metadata(a, storage=st)


def test_identical_chunks_are_stored_once(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    pool = join_uri(root, "shared-pool")
    common = make_samples(32, seed=1)
    a = RolloutArchive.save(
        join_uri(root, "a.json"), common + make_samples(16, seed=2), rollout_id=1, chunk_size=16, pool=pool, storage=st
    )
    b = RolloutArchive.save(
        join_uri(root, "b.json"), common + make_samples(16, seed=3), rollout_id=2, chunk_size=16, pool=pool, storage=st
    )
    assert [c.sha256 for c in a.index.chunks[:2]] == [c.sha256 for c in b.index.chunks[:2]]
    assert len(pool_objects(st, pool)) == 4  # 2 shared + 1 each
    assert len(b.load_samples()) == 48


def test_release_then_gc_frees_exactly_the_unshared_chunks(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    pool = join_uri(root, "pool")
    common = make_samples(16, seed=1)
    a = RolloutArchive.save(
        join_uri(root, "a.json"),
        common + make_samples(16, seed=2, first=16),
        rollout_id=1,
        chunk_size=16,
        pool=pool,
        storage=st,
    )
    b = RolloutArchive.save(
        join_uri(root, "b.json"),
        common + make_samples(16, seed=3, first=16),
        rollout_id=2,
        chunk_size=16,
        pool=pool,
        storage=st,
    )
    only_a = object_uri(pool, a.index.chunks[1].sha256)
    assert gc(pool, grace=0, storage=st).deleted == []  # everything owned

    a.release()
    dry = gc(pool, grace=0, storage=st, dry_run=True)
    assert dry.deleted == [only_a] and len(pool_objects(st, pool)) == 3
    assert gc(pool, grace=3600, storage=st).deleted == []  # too young for a one-hour grace
    report = gc(pool, grace=0, storage=st)
    assert report.deleted == [only_a] and report.freed_bytes == a.index.chunks[1].size_bytes
    assert sorted(pool_objects(st, pool)) == sorted(object_uri(pool, c.sha256) for c in b.index.chunks)
    assert st.list(join_uri(pool, "gc")) == []  # the collector's marker is gone

    reopened = RolloutArchive(a.uri, storage=st)  # the index stays readable after release
    assert len(reopened.keys()) == 32 and len(RolloutArchive.check_metadata(a.uri, storage=st)) == 32
    assert len(reopened.load_samples(sample_key="sample:0")) == 1  # its shared chunk is still kept by b
    with pytest.raises(ObjectNotFoundError, match="garbage-collected"):
        reopened.load_samples()
    assert len(b.load_samples()) == 32


class GcDuringOwnerWrite(Storage):
    """A real Storage that runs a collector right before the writer's owner record lands."""

    def __init__(self, config: Any, pool: str, grace: float):
        super().__init__(config)
        self.pool, self.grace = pool, grace
        self.reports: list[Any] = []

    def put_create(self, uri: str, data: Any) -> bool:
        if "/owners/" in normalize_uri(uri) and not self.reports:
            self.reports.append(gc(self.pool, grace=self.grace, storage=Storage(self.config)))
        return super().put_create(uri, data)


def test_gc_racing_a_writer_loses_nothing(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    pool = join_uri(root, "pool")
    samples = make_samples(40)

    # Objects put, owner record not yet written: the grace period keeps them.
    racing = GcDuringOwnerWrite(st.config, pool, grace=3600)
    a = RolloutArchive.save(join_uri(root, "a.json"), samples, rollout_id=1, chunk_size=16, pool=pool, storage=racing)
    assert racing.reports[0].deleted == [] and racing.reports[0].kept_young == 3
    assert len(a.load_samples()) == 40

    # Worst case: a released archive's chunks are reused (dedupe), and a grace-0 collector
    # deletes them between the writer's puts and its owner record. The writer repairs them.
    a.release()
    racing = GcDuringOwnerWrite(st.config, pool, grace=0)
    b = RolloutArchive.save(join_uri(root, "b.json"), samples, rollout_id=2, chunk_size=16, pool=pool, storage=racing)
    assert len(racing.reports[0].deleted) == 3
    assert len(b.load_samples()) == 40
    assert gc(pool, grace=0, storage=st).deleted == []


def test_writer_waits_for_a_running_collector(
    make_samples: Callable[..., list[dict[str, Any]]], tmp_path: Path
) -> None:
    st = Storage()
    pool = normalize_uri(str(tmp_path / "pool"))
    marker = join_uri(pool, "gc", "manual.json")
    st.put_create(marker, GcMarker(started_unix=time.time(), deadline_unix=time.time() + 60).to_json_bytes())
    threading.Timer(0.6, st.delete, args=(marker,)).start()
    t0 = time.monotonic()
    RolloutArchive.save(str(tmp_path / "a.json"), make_samples(4), rollout_id=1, pool=pool, storage=st)
    assert time.monotonic() - t0 >= 0.5


def test_concurrent_writers_and_collector(make_samples: Callable[..., list[dict[str, Any]]], tmp_path: Path) -> None:
    st = Storage()
    pool = normalize_uri(str(tmp_path / "pool"))
    common = make_samples(24, seed=9)
    RolloutArchive.save(str(tmp_path / "old.json"), common, rollout_id=0, chunk_size=8, pool=pool).release()
    done = threading.Event()
    errors: list[BaseException] = []
    written: list[str] = []

    def collector() -> None:
        while not done.is_set():
            try:
                gc(pool, grace=0, storage=st)
            except BaseException as exc:
                errors.append(exc)
                return

    def writer(w: int) -> None:
        try:
            for k in range(4):
                uri = str(tmp_path / f"w{w}-{k}.json")
                RolloutArchive.save(
                    uri, common + make_samples(8, seed=100 * w + k), rollout_id=k, chunk_size=8, pool=pool, storage=st
                )
                written.append(uri)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=collector)] + [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    done.set()
    threads[0].join()
    assert errors == []
    for uri in written:
        assert len(RolloutArchive(uri, storage=st).load_samples()) == 32


def test_gc_deletes_nothing_unless_it_reads_every_owner(
    make_samples: Callable[..., list[dict[str, Any]]], tmp_path: Path
) -> None:
    st = Storage()
    pool = normalize_uri(str(tmp_path / "pool"))
    common = make_samples(16, seed=1)
    a = RolloutArchive.save(str(tmp_path / "a.json"), common, rollout_id=1, chunk_size=8, pool=pool)
    RolloutArchive.save(
        str(tmp_path / "b.json"), common + make_samples(8, seed=2, first=16), rollout_id=2, chunk_size=8, pool=pool
    ).release()
    before = pool_objects(st, pool)
    owners = tmp_path / "pool" / "owners"
    (owners / "dangling.json").symlink_to(tmp_path / "moved-away.json")  # an owner we cannot read
    with pytest.raises(StorageError, match="cannot list"):
        gc(pool, grace=0, storage=st)
    (owners / "dangling.json").unlink()
    (owners / "garbled.json").write_bytes(b"{not json")
    with pytest.raises(ManifestError, match=r"garbled\.json"):
        gc(pool, grace=0, storage=st)
    assert pool_objects(st, pool) == before and st.list(join_uri(pool, "gc")) == []
    assert len(a.load_samples()) == 16
    (owners / "garbled.json").unlink()
    assert len(gc(pool, grace=0, storage=st).deleted) == 1  # b's own chunk, now that every owner was read


def test_corrupted_chunk_is_refused(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    archive = RolloutArchive.save(join_uri(root, "a.json"), make_samples(20), rollout_id=1, chunk_size=10, storage=st)
    target = object_uri(archive.pool, archive.index.chunks[1].sha256)
    good = st.get(target)
    st.put(target, good[:-1] + bytes([good[-1] ^ 1]))
    assert len(archive.load_samples(sample_key="sample:3")) == 1  # the intact chunk still loads
    with pytest.raises(IntegrityError, match="does not match its digest"):
        archive.load_samples(sample_key="sample:13")
    st.put(target, good[:-5])
    with pytest.raises(IntegrityError, match="altered or truncated"):
        archive.load_samples()


def test_unknown_index_format_or_version(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    uri = join_uri(root, "a.json")
    RolloutArchive.save(uri, make_samples(3), rollout_id=1, storage=st)
    raw = json.loads(st.get(uri))
    st.put(join_uri(root, "v2.json"), json.dumps({**raw, "version": 2}).encode())
    st.put(join_uri(root, "other.json"), json.dumps({**raw, "format": "slime.straw-debug"}).encode())
    with pytest.raises(ManifestError, match=r"version 2 is not supported.*upgrade"):
        RolloutArchive(join_uri(root, "v2.json"), storage=st)
    with pytest.raises(ManifestError, match="'format'"):
        RolloutArchive.check_metadata(join_uri(root, "other.json"), storage=st)
    with pytest.raises(ObjectNotFoundError, match="no rollout archive"):
        RolloutArchive(join_uri(root, "missing.json"), storage=st)


def test_export_pt_round_trip(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str], tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    st, root = place
    samples = make_samples(12)
    archive = RolloutArchive.save(join_uri(root, "a.json"), samples, rollout_id="r1", chunk_size=5, storage=st)
    out = archive.export_pt(str(tmp_path / "export" / "a.pt"))
    assert out == normalize_uri(str(tmp_path / "export" / "a.pt"))
    for o in pool_objects(st, archive.pool):  # independent of the pool
        st.delete(o)
    dump = torch.load(tmp_path / "export" / "a.pt", weights_only=True)
    assert dump["rollout_id"] == "r1" and len(dump["samples"]) == 12
    assert torch.equal(dump["samples"][4]["tokens"], torch.from_numpy(samples[4]["tokens"]))
    assert dump["samples"][4]["logprobs"] == samples[4]["logprobs"] and "_queue_lease" not in dump["samples"][4]
    with pytest.raises(ConflictError, match="new path"):
        RolloutArchive(archive.uri, storage=st).export_pt(str(tmp_path / "export" / "a.pt"))


def test_export_pt_without_torch_names_the_extra(
    make_samples: Callable[..., list[dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = RolloutArchive.save(str(tmp_path / "a.json"), make_samples(2), rollout_id=1)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, as without the extra
    with pytest.raises(ImportError, match=r"pip install 'trainvault\[torch\]'"):
        archive.export_pt(str(tmp_path / "a.pt"))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda s: [*s[:7], ["not", "a", "mapping"], *s[7:]], "sample 7 is a list, not a mapping"),
        (lambda s: [*s[:5], {**s[5], "extra": {1, 2}}, *s[6:]], "chunk 0 .samples 0-7.: record 5"),
        (lambda s: [*s[:9], {**s[9], "extra": object()}, *s[10:]], "chunk 1 .samples 8-10.: record 1"),
        (lambda s: [*s[:2], {**s[2], "index": 1.5}, *s[3:]], "sample 2: .*'index'"),
        (lambda s: [*s[:2], {**s[2], 7: "non-str field"}, *s[3:]], "record 2"),
    ],
)
def test_bad_input_writes_no_index(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str], bad: Any, message: str
) -> None:
    st, root = place
    uri = join_uri(root, "bad.json")
    with pytest.raises(EncodeError, match=message):
        RolloutArchive.save(uri, bad(make_samples(11)), rollout_id=1, chunk_size=8, storage=st)
    assert not st.exists(uri)
    assert st.list(root) == []  # encoding fails before the first write: not even pool objects


def test_bad_metadata_hook_and_arguments(make_samples: Callable[..., list[dict[str, Any]]], tmp_path: Path) -> None:
    uri = str(tmp_path / "a.json")
    with pytest.raises(EncodeError, match="sample 0: metadata must be JSON-compatible"):
        RolloutArchive.save(uri, make_samples(2), rollout_id=1, describe_sample=lambda s: {"x": float("nan")})
    with pytest.raises(EncodeError, match="over 4096"):
        RolloutArchive.save(uri, make_samples(2), rollout_id=1, describe_sample=lambda s: {"x": "y" * 5000})
    with pytest.raises(EncodeError, match="iterable of mappings"):
        RolloutArchive.save(uri, {"index": 1}, rollout_id=1)
    with pytest.raises(ValueError, match="chunk_size"):
        RolloutArchive.save(uri, make_samples(2), rollout_id=1, chunk_size=0)
    assert not Path(uri).exists()


def test_archives_feed_the_saver(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    st, root = place
    uris = [
        RolloutArchive.save(join_uri(root, f"r{i}.json"), make_samples(30, seed=i), rollout_id=i, storage=st).uri
        for i in range(2)
    ]
    good = iter_archive_samples(uris, storage=st, where=lambda s: s["reward"] >= 0.5, source_field="source")
    saver = DatasetSaver(st, join_uri(root, "distil", "data-manifest-v1.json"))
    entry = saver.save("train", None, good, shard_id="0")
    saver.commit_manifest()
    records = list(iter_shard("msgpack.zst", entry, storage=st))
    assert len(records) == 30 and all(r["reward"] >= 0.5 for r in records)
    assert records[0]["source"] == {"archive": uris[0], "rollout_id": 0, "sample_key": "sample:5"}
    assert isinstance(records[0]["tokens"], np.ndarray)


def test_cli_inspect_and_gc(
    make_samples: Callable[..., list[dict[str, Any]]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainvault.cli import main

    archive = RolloutArchive.save(str(tmp_path / "a.json"), make_samples(30), rollout_id=4, chunk_size=8)
    assert main(["archive", "inspect", str(tmp_path / "a.json"), "--keys", "2"]) == 0
    out = capsys.readouterr().out
    assert "rollout 4 (training)" in out and "30 samples (30 distinct keys, 3 tasks) in 4 chunks" in out
    assert "sample:1  task task-1" in out and "... 28 more" in out and "completed 22, truncated 8" in out
    assert main(["archive", "inspect", str(tmp_path / "a.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["rewards"] == 30

    archive.release()
    pool = str(tmp_path / "rollout-pool")
    assert main(["archive", "gc", pool, "--grace", "1h"]) == 0
    assert "deleted 0 objects" in capsys.readouterr().out and len(pool_objects(Storage(), archive.pool)) == 4
    assert main(["archive", "gc", pool, "--grace", "0", "--dry-run"]) == 0
    assert "would delete 4 objects" in capsys.readouterr().out and len(pool_objects(Storage(), archive.pool)) == 4
    assert main(["archive", "gc", pool, "--grace", "0s", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["deleted"]) == 4 and pool_objects(Storage(), archive.pool) == []
    assert main(["archive", "inspect", str(tmp_path / "missing.json")]) == 1
    assert "no rollout archive" in capsys.readouterr().err
    # A folder that is not a pool (here the archives' own): refused, and left as it was (no gc marker).
    before = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    for dry in ([], ["--dry-run"]):
        assert main(["archive", "gc", str(tmp_path), "--grace", "0", *dry]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"trainvault: error: file://{tmp_path} is not a rollout pool: it holds ")
        assert err.count("\n") == 1
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == before and not (tmp_path / "gc").exists()
    with pytest.raises(ConfigurationError, match="is not a rollout pool"):
        gc(str(tmp_path), grace=0)
    assert parse_duration("24h") == 86400 and parse_duration("15m") == 900 and parse_duration("90") == 90
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("soon")


def test_import_trainvault_loads_neither_torch_nor_numpy() -> None:
    code = "import sys, trainvault, trainvault.rollouts; print('torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_unique_owner_per_save(make_samples: Callable[..., list[dict[str, Any]]], tmp_path: Path) -> None:
    # Two archives of identical samples share every object, yet each keeps its own claim.
    pool = str(tmp_path / "pool")
    a = RolloutArchive.save(str(tmp_path / "a.json"), make_samples(8), rollout_id=1, pool=pool)
    b = RolloutArchive.save(str(tmp_path / "b.json"), make_samples(8), rollout_id=1, pool=pool)
    assert a.index.owner != b.index.owner and a.index.chunks == b.index.chunks
    a.release()
    assert gc(pool, grace=0).deleted == [] and len(b.load_samples()) == 8
    assert uuid.UUID(b.index.owner.split("-")[1])


# -- gc racing a writer in other processes --------------------------------------

#: (trials, archives saved per trial) per store: the S3 test server is slower.
RACE_RUNS = {"file": (4, 20), "s3": (2, 16)}
RACE_DEADLINE_S = 180.0


def _race_pool(root: str, trial: int) -> str:
    return join_uri(root, f"trial-{trial}", "pool")


def _race_writer(
    root: str,
    config: Any,
    seed: int,
    runs: tuple[int, int],
    make_samples: Callable[..., list[dict[str, Any]]],
    current: Any,
    start: Any,
    done: Any,
    results: Any,
) -> None:
    """Save archives that reuse a released archive's chunks and release some of them, trial by trial."""
    import random

    rng, st = random.Random(seed), Storage(config)
    kept: list[str] = []
    try:
        start.wait()
        trials, saves = runs
        for trial in range(trials):
            pool = _race_pool(root, trial)
            common = make_samples(24, seed=trial)
            base = join_uri(root, f"trial-{trial}", "base.json")
            RolloutArchive.save(base, common, rollout_id=0, chunk_size=8, pool=pool, storage=st).release()
            current.value = trial
            alive: list[str] = []
            for i in range(saves):
                uri = join_uri(root, f"trial-{trial}", f"a{i}.json")
                samples = common + make_samples(8, seed=1000 * trial + i, first=24)
                RolloutArchive.save(uri, samples, rollout_id=i, chunk_size=8, pool=pool, storage=st)
                alive.append(uri)
                time.sleep(rng.uniform(0, 0.02))  # at a random point of the collectors' runs
                if rng.random() < 0.5:
                    RolloutArchive(alive.pop(rng.randrange(len(alive))), storage=st).release()
            kept += alive
        results.put(("writer", kept, None))
    except BaseException as exc:
        results.put(("writer", kept, f"{type(exc).__name__}: {exc}"))
    finally:
        done.set()


def _race_collector(
    root: str, config: Any, seed: int, rank: int, current: Any, start: Any, done: Any, results: Any
) -> None:
    """Run gc(grace=0) on the current trial's pool until the writer is done (rank 1 only in odd trials)."""
    import random

    rng, st, runs, error = random.Random(seed), Storage(config), 0, None
    try:
        start.wait()
    except BaseException as exc:
        done.set()
        error = f"{type(exc).__name__}: {exc}"
    while not done.is_set():
        trial = current.value
        if rank == 0 or trial % 2:
            try:
                gc(_race_pool(root, trial), grace=0, storage=st)
            except BaseException as exc:
                error = error or f"{type(exc).__name__}: {exc}"
            runs += 1
        time.sleep(rng.uniform(0, 0.006))
    results.put((f"collector-{rank}", runs, error))


def _run_race(
    root: str, config: Any, seed: int, runs: tuple[int, int], make_samples: Callable[..., list[dict[str, Any]]]
) -> dict[str, tuple[Any, str | None]]:
    """Start the writer and two collectors as spawned processes; {name: (result, first error)}."""
    import multiprocessing
    import queue

    ctx = multiprocessing.get_context("spawn")  # obstore does not survive fork
    current, start, done, results = ctx.Value("i", 0), ctx.Barrier(3, timeout=60), ctx.Event(), ctx.Queue()
    shared = (current, start, done, results)
    procs = [ctx.Process(target=_race_writer, args=(root, config, seed, runs, make_samples, *shared), daemon=True)]
    procs += [
        ctx.Process(target=_race_collector, args=(root, config, seed + 1 + rank, rank, *shared), daemon=True)
        for rank in range(2)
    ]
    for p in procs:
        p.start()
    outcome: dict[str, tuple[Any, str | None]] = {}
    give_up = time.monotonic() + RACE_DEADLINE_S
    try:
        while len(outcome) < len(procs):
            name, value, error = results.get(timeout=max(give_up - time.monotonic(), 0.1))
            outcome[name] = (value, error)
    except queue.Empty:
        pytest.fail(
            f"the race did not finish within {RACE_DEADLINE_S:.0f} s (seed {seed}); finished: {sorted(outcome)}"
        )
    finally:
        done.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    return outcome


def test_gc_in_other_processes_never_collects_owned_chunks(
    make_samples: Callable[..., list[dict[str, Any]]], place: tuple[CountingStorage, str]
) -> None:
    # Owner records are released while one or two collectors (separate processes) list and
    # read them: every archive never released must still read back whole.
    import random

    st, root = place
    seed, runs = random.randrange(1 << 30), RACE_RUNS[root.split(":")[0]]
    outcome = _run_race(root, st.config, seed, runs, make_samples)
    assert outcome["writer"][1] is None, f"seed {seed}"
    kept = outcome["writer"][0]
    lost = []
    for uri in kept:
        try:
            assert [s["index"] for s in RolloutArchive(uri, storage=st).load_samples()] == list(range(32))
        except ObjectNotFoundError:
            lost.append(uri)
    assert lost == [], f"seed {seed}: {len(lost)} of {len(kept)} archives never released lost chunks"
    assert {name: error for name, (_, error) in outcome.items() if error} == {}, f"seed {seed}"
    for trial in range(runs[0]):  # with no writer left, a collection keeps exactly the kept archives' chunks
        pool = _race_pool(root, trial)
        gc(pool, grace=0, storage=st)
        owned = {
            object_uri(pool, c.sha256)
            for u in kept
            if f"/trial-{trial}/" in u
            for c in RolloutArchive(u, storage=st).index.chunks
        }
        assert set(pool_objects(st, pool)) == owned
