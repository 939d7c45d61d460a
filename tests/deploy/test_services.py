"""The services check the deployment tests start with: a missing service skips them with a
reason naming it, or fails them when TRAINVAULT_REQUIRE_SERVICES=1 (as `.ci/run` sets)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def missing(closed_loopback_port: Callable[[], int], services: ModuleType, monkeypatch) -> str:
    port = closed_loopback_port()
    monkeypatch.setitem(services.SERVICES, "Nothing", port)
    return f"Nothing (127.0.0.1:{port})"


def test_a_missing_service_skips_naming_it(services: ModuleType, missing, monkeypatch) -> None:
    monkeypatch.delenv(services.REQUIRE_ENV, raising=False)
    with pytest.raises(
        pytest.skip.Exception, match=rf"service not running: {missing.replace('(', '[(]').replace(')', '[)]')}"
    ):
        services.require_services("Nothing")


def test_a_missing_service_fails_when_services_are_required(services: ModuleType, missing, monkeypatch) -> None:
    monkeypatch.setenv(services.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="TRAINVAULT_REQUIRE_SERVICES is set"):
        services.require_services("Nothing")


def test_a_running_service_passes(services: ModuleType, monkeypatch) -> None:
    monkeypatch.setenv(services.REQUIRE_ENV, "1")
    with services.socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setitem(services.SERVICES, "Listener", listener.getsockname()[1])
        services.require_services("Listener")


def test_stopping_a_process_stops_its_children_and_a_failed_start_names_it(
    services: ModuleType, tmp_path, request
) -> None:
    import os

    pid_file = tmp_path / "child.pid"
    with (
        pytest.raises(TimeoutError, match="never to be ready"),
        services.processes(tmp_path / "logs", services.base_env(), request) as procs,
    ):
        shell = procs.start(
            "shell",
            ["/bin/bash", "-c", f"sleep 300 & echo $! > {pid_file}; wait"],
            ready=lambda p: pid_file.exists() and pid_file.read_text().strip() != "",
        )
        child = int(pid_file.read_text())
        # A second process that never gets ready: the start fails on its deadline, naming it.
        procs.start("never", ["/bin/sleep", "300"], ready=lambda p: False, timeout=1)
    assert not shell.alive()

    def gone() -> bool:  # the orphaned child is reaped by init shortly after its group was killed
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    services.wait_for(gone, 10, f"child {child} of the stopped shell to be gone")
