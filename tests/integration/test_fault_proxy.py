"""The fault tests' TCP proxy itself: it must outlive the faults it injects."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.integration.fault_proxy import FaultProxy

pytestmark = pytest.mark.integration

CONNECTIONS = 150


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A local server that echoes each connection's bytes back, one thread per connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stopped = threading.Event()

    def echo(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            while data := connection.recv(1024):
                connection.sendall(data)

    def serve() -> None:
        while not stopped.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=echo, args=(connection,), daemon=True).start()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    yield listener.getsockname()[1]
    stopped.set()
    server.join()
    listener.close()


def test_the_proxy_keeps_accepting_while_resets_race_new_connections(echo_port: int) -> None:
    """reset_all() in a tight loop while connections arrive: a pair can be closed between
    accept() and its relays starting. Each such connection fails; the proxy does not."""
    proxy = FaultProxy(target_port=echo_port).start()
    stop = threading.Event()

    def keep_resetting() -> None:
        while not stop.is_set():
            proxy.reset_all()

    resetter = threading.Thread(target=keep_resetting, daemon=True)
    resetter.start()
    try:
        for _ in range(CONNECTIONS):
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as connection,
            ):
                connection.sendall(b"ping")
                connection.recv(4)
    finally:
        stop.set()
        resetter.join()

    time.sleep(0.2)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as connection:
        connection.sendall(b"still here")
        assert connection.recv(1024) == b"still here"
    proxy.stop()
