"""Turning OS and obstore exceptions, and the backends' signals, into trainvault errors that
name the object and say what to do."""

from __future__ import annotations

import errno
import re
from typing import Any, Literal

import obstore.exceptions as obx

from trainvault.errors import (
    AuthenticationError,
    IntegrityError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
    TrainVaultError,
    TransientStorageError,
)
from trainvault.storage.backend import NotRegular, ObjectChanged, TooLarge

_OS_HINTS: dict[int | None, str] = {
    errno.ELOOP: " (a symlink loop); an object must be a regular file: put the published object back",
    errno.ENXIO: " (a socket or device, not a regular file); put the published object back",
}

#: How obstore reports a range that starts or ends past the object. Not a bare "416": it
#: also appears inside timings such as "in 16.416158ms".
_RANGE_REFUSED = re.compile(r"status code: 416\b|Range Not Satisfiable|InvalidRange|Invalid range")
#: The S3 error code of a request to a bucket that does not exist (in the response body obstore quotes).
_NO_SUCH_BUCKET = "<Code>NoSuchBucket</Code>"
#: Operations that name no object a missing bucket could be reported as absent.
_BUCKET_OPS = ("write", "create", "list", "delete")


class translate:
    """Context manager: turn obstore and OS errors raised inside it into trainvault errors."""

    def __init__(self, uri: str, op: str):
        self.uri, self.op = uri, op

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None or isinstance(exc, (StorageError, IntegrityError, GeneratorExit, StopIteration)):
            return False
        typed = (
            _missing_bucket(exc, self.uri, self.op)
            or _os_error(exc, self.uri, self.op)
            or _obstore_error(exc, self.uri, self.op)
        )
        if typed is None:
            return False
        # A refused special file is the whole story; otherwise the native error is the cause.
        raise typed from (None if isinstance(exc, NotRegular) else exc)


def _missing_bucket(exc: BaseException, uri: str, op: str) -> TrainVaultError | None:
    """The store answered NoSuchBucket: obstore calls that a missing object (on a PUT too) or, on a
    listing, a generic error that would be retried. It is neither: no request to it can succeed."""
    if not isinstance(exc, (obx.BaseError, FileNotFoundError)) or _NO_SUCH_BUCKET not in str(exc):
        return None
    bucket = uri.split("/")[2] if uri.startswith("s3://") else "?"
    # A read asked for an object, which is indeed absent; a write or listing has nothing absent to report.
    kind = StorageError if op in _BUCKET_OPS else ObjectNotFoundError
    return kind(
        f"cannot {op} {uri}: bucket {bucket!r} does not exist (the S3 endpoint answered NoSuchBucket); create the "
        "bucket, or correct the bucket name in the URI"
    )


def _os_error(exc: BaseException, uri: str, op: str) -> TrainVaultError | None:
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError(f"{uri} does not exist")
    if isinstance(exc, NotRegular):
        return StorageError(
            f"cannot {op} {uri}: it is {exc.kind}, not a regular file; trainvault reads only regular "
            "files: put the published object back"
        )
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return ObjectNotFoundError(f"{uri} is a folder (or lies under a file), not an object; name the object")
    if isinstance(exc, PermissionError):
        return _denied(uri, op)
    if isinstance(exc, ObjectChanged):
        return _changed(uri)
    if isinstance(exc, OSError):
        # A symlink loop (ELOOP), a socket (ENXIO), an I/O error: never a raw OSError.
        return StorageError(f"cannot {op} {uri}: {exc.strerror or exc}{_OS_HINTS.get(exc.errno, '')}")
    return None


def _obstore_error(exc: BaseException, uri: str, op: str) -> TrainVaultError | None:
    if isinstance(exc, (obx.PermissionDeniedError, obx.UnauthenticatedError)):
        return _denied(uri, op)
    if isinstance(exc, obx.PreconditionError):
        return _changed(uri)
    if isinstance(exc, obx.GenericError):
        if _RANGE_REFUSED.search(str(exc)):
            return IntegrityError(f"cannot {op} {uri}: the object is shorter than expected (truncated)")
        # Network failures, timeouts and 5xx after obstore's own retries: worth a fresh attempt.
        return TransientStorageError(f"cannot {op} {uri}: {first_line(exc)}")
    if isinstance(exc, obx.BaseError):
        return StorageError(f"cannot {op} {uri}: {first_line(exc)}")
    return None


def _denied(uri: str, op: str) -> AuthenticationError:
    return AuthenticationError(f"cannot {op} {uri}: access denied; check the storage credentials and permissions")


def _changed(uri: str) -> IntegrityError:
    return IntegrityError(
        f"{uri} changed while it was being read; refusing to mix two versions of it: "
        "published objects must not be replaced"
    )


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (at most 300 characters), or its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def size_error(uri: str, exc: TooLarge, expected_size: int | None) -> TrainVaultError:
    """`IntegrityError` for an object whose binding gives another size, else `ObjectTooLargeError`."""
    found = f"{exc.size} bytes" if exc.size is not None else f"more than {exc.limit} bytes"
    if expected_size is not None and exc.limit == expected_size:
        return IntegrityError(
            f"{uri} is {found}, but it is bound as {expected_size} bytes; it was truncated, extended or replaced "
            "after it was bound: nothing from it is used"
        )
    return ObjectTooLargeError(
        f"{uri} is {found}, over the {exc.limit}-byte limit of this read; refusing to read it. If it is a "
        "legitimate document, raise StorageConfig.max_document_bytes"
    )
