"""The one read of a local file a person names (a key, a saved loader state, an exclude mapping):
a regular file only, at most a cap per kind of file, refused with a `ConfigurationError` naming
the file, what it should hold and what to do.

It goes through the local backend's read (`FileBackend.get`), so it refuses what storage reads
refuse: a FIFO (opened without waiting for a writer), a socket or device (``/dev/zero`` through
a link), a folder, and anything past the cap (read no further than cap + 1 bytes).
"""

from __future__ import annotations

import os

from trainvault.errors import ConfigurationError
from trainvault.storage.backend import NotRegular, TooLarge
from trainvault.storage.local import FileBackend

#: A PEM key is well under 1 KiB; this leaves room for comments and chains.
KEY_FILE_LIMIT = 64 * 1024
#: A loader state or exclude mapping: O(revisions and excluded records), never O(data).
JSON_FILE_LIMIT = 64 * 1024 * 1024


def read_local_file(path: str | os.PathLike[str], *, limit: int, what: str) -> bytes:
    """The bytes of the regular file at `path` (links followed), at most `limit` of them.
    `what` says what the file should hold, for the error."""
    name = os.fspath(path)
    try:
        return FileBackend().get(os.path.abspath(name).lstrip("/"), limit=limit)
    except NotRegular as exc:
        raise ConfigurationError(
            f"{name} is {exc.kind}, not a regular file; it should be a file holding {what}: pass that file"
        ) from None
    except TooLarge as exc:
        size = f"{exc.size:,} bytes" if exc.size is not None else "larger"
        raise ConfigurationError(
            f"{name} is {size}, more than the {limit:,} bytes {what} can take: it is not that file; pass the right one"
        ) from None
    except IsADirectoryError:
        raise ConfigurationError(f"{name} is a folder; it should be a file holding {what}") from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read {name} ({exc.strerror or exc}); it should hold {what}") from None
