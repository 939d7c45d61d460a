"""Real services and real processes for tests: the machine's PostgreSQL, Redis and RabbitMQ,
and processes on 127.0.0.1 that a test starts, waits for and always stops.

Every process runs in its own process group (its children too: a Celery worker's pool,
a webserver's code server), logs to a file in the test's tmp dir, and is stopped by its
group id (SIGTERM, then SIGKILL) when the fixture that started it ends, also when a test
failed. Every wait has a deadline and says what it waited for.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

#: The services every machine of this project runs (see README "Deploy").
SERVICES = {"PostgreSQL": 5432, "Redis": 6379, "RabbitMQ": 5672}
REQUIRE_ENV = "TRAINVAULT_REQUIRE_SERVICES"
BIN = Path(sys.executable).parent
VHOST_SCRIPT = Path(__file__).resolve().parents[2] / "pipelines" / "deploy" / "rabbitmq-vhost.sh"
T = TypeVar("T")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def require_services(*names: str) -> None:
    """Skip (or, with TRAINVAULT_REQUIRE_SERVICES=1 as in CI, fail) when a service is down."""
    missing = [f"{name} (127.0.0.1:{SERVICES[name]})" for name in names if not port_open(SERVICES[name])]
    if not missing:
        return
    reason = "service not running: " + ", ".join(missing)
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason}; {REQUIRE_ENV} is set, so a missing service is a failure", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A 127.0.0.1 port free right now (bound, read, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll `predicate` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def _die_with_parent() -> None:
    os.setsid()  # its own process group: stopping the group stops its children too
    # SIGTERM if pytest dies hard, so no server outlives the session holding a port.
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)


@dataclass
class Process:
    """One started process: its name, argv, log file and Popen handle."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-chars:]

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def kill9(self) -> None:
        """SIGKILL to the whole group, as a crashed machine would do it; reaped here."""
        self.signal_group(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL after `grace` s; then the group's stragglers too."""
        if self.alive():
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace)
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


@dataclass
class Processes:
    """The processes one fixture started, in start order; `stop_all` stops them in reverse."""

    log_dir: Path
    env: dict[str, str]
    started: list[Process] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ready: Callable[[Process], bool] | None = None,
        timeout: float = 120.0,
    ) -> Process:
        """Start `argv` (a name under the venv's bin/ or a path), wait until `ready` (bounded)."""
        exe = argv[0] if "/" in argv[0] else str(BIN / argv[0])
        log = self.log_dir / f"{name}.{len([p for p in self.started if p.name == name])}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                [exe, *argv[1:]],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env, **(env or {})},
                cwd=cwd,
                preexec_fn=_die_with_parent,
            )
        proc = Process(name, [exe, *argv[1:]], log, popen)
        self.started.append(proc)
        if ready is not None:
            self.wait_ready(proc, ready, timeout)
        return proc

    def wait_ready(self, proc: Process, ready: Callable[[Process], bool], timeout: float) -> None:
        def check() -> bool:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log_tail()}")
            return ready(proc)

        try:
            wait_for(check, timeout, f"{proc.name} to be ready")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{proc.log_tail()}") from None

    def get(self, name: str) -> Process:
        """The latest started process of this name."""
        return [p for p in self.started if p.name == name][-1]

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()

    def report(self, chars: int = 3000) -> str:
        """Each process's log tail: printed when a test using them failed."""
        return "\n".join(f"----- {p.name} (pid {p.pid}, {p.log}) -----\n{p.log_tail(chars)}" for p in self.started)


@contextlib.contextmanager
def processes(log_dir: Path, env: dict[str, str], request: pytest.FixtureRequest) -> Iterator[Processes]:
    """Processes stopped on exit whatever happened; their logs printed if any test failed meanwhile."""
    log_dir.mkdir(parents=True, exist_ok=True)
    failed_before = request.session.testsfailed
    procs = Processes(log_dir, env)
    try:
        yield procs
    except BaseException:
        sys.stderr.write(procs.report())
        raise
    else:
        if request.session.testsfailed > failed_before:
            sys.stderr.write(procs.report())
    finally:
        procs.stop_all()


@contextlib.contextmanager
def postgres_db(name: str) -> Iterator[str]:
    """A fresh PostgreSQL database `name` for one instance's run, event log and schedule storage;
    dropped afterwards (also while its processes still hold connections)."""
    require_services("PostgreSQL")
    import psycopg2

    admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="test", connect_timeout=5)
    admin.autocommit = True
    try:
        admin.cursor().execute(f'CREATE DATABASE "{name}"')
        yield name
    finally:
        admin.cursor().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@contextlib.contextmanager
def rabbitmq_vhost(name: str) -> Iterator[str]:
    """A RabbitMQ vhost of its own for one deployment, deleted afterwards with its queues; yields
    the broker URL. Made by pipelines/deploy/rabbitmq-vhost.sh, as `make deploy-local` makes its own."""
    require_services("RabbitMQ")

    def run(action: str) -> str:
        done = subprocess.run(
            [str(VHOST_SCRIPT), action, name], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
        )
        if done.returncode:
            pytest.fail(f"rabbitmq-vhost.sh {action} {name}: {done.stderr.strip()}", pytrace=False)
        return done.stdout.strip()

    broker = run("add")
    try:
        yield broker
    finally:
        run("delete")


def base_env(**extra: str) -> dict[str, str]:
    """This environment without proxies or cloud credentials, the venv's bin first on PATH."""
    drop = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "AWS_", "TRAINVAULT_", "DAGSTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return {**env, **extra}
