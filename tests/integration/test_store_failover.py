"""A single-Redis failover under a real worker: the master killed mid-stream, its replica
promoted (REPLICAOF NO ONE) and the store's address moved to it. The worker and the publisher
run on through it with the settings' automatic replica count: every message is recorded once,
without a restart, no first outcome replaced, and the publisher's notes fail only while the
address leads nowhere.

The store's address is a TCP proxy (tests/integration/fault_proxy.py) in front of a master and
replica of the test's own; the broker is the shared Redis, up throughout. 600 messages (the
issue's run had 3,000; 1,200 keep the test well under a minute on a shared 2-core machine) are
published in chunks of 30 through the publisher's own path (send_noted: the ledger note on the
store, then the send).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from contracts import AttributionResult
from contracts.record_models import REJECTED, SCORED
from tests.integration import worker_harness
from tests.integration.fault_helpers import MessageFactory, all_scored, distinct, wait_for_value
from tests.integration.fault_proxy import FaultProxy
from tests.integration.redis_servers import start_replicated
from tests.integration.worker_harness import (
    BROKER_URL,
    Worker,
    check_first_outcomes,
    queue_length,
    unacked_count,
)
from worker.constants import TASK_FAILED, UNRECORDABLE
from worker.errors import TransientError
from worker.settings import Settings
from worker.stores import open_store
from worker.stores.redis.redis_store import RedisStore
from worker.upstream.publishing import outgoing, send_noted

pytestmark = pytest.mark.integration

start_worker = worker_harness.start_worker
publisher = worker_harness.publisher
queue = worker_harness.queue

MESSAGES = 3_000
CHUNK = 30
PACE_S = 0.15  # between two chunks: the stream spans the failover
TIMEOUT_MS = 200
FAILOVER_ENV = {
    "EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": "10",
    "EVIDENCE_STORE_RETRY_WINDOW_SECONDS": "3",
    "EVIDENCE_STORE_REPLICA_TIMEOUT_MS": str(TIMEOUT_MS),
}
FUTURE = datetime.now(UTC) + timedelta(days=1)


class Publisher(threading.Thread):
    """Publishes `messages` a chunk at a time, each chunk noted then sent; a chunk whose note
    fails (the store unavailable) is tried again 0.1 s later, and the failure's time kept."""

    def __init__(self, app: Celery, queue: str, ledger: RedisStore, messages: list[Any]) -> None:
        super().__init__(daemon=True)
        self.app, self.queue, self.ledger, self.messages = app, queue, ledger, messages
        self.failures: list[float] = []
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for start in range(0, len(self.messages), CHUNK):
                tasks = [
                    outgoing(
                        [(AttributionResult.model_validate(message), json.dumps(message))],
                        batch=False,
                        max_message_bytes=1_000_000,
                        now=datetime.now(UTC),
                    )
                    for message in self.messages[start : start + CHUNK]
                ]
                while True:
                    try:
                        send_noted(self.app, tasks, queue=self.queue, ledger=self.ledger)
                        self.sent += len(tasks)
                        break
                    except TransientError:
                        self.failures.append(time.monotonic())
                        time.sleep(0.1)
                time.sleep(PACE_S)
        except BaseException as error:  # surfaced by the test
            self.error = error


@pytest.mark.timeout(240)
def test_a_promoted_replica_takes_every_write_without_a_restart(
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    key_prefix: str,
    message_dict: MessageFactory,
    tmp_path: Path,
) -> None:
    """Master killed once a third of the stream is sent, the replica promoted 1 s later and the
    address moved to it: every published message is scored exactly once (a miss, its first
    outcome on the promoted master), the worker never restarts, no task fails, nothing is
    rejected, every ledger note is closed, and the publisher's notes failed only between the
    kill and the move."""
    servers = start_replicated(tmp_path)
    proxy = FaultProxy(servers.master.port, lifetime=230).start()
    url = proxy.url(0)
    messages = distinct(message_dict, "failover", MESSAGES)
    settings = Settings(key_prefix=key_prefix, store_replica_timeout_ms=TIMEOUT_MS)
    ledger = open_store(url, settings)
    assert isinstance(ledger, RedisStore)
    try:
        worker = start_worker(queue, store_url=url, env=FAILOVER_ENV)
        worker.wait_ready()
        pid = worker.pid
        sending = Publisher(publisher(), queue, ledger, messages)
        sending.start()
        worker.wait_until(
            lambda lines: (
                sending.sent >= MESSAGES // 3 and any(line.get("event") == SCORED for line in lines)
            ),
            timeout=60,
            what="a third of the stream sent, and scoring under way",
        )
        killed_at = time.monotonic()
        servers.master.kill()
        time.sleep(1.0)
        promoted = redis.Redis(port=servers.replica.port, socket_timeout=5)
        promoted.execute_command("REPLICAOF", "NO", "ONE")
        proxy.retarget(servers.replica.port)
        moved_at = time.monotonic()
        sending.join(timeout=90)
        assert sending.error is None
        assert not sending.is_alive()
        worker.wait_until(all_scored(messages), timeout=90, what="every message scored")
        wait_for_value(
            lambda: queue_length(BROKER_URL, queue) + unacked_count(BROKER_URL, queue),
            0,
            timeout=30,
        )

        records = worker.records()
        by_case: dict[str, list[str]] = {}
        for record in records:
            by_case.setdefault(record["case_id"], []).append(f"{record['event']}/{record['cache']}")
        assert by_case == {message["case_id"]: [f"{SCORED}/miss"] for message in messages}
        assert [line for line in records if line["event"] == REJECTED] == []
        assert worker.events(TASK_FAILED, UNRECORDABLE) == []
        assert (worker.alive(), worker.pid) == (True, pid)
        check_first_outcomes(ledger, messages, records)
        assert (ledger.alerts(), ledger.dead_letters()) == ([], [])
        assert ledger.count_unrecorded(published_before=FUTURE) == 0
        assert promoted.info("replication")["role"] == "master"
        late = [at for at in sending.failures if not killed_at <= at <= moved_at + 1.0]
        assert (late, sending.failures != []) == ([], True)
        print(  # the counts, for the report
            f"published {MESSAGES}, recorded {len(by_case)}, lost "
            f"{MESSAGES - len(by_case)}, note failures {len(sending.failures)} in "
            f"{moved_at - killed_at:.1f} s"
        )
        promoted.close()
    finally:
        ledger.close()
        proxy.stop()
        servers.stop()
