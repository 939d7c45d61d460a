"""Storage over real stores: URIs, create-only writes, ranged and streaming reads, errors."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from trainvault import (
    ConflictError,
    IntegrityError,
    ObjectNotFoundError,
    StorageConfig,
    StorageError,
    StorageTimeoutError,
    TrainVault,
)
from trainvault.storage import Storage
from trainvault.uris import is_within, join_uri, normalize_uri, parent_uri, parse_uri


def test_uri_parsing(tmp_path) -> None:
    assert parse_uri("s3://bucket/a/b.json").path == "a/b.json"
    assert normalize_uri(str(tmp_path / "x")) == "file://" + str(tmp_path / "x")
    assert normalize_uri("file:///data/../data/x") == "file:///data/x"
    assert normalize_uri("memory://ns/a/b") == "memory://ns/a/b"
    assert join_uri("s3://b/root/", "shards", "train") == "s3://b/root/shards/train"
    assert parent_uri("s3://b/root/m.json") == "s3://b/root"
    assert is_within("s3://b/root/shards/x", "s3://b/root")
    assert not is_within("s3://b/rootx/y", "s3://b/root")
    assert not is_within("s3://other/root/y", "s3://b/root")
    for bad in ["ftp://x/y", "", "s3:///nobucket", "file://host/x"]:
        with pytest.raises(StorageError):
            parse_uri(bad)


def test_object_operations(vault_root) -> None:
    vault, root = vault_root
    st = vault.storage
    uri = join_uri(root, "dir", "obj.bin")
    data = bytes(range(256)) * 100
    assert st.put_create(uri, data) is True
    assert st.put_create(uri, data) is False  # identical: idempotent
    with pytest.raises(ConflictError, match="immutable"):
        st.put_create(uri, data + b"!")
    assert st.get(uri) == data
    assert st.get_range(uri, 10, 20) == data[10:20]
    assert b"".join(st.stream(uri, start=5, end=5000, chunk_size=1000)) == data[5:5000]
    assert b"".join(st.stream(uri, chunk_size=4096)) == data
    assert st.head(uri).size == len(data)
    assert [o.uri for o in st.list(root)] == [normalize_uri(uri)]
    with pytest.raises(IntegrityError, match="truncated"):
        st.get_range(uri, len(data) - 5, len(data) + 5)
    missing = join_uri(root, "nope")
    for op in (st.get, st.head):
        with pytest.raises(ObjectNotFoundError, match="does not exist"):
            op(missing)
    assert not st.exists(missing)
    st.delete(uri)
    st.delete(uri)  # deleting a missing object is not an error
    assert st.list(root) == []


def test_get_ranges_reads_many_ranges_in_one_call_without_copies(vault_root) -> None:
    vault, root = vault_root
    st = vault.storage
    uri = join_uri(root, "ranges.bin")
    data = bytes(range(256)) * 100
    st.put_create(uri, data)
    ranges = [(0, 10), (10, 300), (300, 300), (5000, 25600), (100, 200)]
    parts = st.get_ranges(uri, ranges)
    assert all(isinstance(p, memoryview) for p in parts)
    assert [bytes(p) for p in parts] == [data[a:b] for a, b in ranges]
    assert st.get_ranges(uri, []) == []
    with pytest.raises(IntegrityError, match="truncated"):
        st.get_ranges(uri, [(0, 10), (len(data) - 5, len(data) + 5)])
    with pytest.raises(ObjectNotFoundError):
        st.get_ranges(join_uri(root, "nope"), [(0, 10)])


def test_a_folder_is_not_an_object(tmp_path) -> None:
    st = Storage()
    (tmp_path / "dir").mkdir()
    with pytest.raises(ObjectNotFoundError, match="is a folder"):
        st.get(str(tmp_path / "dir"))
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(ObjectNotFoundError, match="is a folder"):
        st.get(str(tmp_path / "file" / "below"))


def test_local_create_is_atomic_and_hides_temp_files(tmp_path) -> None:
    st = Storage()
    uri = str(tmp_path / "a" / "b.bin")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".tv-tmp-b.bin.1.2").write_bytes(b"half")  # a crashed writer's leftover
    st.put_create(uri, b"whole")
    assert [o.uri for o in st.list(str(tmp_path))] == [normalize_uri(uri)]


def test_listing_skips_objects_deleted_meanwhile_and_nothing_else(tmp_path) -> None:
    # Deletions race the listings: each listing holds every object never deleted (a vanished
    # entry once made a whole folder look empty).
    import threading
    import time

    st = Storage()
    names = [f"o{i:04d}.json" for i in range(600)]
    for name in names:
        (tmp_path / name).write_bytes(b"{}")
    keep = {normalize_uri(str(tmp_path / n)) for n in names[::3]}
    doomed = [tmp_path / n for i, n in enumerate(names) if i % 3]

    def delete() -> None:
        for p in doomed:
            p.unlink()
            time.sleep(0.0002)  # spread the deletions over many listings

    deleter = threading.Thread(target=delete)
    deleter.start()
    listings = []
    while deleter.is_alive() or not listings:
        listings.append({o.uri for o in st.list(str(tmp_path))})
    deleter.join()
    assert [len(keep - got) for got in listings if not keep <= got] == []
    assert {o.uri for o in st.list(str(tmp_path))} == keep


def test_listing_fails_rather_than_looking_empty(tmp_path) -> None:
    import re

    st = Storage()
    assert st.list(str(tmp_path / "not-yet")) == []  # a folder that does not exist holds nothing
    (tmp_path / "a.json").write_bytes(b"{}")
    (tmp_path / "b.json").symlink_to(tmp_path / "moved-away.json")
    with pytest.raises(StorageError, match=re.escape(f"cannot list {normalize_uri(str(tmp_path))}") + ".*b.json"):
        st.list(str(tmp_path))
    (tmp_path / "b.json").unlink()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.json").symlink_to(tmp_path / "sub" / "c.json")  # a link loop
    with pytest.raises(StorageError, match=r"c\.json"):
        st.list(str(tmp_path))


def test_default_timeouts() -> None:
    cfg = StorageConfig()
    assert (cfg.connect_timeout_s, cfg.read_timeout_s, cfg.request_timeout_s) == (10.0, 60.0, 600.0)


def test_credentials_never_shown(s3_key_id: str, s3_secret: str, s3_server) -> None:
    vault = TrainVault(s3_server, "us-east-1", s3_key_id, s3_secret)
    for text in (repr(vault), repr(vault.storage_config), repr(vault.storage), str(vault.storage_config)):
        assert s3_secret not in text and s3_key_id not in text
    # Errors name the object, never the keys.
    with pytest.raises(ObjectNotFoundError) as info:
        vault.storage.get(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/x")
    assert s3_secret not in str(info.value) and s3_key_id not in str(info.value)
    # Picklable: configuration travels, clients do not.
    clone = pickle.loads(pickle.dumps(vault))
    assert clone.storage_config == vault.storage_config


def test_s3_create_only_is_exclusive(s3_config: Callable[..., Any], s3_server, s3_bucket) -> None:
    st = Storage(s3_config(s3_server))
    uri = f"s3://{s3_bucket}/m.json"
    assert st.put_create(uri, b"a")
    with pytest.raises(ConflictError):
        st.put_create(uri, b"b")
    assert st.get(uri) == b"a"


def test_unreachable_endpoint_fails_with_storage_error() -> None:
    st = Storage(
        StorageConfig(
            s3_base_url="http://127.0.0.1:9",
            region="us-east-1",
            access_key_id="k",
            secret_access_key="s",
            client_retries=0,
            connect_timeout_s=1,
            recovery_window_s=2,
        )
    )
    with pytest.raises(StorageError, match="s3://b/x"):
        st.get("s3://b/x")


def test_s3_settings_come_from_the_documented_variables_and_their_absence_fails_at_once(
    s3_key_id: str, s3_secret: str, env_without_s3_settings: Callable[..., dict[str, str]]
) -> None:
    env = {
        "TRAINVAULT_S3_URL": "http://127.0.0.1:1",
        "TRAINVAULT_S3_REGION": "",
        "TRAINVAULT_S3_KEY_ID": s3_key_id,
        "TRAINVAULT_S3_SECRET": s3_secret,
        "AWS_ENDPOINT_URL": "http://elsewhere",
        "AWS_REGION": "eu-west-1",
    }
    assert StorageConfig.from_env(env) == StorageConfig(
        s3_base_url="http://127.0.0.1:1", access_key_id=s3_key_id, secret_access_key=s3_secret
    )
    assert TrainVault.from_env(env).storage_config == StorageConfig.from_env(env)
    assert s3_secret not in repr(TrainVault.from_env(env))
    # No endpoint or keys: a StorageError naming what to set, before any network call (the
    # client would otherwise try a public cloud endpoint and credential service, and hang).
    script = textwrap.dedent(
        """
        from trainvault import StorageConfig, StorageError
        from trainvault.storage import Storage
        try:
            Storage(StorageConfig.from_env()).get("s3://bucket/data-manifest-v1.json")
        except StorageError as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env_without_s3_settings(AWS_ACCESS_KEY_ID="x"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "s3://bucket/data-manifest-v1.json: S3 storage is not configured" in out.stdout, out.stderr
    for name in ("TRAINVAULT_S3_URL", "TRAINVAULT_S3_KEY_ID", "TRAINVAULT_S3_SECRET", "TRAINVAULT_S3_REGION"):
        assert name in out.stdout


UNPICKLE_AND_READ = """
import pickle, sys
from trainvault import StorageError, StorageTimeoutError
storage = pickle.loads(bytes.fromhex(sys.argv[1]))
try:
    storage.get(sys.argv[2])
except StorageError as exc:
    print(type(exc).__name__, exc)
"""


def test_an_endpoint_that_never_answered_fails_after_its_first_contact_attempts(
    faults: ModuleType, closed_loopback_port: Callable[[], int], s3_config: Callable[..., Any], s3_server, s3_bucket
) -> None:
    # Refused on first contact: a StorageError naming the endpoint, not 15 minutes of retries.
    endpoint = f"http://127.0.0.1:{closed_loopback_port()}"
    dead = Storage(StorageConfig(s3_base_url=endpoint, region="us-east-1", access_key_id="k", secret_access_key="s"))
    out = subprocess.run(
        [sys.executable, "-c", UNPICKLE_AND_READ, pickle.dumps(dead).hex(), "s3://b/x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.startswith(f"StorageError cannot read s3://b/x: the S3 endpoint {endpoint} did not answer"), (
        out.stdout + out.stderr
    )
    # An endpoint that answered keeps the recovery window when it goes away: here, and in a
    # process handed the pickled Storage (a loader worker).
    proxy = faults.FaultProxy(int(s3_server.rsplit(":", 1)[1])).start()
    storage = Storage(s3_config(proxy.endpoint, client_retries=0, first_contact_attempts=1, recovery_window_s=2.0))
    uri = f"s3://{s3_bucket}/x"
    storage.put(uri, b"1")
    proxy.stop()
    with pytest.raises(StorageTimeoutError, match="recovery window 2 s"):
        storage.get(uri)
    out = subprocess.run(
        [sys.executable, "-c", UNPICKLE_AND_READ, pickle.dumps(storage).hex(), uri],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.startswith("StorageTimeoutError"), out.stdout + out.stderr


def test_forked_child_gets_clear_error_instead_of_hanging(tmp_path) -> None:
    # obstore's runtime does not survive fork(); trainvault refuses with advice.
    script = textwrap.dedent(
        """
        import os, sys
        from trainvault.storage import Storage
        st = Storage()
        st.put("memory://f/x", b"1")
        st.put(sys.argv[1], b"local")
        pid = os.fork()
        if pid == 0:
            assert st.get(sys.argv[1]) == b"local"   # local files work in the child
            try:
                st.get("memory://f/x")
            except Exception as exc:
                print(type(exc).__name__, "forkserver" in str(exc))
            os._exit(0)
        os.waitpid(pid, 0)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "l.bin")], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "StorageError True", out.stderr


def test_import_pulls_no_heavy_dependency() -> None:
    code = (
        "import sys, trainvault, trainvault.formats, trainvault.publication.saver, trainvault.publication.reader;"
        "heavy = [m for m in ('dagster', 'torch', 'pyarrow', 'safetensors', 'numpy') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "[]"


def test_missing_extra_names_it() -> None:
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "from trainvault.formats import get_format\n"
        "try:\n    get_format('parquet').new_encoder()\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'trainvault[parquet]'" in out.stdout


def test_a_missing_bucket_is_named_with_its_cause_at_once(s3_config: Callable[..., Any], s3_server) -> None:
    from trainvault.storage.recovery import STATS

    bucket = f"missing-{uuid.uuid4().hex[:12]}"
    st = Storage(s3_config(s3_server))
    retries = STATS.snapshot().get("retries", 0)
    for op, absent, call in [
        ("create", False, lambda: st.put_create(f"s3://{bucket}/ds/shards/train/_/0.msgpack.zst", b"x")),
        ("list", False, lambda: st.list(f"s3://{bucket}/ds/")),
        ("read", True, lambda: st.get_document(f"s3://{bucket}/ds/data-manifest-v1.json")),  # the object is absent
    ]:
        with pytest.raises(StorageError) as err:
            call()
        assert isinstance(err.value, ObjectNotFoundError) is absent and not isinstance(err.value, StorageTimeoutError)
        assert f"cannot {op} s3://{bucket}/ds/" in str(err.value)
        assert f"bucket {bucket!r} does not exist (the S3 endpoint answered NoSuchBucket)" in str(err.value)
    assert STATS.snapshot().get("retries", 0) == retries  # refused at the first answer, never retried
    # As a saver meets it: its first write names the bucket.
    saver = TrainVault(storage=s3_config(s3_server)).dataset_saver(f"s3://{bucket}/ds/data-manifest-v1.json")
    with pytest.raises(StorageError, match=f"bucket '{bucket}' does not exist"):
        saver.save("train", None, [{"i": 1}], shard_id="0")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_reads_count_the_bytes_and_requests_every_read_returns(
    s3_config: Callable[..., Any], tmp_path, request, where
) -> None:
    from trainvault.storage.reads import READS

    if where == "s3":
        bucket = request.getfixturevalue("s3_bucket")
        storage, uri = Storage(s3_config(request.getfixturevalue("s3_server"))), f"s3://{bucket}/dir/o"
    else:
        storage, uri = Storage(), str(tmp_path / "o")
    data = bytes(range(256)) * 100
    storage.put_create(uri, data)
    before = READS.snapshot()
    assert storage.get(uri) == data
    assert storage.get_range(uri, 10, 30) == data[10:30]
    assert b"".join(storage.stream(uri, chunk_size=4096)) == data
    storage.head(uri)
    storage.list(parent_uri(uri))
    got = READS.snapshot() - before
    # get + range + stream (bytes delivered), and one request each for the five calls.
    assert (got.bytes, got.requests, got.streamed) == (2 * len(data) + 20, 5, len(data))
