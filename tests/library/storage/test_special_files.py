"""Special files in a local folder store, and oversized documents.

A shard or descriptor replaced by a FIFO, a link to /dev/zero, a symlink loop or a unix
socket, or a sparse file far larger than its binding: every public call refuses it with a
typed error naming the object. Each call runs in a fresh interpreter with a deadline and
a memory cap, so a regression (a hang, an unbounded read) fails the test instead of
hanging the suite or exhausting the machine.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainvault import ApprovalError, IntegrityError, ObjectTooLargeError, StorageError, TrainVault
from trainvault.approval import SigningKey, write_approval, write_keypair
from trainvault.storage import Storage, StorageConfig
from trainvault.uris import normalize_uri, parse_uri

TESTS = Path(__file__).resolve().parent
DEADLINE_S = 120  # far above a normal run of a few seconds; only a hang reaches it
MEMORY_CAP = 6 << 30  # address space of the child: an unbounded read dies of MemoryError
SPARSE_BYTES = 1 << 40  # a sparse extension: costs no disk, takes hours to read


# -- swapping special files in --------------------------------------------------------------------
# Each is made under a temporary name and renamed over the object: readers never see it missing.


def swap_fifo(path: str) -> None:
    os.mkfifo(path + ".new")
    os.replace(path + ".new", path)


def swap_dev_zero(path: str) -> None:
    os.symlink("/dev/zero", path + ".new")
    os.replace(path + ".new", path)


def swap_loop(path: str) -> None:
    os.symlink(path, path + ".loop")
    os.symlink(path + ".loop", path + ".new")
    os.replace(path + ".new", path)


def swap_socket(path: str) -> None:
    folder, name = os.path.split(path)
    here = os.getcwd()
    os.chdir(folder)  # a relative name: socket paths are limited to 108 bytes
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(name + ".new")  # the socket file outlives the socket
        os.replace(name + ".new", name)
    finally:
        os.chdir(here)


def swap_sparse(path: str) -> None:
    os.truncate(path, SPARSE_BYTES)


SWAPS: dict[str, Callable[[str], None]] = {
    "fifo": swap_fifo,
    "dev-zero": swap_dev_zero,
    "loop": swap_loop,
    "socket": swap_socket,
    "sparse": swap_sparse,
}


def local_path(uri: str) -> str:
    return "/" + parse_uri(uri).path


# -- running a call in a child with a deadline ----------------------------------------------------


def run_isolated(case: str, *args: str) -> dict[str, Any]:
    """Run ``CASES[case](*args)`` in a fresh interpreter; what it raised (or "no error")."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parents[2]), str(TESTS)])}
    code = f"import test_special_files as t; t.child({case!r}, {list(args)!r})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its DataLoader workers
        proc.communicate()
        pytest.fail(f"{case}{args} hung: no answer within {DEADLINE_S} s")
    lines = out.strip().splitlines()
    assert lines, f"{case} printed nothing; stderr: {err[-3000:]}"
    return json.loads(lines[-1])


