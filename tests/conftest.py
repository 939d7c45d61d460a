"""Fixtures every layer shares: real stores only (a temp folder, memory://, and a moto S3 server
on 127.0.0.1), the S3 test settings, and the `slow` marker's --runslow switch.

The tests follow the code's layers. `library/<package>/` tests one package of trainvault (the
lowest package a test is about; `library/` itself holds the cross-package checks: public surface,
golden bytes); it never imports Dagster and runs under pytest-xdist (`make test-fast`), so it uses
no fixed port or shared folder. `location/` is the code location in process, `deploy/` the
deployments, services and launch paths, `docs/` the README. Code that is not a fixture lives in
`support/`; the conftest of the layer that needs it hands it to tests as a fixture.
"""

from __future__ import annotations

import ctypes
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import s3

from trainvault import StorageConfig, TrainVault


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _die_with_parent() -> None:
    # The server gets SIGTERM if pytest dies hard, so no orphan keeps its port.
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moto S3 HTTP server on an ephemeral 127.0.0.1 port; yields its endpoint."""
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    exe = Path(sys.executable).with_name("moto_server")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(exe), "-H", "127.0.0.1", "-p", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
    try:
        deadline = time.monotonic() + 30
        while not (m := re.search(rb"Running on http://127\.0\.0\.1:(\d+)", log_path.read_bytes())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto_server failed to start:\n" + log_path.read_text())
            time.sleep(0.05)
        endpoint = f"http://127.0.0.1:{int(m.group(1))}"
        while True:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield endpoint
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def s3_config() -> Callable[..., StorageConfig]:
    """`s3_config(endpoint, **overrides)`: a StorageConfig for the test server, its credentials set."""
    return s3.s3_config


@pytest.fixture(scope="session")
def s3_key_id() -> str:
    return s3.S3_KEY


@pytest.fixture(scope="session")
def s3_secret() -> str:
    return s3.S3_SECRET


@pytest.fixture(scope="session")
def closed_loopback_port() -> Callable[[], int]:
    """`closed_loopback_port()`: a 127.0.0.1 port nothing listens on."""
    return s3.closed_loopback_port


@pytest.fixture(scope="session")
def env_without_s3_settings() -> Callable[..., dict[str, str]]:
    """`env_without_s3_settings(**extra)`: this environment less every S3 setting, plus `extra`."""
    return s3.env_without_s3_settings


@pytest.fixture
def s3_bucket(s3_server: str) -> Iterator[str]:
    """A fresh bucket per test (created with an unsigned PUT; moto accepts it)."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    urllib.request.urlopen(urllib.request.Request(f"{s3_server}/{name}", method="PUT"), timeout=5).read()
    yield name


@pytest.fixture
def s3_vault(s3_server: str) -> TrainVault:
    return TrainVault(storage=s3.s3_config(s3_server))


@pytest.fixture(params=["local", "memory", "s3"])
def vault_root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[TrainVault, str]:
    """(TrainVault, root URI of an empty folder) on each real store."""
    if request.param == "local":
        return TrainVault(), str(tmp_path / "ds")
    if request.param == "memory":
        return TrainVault(), f"memory://{uuid.uuid4().hex}/ds"
    server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return TrainVault(storage=s3.s3_config(server)), f"s3://{bucket}/ds"
