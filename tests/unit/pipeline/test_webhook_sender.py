"""WebhookSender against a local HTTP server: retries, giving up, and never raising."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from worker.pipeline.alert_delivery import SOURCE_OF_TRUTH, WebhookSender


class RecordingHandler(http.server.BaseHTTPRequestHandler):
    """Answers POSTs with the server's next status and keeps each JSON body."""

    def do_POST(self) -> None:  # http.server dispatches on this name
        length = int(self.headers["Content-Length"])
        server: RecordingServer = self.server  # type: ignore[assignment]
        server.bodies.append(json.loads(self.rfile.read(length)))
        status = server.statuses.pop(0) if len(server.statuses) > 1 else server.statuses[0]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        """Keep the test output quiet."""


class RecordingServer(http.server.ThreadingHTTPServer):
    def __init__(self, statuses: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), RecordingHandler)
        self.statuses = statuses
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/alerts"


@pytest.fixture
def webhook_server() -> Iterator[Callable[..., RecordingServer]]:
    """Factory: a server answering with `statuses` in turn (the last one repeats)."""
    servers: list[RecordingServer] = []

    def start(*statuses: int) -> RecordingServer:
        server = RecordingServer(list(statuses))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


PAYLOAD = {"event": "evidence_coverage.nondeterminism", "input_hash": "a" * 64}


def deliver(url: str, *, retries: int = 3) -> list[MutableMapping[str, Any]]:
    """Send one payload and close (which waits for delivery); return the captured log."""
    with capture_logs() as logs:
        sender = WebhookSender(url, timeout_seconds=2.0, retries=retries)
        sender.send(PAYLOAD)
        sender.close(timeout=10.0)
    return logs


def test_a_webhook_answering_200_gets_one_post_of_the_payload(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """Success on the first try: one POST carrying the alert JSON, no warning."""
    server = webhook_server(200)

    logs = deliver(server.url)

    assert (server.bodies, logs) == ([PAYLOAD], [])


def test_a_webhook_answering_500_is_retried_until_it_succeeds(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """500, 500, then 200: three POSTs and no warning."""
    server = webhook_server(500, 500, 200)

    logs = deliver(server.url)

    assert (server.bodies, logs) == ([PAYLOAD] * 3, [])


def test_a_webhook_that_keeps_failing_is_given_up_after_its_retries(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """Always 500: exactly `retries` POSTs, then one webhook_undelivered warning."""
    server = webhook_server(500)

    logs = deliver(server.url, retries=2)

    assert server.bodies == [PAYLOAD] * 2
    assert logs == [
        {
            "event": "evidence_coverage.webhook_undelivered",
            "log_level": "warning",
            "input_hash": "a" * 64,
            "raised_at": None,
            "cause": "failed",
            "attempts": 2,
            "problem": "HTTP 500",
            "note": SOURCE_OF_TRUTH,
        }
    ]


def test_a_client_error_from_the_webhook_is_not_retried(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """A 4xx means the request itself is wrong: one POST, no retry, no warning."""
    server = webhook_server(404)

    logs = deliver(server.url)

    assert (server.bodies, logs) == ([PAYLOAD], [])


def test_an_unreachable_webhook_never_raises() -> None:
    """Connection refused: send() and close() return, and the failure is one warning."""
    logs = deliver(f"http://127.0.0.1:{unused_port()}/alerts")

    assert logs == [
        {
            "event": "evidence_coverage.webhook_undelivered",
            "log_level": "warning",
            "input_hash": "a" * 64,
            "raised_at": None,
            "cause": "failed",
            "attempts": 3,
            "problem": "ConnectError",
            "note": SOURCE_OF_TRUTH,
        }
    ]