def child(case: str, args: list[str]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    try:
        CASES[case](*args)
    except BaseException as exc:
        causes = []
        c: BaseException | None = exc
        while c is not None:
            causes.append([k.__name__ for k in type(c).__mro__])
            c = c.__cause__
        print(json.dumps({"types": causes, "message": str(exc)}))
    else:
        print(json.dumps({"types": [], "message": "no error"}))


def open_approved(approval_uri: str, sha256: str, public_key: str) -> None:
    TrainVault().open_approved(approval_uri, sha256, trusted_keys=[public_key])


def plain_loader(manifest_uri: str) -> None:
    loader = TrainVault().ungated_loader_factory(manifest_uri, collate_fn=list, dataloader_args={"batch_size": 4})
    for _ in loader.load("train"):
        pass


def loader_mid_epoch(request_json: str, workers: str, kind: str) -> None:
    """Approve, read one batch, then swap every train shard: the rest of the epoch must fail, typed."""
    vault = TrainVault()
    approved = vault.approve_dataset(Path(request_json).read_bytes())
    loader = approved.loader_factory(collate_fn=list, dataloader_args={"batch_size": 1, "num_workers": int(workers)})
    batches = iter(loader.load("train"))
    next(batches)
    for shard in approved.manifest.splits["train"].shards:
        SWAPS[kind](local_path(shard.uri))
    for _ in batches:
        pass


CASES: dict[str, Callable[..., None]] = {
    "open_approved": open_approved,
    "plain_loader": plain_loader,
    "loader_mid_epoch": loader_mid_epoch,
}


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture
def signed_chain(build_chain: Callable[..., Any]) -> Callable[..., tuple[Any, tuple[str, str, str]]]:
    def make(root: Path, target: str = "shard") -> tuple[Any, tuple[str, str, str]]:
        """A chain with a signed approval record: (chain, open_approved arguments). A loose descriptor
        is read only for a manifest written without a descriptor pack, so that target gets one."""
        chain = build_chain(
            TrainVault(), str(root / "chain"), shards=3, records_per_shard=20, packed=target != "descriptor"
        )
        approved = chain.vault.approve_dataset(chain.request())
        key = SigningKey.generate()
        _, public, _ = write_keypair(root / "approver", key)
        written = write_approval(chain.vault, f"{chain.root}/approval.json", approved, signing_keys=[key])
        return chain, (written.uri, written.sha256, str(public))

    return make


def target_uri(chain: Any, target: str) -> str:
    if target == "release-item":
        (item,) = Path(local_path(chain.root)).glob("release/**/*.jsonl")
        return normalize_uri(str(item))
    manifest = chain.vault.load_manifest(chain.manifest_uri)
    if target == "descriptor-pack":
        return manifest.descriptor_pack.uri
    entry = manifest.splits["train"].shards[-1]
    return entry.uri if target == "shard" else entry.descriptor_uri


def refused(result: dict[str, Any], kinds: tuple[str, ...], uri: str) -> None:
    """The outermost error or one of its causes is of one of `kinds`, and the message names `uri`."""
    assert result["types"], "the call succeeded on a special file"
    assert any(k in types for types in result["types"] for k in kinds), result
    assert uri in result["message"], result


# -- the gate ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["shard", "descriptor", "descriptor-pack"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "loop", "socket"])
def test_gate_refuses_special_files(
    signed_chain: Callable[..., tuple[Any, tuple[str, str, str]]], tmp_path: Path, kind: str, target: str
) -> None:
    chain, args = signed_chain(tmp_path, target)
    uri = target_uri(chain, target)
    SWAPS[kind](local_path(uri))
    result = run_isolated("open_approved", *args)
    refused(result, ("StorageError",), uri)
    assert "ApprovalError" in result["types"][0]
    assert "regular file" in result["message"]


@pytest.mark.parametrize("target", ["shard", "descriptor", "descriptor-pack", "release-item"])
def test_gate_reads_no_further_than_the_bound_size(
    signed_chain: Callable[..., tuple[Any, tuple[str, str, str]]], tmp_path: Path, target: str
) -> None:
    chain, args = signed_chain(tmp_path, target)
    uri = target_uri(chain, target)
    swap_sparse(local_path(uri))
    result = run_isolated("open_approved", *args)
    refused(result, ("ApprovalError",), uri)
    if target == "release-item":
        assert "item file of benchmark 'tiny' does not match the release (size more" in result["message"]
    elif target == "descriptor-pack":  # read whole to the size the manifest binds, before the hash pass
        assert "but it is bound as" in result["message"]
        assert "truncated, extended or replaced after it was bound" in result["message"]
    else:
        assert f"is {SPARSE_BYTES} bytes" in result["message"]
        assert "changed after it was scanned" in result["message"]


# -- the unapproved loader ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["descriptor", "descriptor-pack"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "loop", "socket", "sparse"])
def test_plain_loader_refuses_a_special_descriptor(
    build_chain: Callable[..., Any], tmp_path: Path, kind: str, target: str
) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), shards=2, records_per_shard=10, packed=target != "descriptor")
    uri = target_uri(chain, target)
    SWAPS[kind](local_path(uri))
    result = run_isolated("plain_loader", chain.manifest_uri)
    if kind == "sparse" and target == "descriptor-pack":  # read to the size the manifest binds, no further
        refused(result, ("IntegrityError",), uri)
        assert "truncated, extended or replaced after it was bound" in result["message"]
        return
    refused(result, ("StorageError",), uri)
    if kind == "sparse":
        assert "ObjectTooLargeError" in result["types"][0]
    else:
        assert "regular file" in result["message"]


# -- the approved loader, mid-epoch ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def loader_request(build_chain: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A chain with many small blocks per shard, shared by the mid-epoch tests (each restores it)."""
    root = tmp_path_factory.mktemp("special-loader")
    chain = build_chain(TrainVault(), str(root / "chain"), shards=3, records_per_shard=120, block_bytes=512)
    request = root / "request.json"
    request.write_bytes(chain.request().to_json_bytes())
    return root


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["fifo", "loop", "socket"])
def test_loader_refuses_a_shard_swapped_mid_epoch(
    loader_request: Path, tmp_path: Path, workers: int, kind: str
) -> None:
    # The request binds absolute URIs, so the child swaps the shared chain's shards in place: restore them after.
    backup = tmp_path / "backup"
    shutil.copytree(loader_request / "chain", backup, symlinks=True)
    try:
        result = run_isolated("loader_mid_epoch", str(loader_request / "request.json"), str(workers), kind)
    finally:
        shutil.rmtree(loader_request / "chain")
        shutil.copytree(backup, loader_request / "chain", symlinks=True)
    refused(result, ("StorageError",), str(loader_request / "chain" / "ds" / "shards" / "train"))
    assert "regular file" in result["message"]  # not "does not exist": say what is there


