"""Where the tests' servers are, and the rule that a test needing one is marked `integration`.

Redis: the machine's on 6379 in a plain `pytest` run; under pytest-xdist each worker process
starts a redis-server of its own on a free port (tests/conftest.py) and names it in
TEST_REDIS_PORT before any test module is imported, so two workers never share a broker's
queues, kombu's unacked index or a store's keys. RabbitMQ is the machine's on 5672 (every test
declares a queue of its own there).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REDIS_PORT_VARIABLE = "TEST_REDIS_PORT"
MACHINE_REDIS_PORT = 6379
AMQP_PORT = 5672
START_TIMEOUT_SECONDS = 30.0

# Programs that are servers (or start one): a test that runs them needs the `integration` mark.
SERVER_PROGRAMS = frozenset({"redis-server", "rabbitmq-server", "celery", "prometheus"})

MARK_HINT = (
    "add `pytestmark = pytest.mark.integration` to its module (after the imports; move the "
    "module to tests/integration/ if it is under tests/unit/), or mark the test or the "
    "parameter that needs the server with `pytest.mark.integration`"
)


def redis_port() -> int:
    """The port of the Redis the integration tests use (see the module docstring)."""
    return int(os.environ.get(REDIS_PORT_VARIABLE, MACHINE_REDIS_PORT))


def server_ports() -> frozenset[int]:
    """The ports a test connecting to is using a server: Redis (both) and RabbitMQ."""
    return frozenset({MACHINE_REDIS_PORT, redis_port(), AMQP_PORT})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerUse:
    """What one unmarked test did that needs a server: each attempt is refused and noted."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.ports = server_ports()
        self.used: list[str] = []

    def check_address(self, address: object) -> None:
        """Refuse a connection to Redis or RabbitMQ."""
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in self.ports:
            self.used.append(f"connects to {address[0]}:{address[1]}")
            raise ConnectionRefusedError(f"{self.nodeid} is not marked integration")

    def check_program(self, args: object) -> None:
        """Refuse to start a server program."""
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)  # type: ignore[call-overload]
        program = os.path.basename(os.fsdecode(argv[0])) if argv else ""
        if program in SERVER_PROGRAMS:
            self.used.append(f"runs {program}")
            raise PermissionError(f"{self.nodeid} is not marked integration")

    def complaint(self) -> str | None:
        """The failure message, or None when the test used no server."""
        if not self.used:
            return None
        return (
            f"{self.nodeid} needs a server ({'; '.join(sorted(set(self.used)))}) but is not "
            f"marked integration: {MARK_HINT}"
        )


class PrivateRedis:
    """A redis-server of one pytest-xdist worker's own: no persistence, stopped at the end."""

    def __init__(self) -> None:
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="test-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            return  # the integration tests say Redis is missing, loudly (check_redis)
        self.process = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory), "--logfile", "redis.log"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                os.environ[REDIS_PORT_VARIABLE] = str(self.port)
                return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start: {self.directory}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def servers_need_the_mark(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A test not marked `integration` that connects to Redis or RabbitMQ, or starts a server,
    fails with what to add: `make check` runs exactly the unmarked tests, with no server up."""
    if request.node.get_closest_marker("integration") is not None:
        yield
        return
    use = ServerUse(request.node.nodeid)
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_popen_init = subprocess.Popen.__init__

    def connect(self: socket.socket, address: Any) -> None:
        use.check_address(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        use.check_address(address)
        return real_connect_ex(self, address)

    def popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        use.check_program(args)
        real_popen_init(self, args, *rest, **options)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)
    yield
    complaint = use.complaint()
    if complaint is not None:
        pytest.fail(complaint, pytrace=False)
