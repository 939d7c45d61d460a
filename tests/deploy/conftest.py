"""Fixtures of the deployment tests: the machine's services and the processes a test starts
(support.services), Dagster deployments on 127.0.0.1 (support.deployment), and the example
generator behind a gate a test holds (support.gated_records)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import deployment, gated_records
from support import services as services_module


@pytest.fixture(scope="session")
def services() -> ModuleType:
    """support.services: `require_services`, `processes`, `postgres_db`, `rabbitmq_vhost`, `wait_for`, ..."""
    return services_module


@pytest.fixture(scope="session")
def dagster_deploy() -> ModuleType:
    """support.deployment: `Deployment` (code server, webserver, daemon, workers) and its catalog helpers."""
    return deployment


@pytest.fixture(scope="session")
def gated() -> ModuleType:
    """support.gated_records: the example generator whose "hard" shards wait for the file named by `GATE_ENV`."""
    return gated_records


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    """A page of Debian's Chromium (never a downloaded browser) on a fresh profile; 60 s per action."""
    if not deployment.CHROMIUM.exists():
        pytest.fail(f"{deployment.CHROMIUM} is missing: `make chromium` installs Debian's package", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=str(deployment.CHROMIUM),
            headless=True,
            args=deployment.CHROMIUM_FLAGS,
            viewport={"width": 2400, "height": 1200},
        )
        context.set_default_timeout(60_000)
        try:
            yield context.new_page()
        finally:
            context.close()