# -- oversized documents ----------------------------------------------------------------------------


def test_document_larger_than_the_cap_is_refused(build_chain: Callable[..., Any], tmp_path: Path) -> None:
    chain = build_chain(TrainVault(), str(tmp_path), shards=2, records_per_shard=10)
    size = chain.vault.storage.head(chain.manifest_uri).size
    small = TrainVault(storage=StorageConfig(max_document_bytes=size - 1))
    with pytest.raises(ObjectTooLargeError, match=f"{chain.manifest_uri} is {size} bytes.*max_document_bytes"):
        small.load_manifest(chain.manifest_uri)
    with pytest.raises(ApprovalError, match=f"{chain.manifest_uri} is {size} bytes") as info:
        small.approve_dataset(chain.request())
    assert isinstance(info.value.__cause__, ObjectTooLargeError)
    # At the cap, it reads.
    assert TrainVault(storage=StorageConfig(max_document_bytes=size)).load_manifest(chain.manifest_uri)


# -- bounded reads on every store -------------------------------------------------------------------


def test_reads_are_bounded_on_every_store(vault_root: tuple[TrainVault, str]) -> None:
    vault, root = vault_root
    st = vault.storage
    uri = normalize_uri(f"{root}/doc.json")
    st.put(uri, b"x" * 100)
    assert st.get(uri, max_bytes=100) == st.get(uri, expected_size=100) == b"x" * 100
    assert b"".join(st.stream(uri, start=10, chunk_size=7, expected_size=100)) == b"x" * 90
    with pytest.raises(ObjectTooLargeError, match=re.escape(f"{uri} is 100 bytes, over the 99-byte limit")):
        st.get(uri, max_bytes=99)
    with pytest.raises(ObjectTooLargeError, match=re.escape(f"{uri} is 100 bytes")):
        next(st.stream(uri, max_bytes=99))
    for wrong in (99, 101):
        with pytest.raises(IntegrityError, match=re.escape(f"{uri} is 100 bytes, but it is bound as {wrong} bytes")):
            st.get(uri, expected_size=wrong)
        with pytest.raises(IntegrityError, match=re.escape(f"{uri} is 100 bytes, but it is bound as {wrong} bytes")):
            list(st.stream(uri, chunk_size=7, expected_size=wrong))
    small = Storage(vault.storage_config.with_overrides(max_document_bytes=99))
    with pytest.raises(ObjectTooLargeError, match="max_document_bytes"):
        small.get_document(uri)
    assert Storage(vault.storage_config.with_overrides(max_document_bytes=100)).get_document(uri) == b"x" * 100


def test_ranges_never_read_past_the_end_on_every_store(vault_root: tuple[TrainVault, str]) -> None:
    vault, root = vault_root
    # A short recovery window: a range refusal taken for a network fault would retry until it ends.
    st = Storage(vault.storage_config.with_overrides(recovery_window_s=3))
    uri = normalize_uri(f"{root}/doc.bin")
    st.put(uri, bytes(range(100)))
    assert st.get_range(uri, 90, 100) == bytes(range(90, 100))
    for start, end in ((90, 110), (0, 1 << 40), (100, 120), (200, 300)):
        # A range past the end is a truncated object, read no further than the object (no
        # allocation of end - start bytes), and refused at once on every store.
        with pytest.raises(IntegrityError, match="truncated"):
            st.get_range(uri, start, end)


def test_a_listing_holds_regular_files_and_refuses_what_reads_refuse(tmp_path: Path) -> None:
    st = Storage()
    folder = tmp_path / "objects"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.json").write_bytes(b"{}")
    (folder / "sub" / "b.json").write_bytes(b"[]")
    (folder / "linked.json").symlink_to(folder / "a.json")  # a link to a regular file is read, so listed
    (folder / ".tv-tmp-c.json.1.2").write_bytes(b"{")  # an interrupted write's leftovers are not objects
    listed = [o.uri for o in st.list(str(folder))]
    assert listed == [normalize_uri(str(folder / n)) for n in ("a.json", "linked.json", "sub/b.json")]
    for kind, swap in (("a FIFO", swap_fifo), ("a character device", swap_dev_zero), ("a socket", swap_socket)):
        target = folder / "sub" / "b.json"
        swap(str(target))
        refused = re.escape(f"{normalize_uri(str(target))} is {kind}, not a regular file")
        with pytest.raises(StorageError, match=refused):
            st.list(str(folder))
        target.unlink()
        target.write_bytes(b"[]")
    (folder / "elsewhere").symlink_to(tmp_path, target_is_directory=True)  # listing it could loop or duplicate
    with pytest.raises(StorageError, match="elsewhere is a link to a folder"):
        st.list(str(folder))
