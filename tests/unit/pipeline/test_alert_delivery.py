"""WebhookSender's bounds: a total deadline per POST, a shutdown that never waits on the
receiver, and a WARNING line for every alert it did not deliver; against local servers."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from contracts import Alert
from tests import factories
from tests.conftest import FIXED_NOW
from worker.pipeline.alert_delivery import (
    JOIN_GRACE_SECONDS,
    SOURCE_OF_TRUTH,
    UNDELIVERED,
    AlertSink,
    WebhookSender,
)

Logs = list[MutableMapping[str, Any]]


def payload(n: int) -> dict[str, Any]:
    """Alert number n as the sink posts it, reduced to what the sender reads: its hash."""
    return {"event": "evidence_coverage.nondeterminism", "input_hash": f"{n:064x}", "n": n}


def undelivered(logs: Logs) -> list[MutableMapping[str, Any]]:
    return [line for line in logs if line["event"] == UNDELIVERED]


class TrickleServer:
    """Reads a request, then answers one byte per second: the status line and headers
    (`part="head"`), or complete headers and then the body (`part="body"`)."""

    RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 60\r\n\r\n" + b"x" * 60

    def __init__(self, part: str) -> None:
        self.part = part
        self.requests = 0
        self.sent = 0  # bytes written to clients so far
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/alerts"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65_536)
            self.requests += 1
            head, _, body = self.RESPONSE.partition(b"\r\n\r\n")
            first, rest = (
                (b"", self.RESPONSE) if self.part == "head" else (head + b"\r\n\r\n", body)
            )
            try:
                conn.sendall(first)
                self.sent += len(first)
                for byte in rest:
                    if self._stop.wait(1.0):
                        return
                    conn.sendall(bytes([byte]))
                    self.sent += 1
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


class HangingServer(http.server.ThreadingHTTPServer):
    """Answers the first `answered` POSTs with 200, then reads each later one and never
    answers; keeps every body in arrival order."""

    daemon_threads = True

    def __init__(self, answered: int) -> None:
        super().__init__(("127.0.0.1", 0), HangingHandler)
        self.answered = answered
        self.bodies: list[dict[str, Any]] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/alerts"

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        """Bounded wait until `count` POSTs have arrived."""
        deadline = time.monotonic() + timeout
        while len(self.bodies) < count:
            assert time.monotonic() < deadline, f"{len(self.bodies)} POSTs, expected {count}"
            time.sleep(0.005)


class HangingHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection carries the answered POSTs

    def do_POST(self) -> None:  # http.server dispatches on this name
        server: HangingServer = self.server  # type: ignore[assignment]
        server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        if len(server.bodies) > server.answered:
            server.release.wait(60)
            return
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        """Keep the test output quiet."""


@pytest.fixture
def trickle() -> Iterator[Callable[[str], TrickleServer]]:
    servers: list[TrickleServer] = []

    def start(part: str) -> TrickleServer:
        servers.append(TrickleServer(part))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def hanging() -> Iterator[Callable[[int], HangingServer]]:
    """Factory: a server that answers `answered` POSTs, then hangs; released afterwards."""
    servers: list[HangingServer] = []

    def start(answered: int) -> HangingServer:
        server = HangingServer(answered)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("part", ["head", "body"])
def test_a_trickling_receiver_is_abandoned_at_the_deadline_and_the_alert_logged(
    trickle: Callable[[str], TrickleServer], part: str
) -> None:
    """One byte a second, in the headers or the body: the POST ends at its 1.5 s deadline
    (a 2 s read timeout never fires), and the alert is one webhook_undelivered line."""
    server = trickle(part)
    sender = WebhookSender(
        server.url, timeout_seconds=2.0, retries=1, deadline_seconds=1.5, drain_seconds=30.0
    )

    with capture_logs() as logs:
        started = time.monotonic()
        sender.send(payload(1))
        sender.close()
        elapsed = time.monotonic() - started

    assert 1.5 <= elapsed < 2.5
    assert (server.requests, sender.delivered) == (1, 0)
    assert server.sent < len(TrickleServer.RESPONSE)
    assert logs == [
        {
            "event": UNDELIVERED,
            "log_level": "warning",
            "input_hash": payload(1)["input_hash"],
            "raised_at": None,
            "cause": "failed",
            "attempts": 1,
            "problem": "no answer within the 1.5 s deadline",
            "note": SOURCE_OF_TRUTH,
        }
    ]


def test_close_returns_within_its_bound_with_1000_alerts_queued_for_a_hanging_receiver(
    hanging: Callable[[int], HangingServer],
) -> None:
    """3 POSTs answered, the 4th hangs, 996 wait: close(1.0) returns within its bound and
    logs each of the 997 undelivered hashes once; 3 delivered + 997 undelivered = 1000."""
    server = hanging(3)
    sender = WebhookSender(server.url, deadline_seconds=60.0, drain_seconds=1.0)
    alerts = [payload(n) for n in range(1, 1001)]

    with capture_logs() as logs:
        for alert in alerts:
            sender.send(alert)
        server.wait_for(4)  # the 4th is in flight, unanswered
        started = time.monotonic()
        sender.close()
        elapsed = time.monotonic() - started

    assert elapsed < 1.0 + JOIN_GRACE_SECONDS
    hashes = [line["input_hash"] for line in undelivered(logs)]
    assert len(hashes) == len(set(hashes)) == 997
    assert set(hashes) == {alert["input_hash"] for alert in alerts[3:]}
    assert sender.delivered == 3
    assert sender.delivered + len(hashes) == len(alerts)
    assert {line["cause"] for line in undelivered(logs)} == {"shutdown"}
    assert undelivered(logs)[0] == {
        "event": UNDELIVERED,
        "log_level": "warning",
        "input_hash": alerts[3]["input_hash"],
        "raised_at": None,
        "cause": "shutdown",
        "attempts": 1,
        "problem": "no answer before shutdown",
        "note": SOURCE_OF_TRUTH,
    }
    assert len(logs) == 997


def test_a_working_webhook_receives_every_alert_once_in_order(
    hanging: Callable[[int], HangingServer],
) -> None:
    """500 alerts sent at once to a receiver that answers: 500 POSTs in order, no warning."""
    server = hanging(10_000)
    sender = WebhookSender(server.url)
    alerts = [payload(n) for n in range(1, 501)]

    with capture_logs() as logs:
        for alert in alerts:
            sender.send(alert)
        sender.close(timeout=30.0)

    assert (server.bodies, sender.delivered, logs) == (alerts, 500, [])


def test_an_alert_the_full_queue_cannot_take_is_logged_at_once(
    hanging: Callable[[int], HangingServer],
) -> None:
    """Queue of 2, first POST hanging: the 4th alert is logged as queue_full on send, and at
    close the one in flight and the two queued are logged as shutdown, in that order."""
    server = hanging(0)
    sender = WebhookSender(server.url, deadline_seconds=60.0, queue_size=2)

    with capture_logs() as logs:
        sender.send(payload(1))
        server.wait_for(1)
        for n in (2, 3, 4):
            sender.send(payload(n))
        full = [(line["input_hash"], line["cause"]) for line in undelivered(logs)]
        sender.close(timeout=0.5)

    assert full == [(payload(4)["input_hash"], "queue_full")]
    assert [(line["input_hash"], line["cause"]) for line in undelivered(logs)] == [
        (payload(4)["input_hash"], "queue_full"),
        (payload(1)["input_hash"], "shutdown"),
        (payload(2)["input_hash"], "shutdown"),
        (payload(3)["input_hash"], "shutdown"),
    ]
    assert sender.delivered == 0


def test_an_alert_raised_after_close_is_logged_with_its_raised_at() -> None:
    """After shutdown the sink still writes the ERROR line, and the webhook's line names the
    hash and raised_at that `alerts --since` takes."""
    sender = WebhookSender("http://127.0.0.1:9/never")
    sender.close()
    alert = Alert(
        input_hash="c" * 64,
        first=factories.attempt(),
        observed=factories.attempt(case_id="refund-002", value=1 / 3),
        raised_at=FIXED_NOW,
    )

    with capture_logs() as logs:
        AlertSink(sender).raise_alert(alert)

    assert [line["event"] for line in logs] == ["evidence_coverage.nondeterminism", UNDELIVERED]
    assert logs[1] == {
        "event": UNDELIVERED,
        "log_level": "warning",
        "kind": "nondeterminism",
        "input_hash": "c" * 64,
        "raised_at": "2026-12-01T12:00:00Z",
        "cause": "shutdown",
        "note": SOURCE_OF_TRUTH,
    }


def test_closing_twice_returns_at_once() -> None:
    """AlertSink.close and a process shutdown hook may both close the sender."""
    sender = WebhookSender("http://127.0.0.1:9/never")
    sender.close()
    started = time.monotonic()

    sender.close()

    assert time.monotonic() - started < 0.5
