"""Settings for the moto S3 test server (`s3_server` in tests/conftest.py), and the environment
a command sees without any S3 settings."""

from __future__ import annotations

import os
import socket
from typing import Any

from trainvault import StorageConfig

S3_KEY = "testing-access-key"
S3_SECRET = "testing-secret-key-never-shown"


def s3_config(endpoint: str, **overrides: object) -> StorageConfig:
    base: dict[str, Any] = dict(
        s3_base_url=endpoint,
        region="us-east-1",
        access_key_id=S3_KEY,
        secret_access_key=S3_SECRET,
        connect_timeout_s=2.0,
        read_timeout_s=30.0,
        client_retries=3,
        recovery_window_s=30.0,
    )
    base.update(overrides)
    return StorageConfig(**base)


def closed_loopback_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, read, closed): connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def env_without_s3_settings(**extra: str) -> dict[str, str]:
    """This process's environment less every TRAINVAULT_S3_* and AWS_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINVAULT_S3_", "AWS_"))}
    return {**env, **extra}
