"""The local-folder backend: plain file I/O on regular files only, every read bounded.

Fork-safe, so DataLoader workers may fork freely. Symlinks are followed to what they
name, which must be a regular file: FIFOs, sockets and devices are refused (`NotRegular`),
so no read blocks on a writer that never comes or streams without end.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from trainvault.storage.backend import NotRegular, ObjectChanged, OpenedStream, StoredObject, TooLarge, check_limit

#: Names an interrupted write leaves behind; never objects.
TMP_PREFIX = ".tv-tmp-"


class FileBackend:
    """Local folders: atomic create-only writes, reads of regular files only."""

    def get(self, path: str, if_match: str | None = None, limit: int | None = None) -> bytes:
        fd, st = _open_regular(path)
        with open(fd, "rb") as f:
            # The etag of the open file, so a concurrent replacement cannot slip between check and read.
            if if_match and if_match != _file_etag(st):
                raise ObjectChanged(path)
            check_limit(st.st_size, limit)
            if limit is None:
                return f.read()
            data = f.read(limit + 1)  # a file that grew since fstat is still read no further
            check_limit(len(data), limit)
            return data

    def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end), never past the size the open file had: a range beyond the end
        comes back short (and `Storage` calls it truncated) instead of allocating `end - start`."""
        fd, st = _open_regular(path)
        try:
            return os.pread(fd, max(0, min(end, st.st_size) - start), start)
        finally:
            os.close(fd)

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """`get_range` of each range, from one open file."""
        fd, st = _open_regular(path)
        try:
            return [os.pread(fd, max(0, min(end, st.st_size) - start), start) for start, end in ranges]
        finally:
            os.close(fd)

    def open_stream(
        self, path: str, start: int, end: int | None, chunk_size: int, if_match: str | None, limit: int | None = None
    ) -> OpenedStream:
        fd, st = _open_regular(path)
        f = open(fd, "rb")  # noqa: SIM115 - closed by the generator
        etag = _file_etag(st)
        if if_match and if_match != etag:
            f.close()
            raise ObjectChanged(path)
        if limit is not None and st.st_size > limit:
            f.close()
            raise TooLarge(st.st_size, limit)
        return OpenedStream(etag, _chunks(f, start, end, chunk_size))

    def head(self, path: str) -> StoredObject:
        st = os.stat("/" + path)
        if stat.S_ISDIR(st.st_mode):
            raise FileNotFoundError(path)
        _check_regular(path, st)
        return StoredObject(path, st.st_size, _file_etag(st))

    def list(self, prefix: str) -> Iterator[StoredObject]:
        """The regular files under the folder `prefix` (in no set order).

        A folder that does not exist, or vanishes, holds nothing; a file deleted while it is
        listed is left out. Anything else that is not a regular file (a FIFO, socket or
        device, a link to nothing or to a folder, a link loop) raises, `NotRegular` or
        OSError: a listing never hides an entry it cannot vouch for.
        """
        for full, st in _walk("/" + prefix):
            yield StoredObject(
                full.lstrip("/"), st.st_size, _file_etag(st), datetime.fromtimestamp(st.st_mtime, tz=UTC)
            )

    def put(self, path: str, data: Any) -> str | None:
        tmp = _write_tmp(path, data)
        os.replace(tmp, "/" + path)
        return self.head(path).etag

    def create(self, path: str, data: Any) -> bool:
        if os.path.lexists("/" + path):
            return False  # what link() below would say, without writing and syncing a copy first
        # link() is atomic and fails if the name exists: readers never see a partial object.
        tmp = _write_tmp(path, data)
        try:
            os.link(tmp, "/" + path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def delete(self, path: str) -> None:
        os.unlink("/" + path)


def _file_etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "a special file"


def _check_regular(path: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(_kind(st.st_mode), path)


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """Open a regular file (symlinks followed) for reading, with the status of what was opened.

    O_NONBLOCK keeps open() of a FIFO from waiting for a writer; regular files ignore it.
    """
    fd = os.open("/" + path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        _check_regular(path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _chunks(f: Any, start: int, end: int | None, chunk_size: int) -> Iterator[bytes]:
    with f:
        f.seek(start)
        remaining = None if end is None else end - start
        while remaining is None or remaining > 0:
            chunk = f.read(chunk_size if remaining is None else min(chunk_size, remaining))
            if not chunk:
                return
            if remaining is not None:
                remaining -= len(chunk)
            yield chunk


def _walk(folder: str) -> Iterator[tuple[str, os.stat_result]]:
    """Each regular file under `folder`, with its status (links followed), sub-folders
    included (links to folders are refused, never followed); `FileBackend.list` says what raises."""
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except (FileNotFoundError, NotADirectoryError):
        return  # a folder that does not exist (or vanished mid-walk) holds nothing
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(entry.path)
        elif not entry.name.startswith(TMP_PREFIX):
            st = _listed_status(entry)
            if st is not None:
                yield entry.path, st


def _listed_status(entry: os.DirEntry[str]) -> os.stat_result | None:
    """The status of a listed regular file; None if it was deleted since the folder was read."""
    try:
        st = entry.stat()
    except FileNotFoundError:
        if os.path.lexists(entry.path):
            raise  # a link to nothing did not vanish: we cannot say what it holds
        return None
    if stat.S_ISDIR(st.st_mode):
        raise NotRegular("a link to a folder", entry.path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(_kind(st.st_mode), entry.path)
    return st


def _write_tmp(path: str, data: Any) -> str:
    folder, name = os.path.split("/" + path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f"{TMP_PREFIX}{name}.{os.getpid()}.{threading.get_ident()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return tmp
