"""Nondeterminism alerts to a webhook, from a real worker: one POST per alert, best effort.

A local HTTP server on a random port records every POST; a failing or absent webhook must
never cost a record or the alert stream entry.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from celery import Celery

from contracts import Alert
from contracts.record_models import NONDETERMINISM, SCORED
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import (
    Worker,
    free_port,
    hash_of,
    send_scores,
)
from worker.pipeline.alert_delivery import JOIN_GRACE_SECONDS, SOURCE_OF_TRUTH, UNDELIVERED
from worker.settings import WEBHOOK_DRAIN_SECONDS
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

# The harness's factory fixtures, used by name below.
queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store

MessageFactory = Callable[..., dict[str, Any]]
WEBHOOK_RETRIES = 3  # WebhookSender's default


class RecordingHandler(http.server.BaseHTTPRequestHandler):
    """Answers every POST with the server's status and keeps its JSON body."""

    def do_POST(self) -> None:  # http.server dispatches on this name
        server: RecordingServer = self.server  # type: ignore[assignment]
        server.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        """Keep the test output quiet."""


class RecordingServer(http.server.ThreadingHTTPServer):
    def __init__(self, status: int) -> None:
        super().__init__(("127.0.0.1", 0), RecordingHandler)
        self.status = status
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/alerts"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Bounded wait until `count` POSTs have arrived."""
        deadline = time.monotonic() + timeout
        while len(self.bodies) < count:
            assert time.monotonic() < deadline, f"{len(self.bodies)} POSTs, expected {count}"
            time.sleep(harness.POLL_SECONDS)
        return list(self.bodies)


@pytest.fixture
def webhook() -> Iterator[Callable[[int], RecordingServer]]:
    """Factory: a recording server answering every POST with `status`; shut down afterwards."""
    servers: list[RecordingServer] = []

    def start(status: int) -> RecordingServer:
        server = RecordingServer(status)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@dataclass
class ConflictRun:
    """A worker that recorded a conflicting pair, one message after the other."""

    worker: Worker
    pair: list[dict[str, Any]]
    task_ids: list[str]

    @property
    def input_hash(self) -> str:
        return hash_of(self.pair[0])


@pytest.fixture
def run_conflict(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    message_dict: MessageFactory,
) -> Callable[[str], ConflictRun]:
    """Factory: start a worker alerting to `url`, send two disagreeing judgements of one input."""

    def run(url: str) -> ConflictRun:
        first = message_dict(case_id="hook-first", answer="Returns within 30 days. [webhook]")
        second = {**first, "case_id": "hook-second", "supported_claim_ids": ["refund-window"]}
        worker = start_worker(queue, env={"EVIDENCE_ALERT_WEBHOOK_URL": url})
        app = publisher()
        task_ids = []
        for count, message in enumerate([first, second], start=1):
            task_ids += send_scores(app, queue, [message])
            worker.wait_for(count, events=[SCORED])  # so the first is known to be first
        return ConflictRun(worker, [first, second], task_ids)

    return run


def test_a_conflict_posts_one_alert_naming_the_hash_both_attempts_and_kept_first(
    run_conflict: Callable[[str], ConflictRun],
    webhook: Callable[[int], RecordingServer],
    store: RedisStore,
) -> None:
    """One conflicting pair: exactly one POST, the same alert as the stream entry."""
    server = webhook(200)

    run = run_conflict(server.url)

    (body,) = server.wait_for(1)
    (alert,) = store.alerts()
    assert body == {"event": NONDETERMINISM, **alert.model_dump(mode="json")}
    posted = Alert.model_validate({key: value for key, value in body.items() if key != "event"})
    assert (posted.input_hash, posted.decision) == (run.input_hash, "kept_first")
    assert (posted.first.case_id, posted.first.task_id, posted.first.value) == (
        "hook-first",
        run.task_ids[0],
        2 / 3,
    )
    assert (posted.observed.case_id, posted.observed.task_id, posted.observed.value) == (
        "hook-second",
        run.task_ids[1],
        1 / 3,
    )
    assert len(run.worker.events(NONDETERMINISM)) == 1


@pytest.mark.parametrize("broken", ["answers-500", "unreachable"])
def test_a_failing_webhook_costs_neither_a_record_nor_the_alert_stream_entry(
    run_conflict: Callable[[str], ConflictRun],
    webhook: Callable[[int], RecordingServer],
    store: RedisStore,
    broken: str,
) -> None:
    """500s or no server at all: both records, the alert entry, and one webhook_undelivered
    line saying the POSTs failed."""
    server = webhook(500)
    url = server.url if broken == "answers-500" else f"http://127.0.0.1:{free_port()}/"

    run = run_conflict(url)

    (failed,) = run.worker.wait_for(1, events=[UNDELIVERED], timeout=60)
    assert (failed["cause"], failed["note"]) == ("failed", SOURCE_OF_TRUTH)
    records = run.worker.events(SCORED)
    assert [(line["case_id"], line["cache"]) for line in records] == [
        ("hook-first", "miss"),
        ("hook-second", "conflict"),
    ]
    assert [alert.input_hash for alert in store.alerts()] == [run.input_hash]
    assert (failed["input_hash"], failed["attempts"]) == (run.input_hash, WEBHOOK_RETRIES)
    assert failed["problem"] == ("HTTP 500" if broken == "answers-500" else "ConnectError")
    assert len(server.bodies) == (WEBHOOK_RETRIES if broken == "answers-500" else 0)
    assert run.worker.alive()


class TrickleServer:
    """Takes each request, sends a status line and headers, then one body byte a second."""

    def __init__(self) -> None:
        self.requests = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hooks/alerts"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65_536)
            self.requests += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3600\r\n\r\n")
            while not self._stop.wait(1.0):
                conn.sendall(b"x")

    def wait_for(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.requests < count:
            assert time.monotonic() < deadline, f"{self.requests} requests, expected {count}"
            time.sleep(harness.POLL_SECONDS)

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


@pytest.fixture
def trickle() -> Iterator[TrickleServer]:
    server = TrickleServer()
    yield server
    server.close()


# A warm shutdown's own work besides the webhook: the pool's children exit, the broker
# connection closes.
CELERY_SHUTDOWN_SLACK_SECONDS = 10.0


def test_warm_shutdown_finishes_with_a_trickling_webhook_and_logs_the_alert(
    run_conflict: Callable[[str], ConflictRun], trickle: TrickleServer, store: RedisStore
) -> None:
    """A receiver trickling its answer: SIGTERM still ends the worker within the drain time,
    and the alert is one webhook_undelivered line (cause shutdown) naming its hash, while
    the alert stream keeps it."""
    run = run_conflict(trickle.url)
    trickle.wait_for(1)

    started = time.monotonic()
    run.worker.process.send_signal(signal.SIGTERM)
    run.worker.process.wait(WEBHOOK_DRAIN_SECONDS + JOIN_GRACE_SECONDS + 30)
    elapsed = time.monotonic() - started

    assert elapsed < WEBHOOK_DRAIN_SECONDS + JOIN_GRACE_SECONDS + CELERY_SHUTDOWN_SLACK_SECONDS
    (line,) = run.worker.events(UNDELIVERED)
    assert (line["input_hash"], line["cause"], line["note"]) == (
        run.input_hash,
        "shutdown",
        SOURCE_OF_TRUTH,
    )
    assert line["raised_at"] == store.alerts()[0].model_dump(mode="json")["raised_at"]
    assert [alert.input_hash for alert in store.alerts()] == [run.input_hash]
