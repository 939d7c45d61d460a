"""`make ui`, `make deploy-local` and the instances they write, before anything is served (issue 25):
a taken port fails at once, naming it; a fresh instance has Dagster's "Join the Dagster
community" dialog off. The deployments themselves run in tests/deploy/test_deploy_celery.py."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

dg = pytest.importorskip("dagster")

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parents[1]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A 127.0.0.1 port something listens on for the test's length."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def make(services: ModuleType) -> Callable[..., subprocess.CompletedProcess]:
    def make(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """`make` in the repository with this venv, never rebuilding it (-o its stamp)."""
        return subprocess.run(
            ["make", "-o", f"{VENV}/.installed", f"VENV={VENV}", *args],
            cwd=REPO,
            env=services.base_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    return make


def test_make_ui_on_a_taken_port_fails_at_once_naming_it(
    make: Callable[..., subprocess.CompletedProcess], taken_port, tmp_path
) -> None:
    done = make("ui", f"UI_PORT={taken_port}", f"DAGSTER_HOME_DIR={tmp_path / 'home'}")
    assert done.returncode != 0
    assert f"port {taken_port} on 127.0.0.1 (UI_PORT) is taken" in done.stderr, done.stderr
    assert "Serving" not in done.stdout + done.stderr


def test_local_sh_on_a_taken_port_fails_before_making_anything(services: ModuleType, taken_port, tmp_path) -> None:
    env = services.base_env(VENV=str(VENV), UI_PORT=str(taken_port), DAGSTER_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        [str(REPO / "pipelines" / "deploy" / "local.sh")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    assert f"port {taken_port} on 127.0.0.1 (UI_PORT) is taken" in done.stderr, done.stderr
    assert not (tmp_path / "home").exists()  # no instance, no database, no vhost made


def test_the_demo_instance_the_makefile_writes_has_the_community_dialog_off(
    make: Callable[..., subprocess.CompletedProcess], tmp_path
) -> None:
    home = tmp_path / "home"
    done = make(f"{home}/dagster.yaml", f"DAGSTER_HOME_DIR={home}")
    assert done.returncode == 0, done.stderr
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert not instance.nux_enabled


@pytest.mark.parametrize("name", ["dagster-celery.yaml", "dagster-k8s.yaml"])
def test_the_deployed_instances_have_the_community_dialog_off(name) -> None:
    # dagster-celery.yaml is also served in tests/deploy/test_deploy_celery.py (shouldShowNux is false).
    assert yaml.safe_load((REPO / "pipelines" / "deploy" / name).read_text())["nux"] == {"enabled": False}
