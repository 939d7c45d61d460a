"""Storage settings: `StorageConfig`, the environment variables behind it, and the checks an
S3 client needs before it is built."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from trainvault.errors import ConfigurationError, StorageError
from trainvault.uris import Location

#: The environment variable behind each S3 setting: read by `StorageConfig.from_env`, the
#: command line and the Dagster resource. Nothing else (no ``AWS_*``) is read for them.
S3_ENV_VARS = {
    "s3_base_url": "TRAINVAULT_S3_URL",
    "region": "TRAINVAULT_S3_REGION",
    "access_key_id": "TRAINVAULT_S3_KEY_ID",
    "secret_access_key": "TRAINVAULT_S3_SECRET",
}


@dataclass(frozen=True)
class StorageConfig:
    """Endpoint, credentials and time limits for object storage.

    Holds configuration only (no clients), so it pickles into worker processes.
    Credentials never appear in its repr.
    """

    s3_base_url: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    request_timeout_s: float = 600.0
    #: Retries inside one client call (obstore's own, short on purpose).
    client_retries: int = 3
    client_retry_timeout_s: float = 60.0
    #: trainvault's recovery: retry with a fresh client until this long passes without progress.
    recovery_window_s: float = 900.0
    #: Attempts (each with `client_retries`) at an endpoint that has never answered this process:
    #: a wrong or dead endpoint fails in seconds instead of riding out the recovery window.
    first_contact_attempts: int = 2
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 15.0
    #: The largest JSON document (manifest, descriptor, request, ...) trainvault reads.
    max_document_bytes: int = 64 << 20

    def __repr__(self) -> str:
        hidden = "***" if self.access_key_id or self.secret_access_key else None
        return (
            f"StorageConfig(s3_base_url={self.s3_base_url!r}, region={self.region!r}, "
            f"credentials={hidden!r}, connect_timeout_s={self.connect_timeout_s}, "
            f"read_timeout_s={self.read_timeout_s}, request_timeout_s={self.request_timeout_s}, "
            f"recovery_window_s={self.recovery_window_s})"
        )

    def with_overrides(self, **changes: Any) -> StorageConfig:
        return replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StorageConfig:
        """Endpoint, region and keys from the `S3_ENV_VARS` variables (unset or empty: None)."""
        env = os.environ if environ is None else environ

        def setting(name: str) -> str | None:
            return env.get(S3_ENV_VARS[name]) or None

        return cls(
            s3_base_url=setting("s3_base_url"),
            region=setting("region"),
            access_key_id=setting("access_key_id"),
            secret_access_key=setting("secret_access_key"),
        )


def require_s3_settings(cfg: StorageConfig, uri: str) -> None:
    """Refuse before any network call: without an endpoint and keys, the client would try a
    public cloud endpoint and its credential service (which hang on a closed network)."""
    missing = [f"{var} ({name})" for name, var in S3_ENV_VARS.items() if name != "region" and not getattr(cfg, name)]
    if missing:
        region = "" if cfg.region else f" (and {S3_ENV_VARS['region']} if the service needs a region)"
        raise StorageError(
            f"cannot reach {uri}: S3 storage is not configured: set {', '.join(missing)}{region} in the "
            "environment (read by the command line, the pipeline and TrainVault.from_env()), or pass the "
            "settings to TrainVault(...)"
        )


_S3_DURATIONS = (
    "connect_timeout_s",
    "read_timeout_s",
    "request_timeout_s",
    "client_retry_timeout_s",
    "recovery_window_s",
    "backoff_initial_s",
    "backoff_max_s",
)
_S3_COUNTS = {"client_retries": 0, "first_contact_attempts": 1}
#: Longest duration and largest count a setting may hold (the client's own types overflow beyond).
_S3_MAX_SECONDS = 10**9
_S3_MAX_COUNT = 10**6
#: Region and keys travel in request headers: visible ASCII only.
_HEADER_SAFE = re.compile(r"[!-~]+")
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_s3_values(cfg: StorageConfig, loc: Location) -> None:
    """Refuse what the S3 client would reject obscurely, or panic on at the first request (an
    endpoint, header or bucket it cannot form), before anything is sent. Keys are never shown."""
    if not _BUCKET.fullmatch(loc.bucket):
        raise StorageError(
            f"{loc.uri}: bucket {loc.bucket!r} is not an S3 bucket name (letters, digits, '.', '_', '-')"
        )
    problems = [p for p in [_endpoint_problem(cfg.s3_base_url)] if p]
    problems += _header_problems(cfg) + _number_problems(cfg)
    if problems:
        raise ConfigurationError(f"S3 settings: {'; '.join(problems)}; fix them in StorageConfig or TrainVault(...)")


def _endpoint_problem(url: str | None) -> str | None:
    try:
        parts = urlsplit(url or "")
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts and port_ok and parts.scheme in ("http", "https") and parts.hostname and _HEADER_SAFE.fullmatch(url or ""):
        return None
    return (
        f"s3_base_url ({S3_ENV_VARS['s3_base_url']}) must be an http:// or https:// URL with a host (and a port "
        f"in 1..65535), got {url!r}"
    )


def _header_problems(cfg: StorageConfig) -> list[str]:
    problems = []
    for name in ("region", "access_key_id", "secret_access_key"):
        value = getattr(cfg, name)
        if value is not None and not (isinstance(value, str) and _HEADER_SAFE.fullmatch(value)):
            shown = f", got {value!r}" if name == "region" else ""
            problems.append(f"{name} ({S3_ENV_VARS[name]}) must be visible ASCII characters without spaces{shown}")
    return problems


def _number_problems(cfg: StorageConfig) -> list[str]:
    problems = []
    for name in _S3_DURATIONS:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= _S3_MAX_SECONDS:
            problems.append(f"{name} must be a number of seconds in 0..{_S3_MAX_SECONDS}, got {value!r}")
    for name, least in _S3_COUNTS.items():
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= _S3_MAX_COUNT:
            problems.append(f"{name} must be an int in {least}..{_S3_MAX_COUNT}, got {value!r}")
    return problems
