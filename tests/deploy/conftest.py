"""Fixtures of the deployment tests: the machine's services and the processes a test starts
(support.services), Dagster deployments on 127.0.0.1 (support.deployment), and the example
generator behind a gate a test holds (support.gated_records)."""

from __future__ import annotations

from types import ModuleType

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
