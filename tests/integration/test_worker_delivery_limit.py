"""A real worker whose store's replica stops acknowledging for longer than
EVIDENCE_MAX_DELIVERIES deliveries take: every write reaches the master and only its WAIT
fails, so past the limit each message is found recorded and is a replay, never a dead letter.

The issue's compressed windows (EVIDENCE_MAX_DELIVERIES=3, a short visibility timeout and
retry window) on a master with one SIGSTOPped replica (tests/integration/redis_servers.py),
the broker the shared Redis. Every message is accounted for by case ID.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from celery import Celery

from contracts.record_models import REJECTED, SCORED
from tests.integration import redis_servers, worker_harness
from tests.integration.fault_helpers import MessageFactory, all_scored, distinct, wait_for_value
from tests.integration.redis_servers import ReplicatedRedis
from tests.integration.worker_harness import (
    BROKER_URL,
    Worker,
    queue_length,
    send_scores,
    unacked_count,
)
from worker.stores.redis.keys import deliveries_key
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

replicated_redis = redis_servers.replicated_redis
start_worker = worker_harness.start_worker
publisher = worker_harness.publisher
queue = worker_harness.queue

MESSAGES = 6
MAX_DELIVERIES = 3
COMPRESSED_ENV = {
    "EVIDENCE_MAX_DELIVERIES": str(MAX_DELIVERIES),
    "EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": "20",
    "EVIDENCE_STORE_RETRY_WINDOW_SECONDS": "4",
    "EVIDENCE_STORE_MIN_REPLICAS": "1",
    "EVIDENCE_STORE_REPLICA_TIMEOUT_MS": "200",
}


def delivery_counts(master: redis.Redis, key_prefix: str, task_ids: list[str]) -> list[int]:
    """Each task's delivery count on the master (0 when none is kept)."""
    values = master.mget([deliveries_key(key_prefix, task_id) for task_id in task_ids])
    return [int(value or 0) for value in values]


@pytest.mark.timeout(300)
def test_messages_whose_writes_landed_are_replays_past_the_delivery_limit(
    start_worker: Callable[..., Worker],
    replicated_redis: ReplicatedRedis,
    publisher: Callable[..., Celery],
    queue: str,
    key_prefix: str,
    message_dict: MessageFactory,
) -> None:
    """Replica stopped until every task was delivered past EVIDENCE_MAX_DELIVERIES (its count
    on the master above the limit): no rejection, no dead letter. Replica continued: each
    message is recorded once (one attempt; its lines replays of its first write: cache miss,
    redelivered), and nothing is left on the broker."""
    messages = distinct(message_dict, "limit", MESSAGES)
    worker = start_worker(queue, store_url=replicated_redis.url, env=COMPRESSED_ENV)
    worker.wait_ready()
    master = redis.Redis.from_url(replicated_redis.url, socket_timeout=5)
    try:
        with replicated_redis.paused():
            task_ids = send_scores(publisher(), queue, messages)
            deadline = time.monotonic() + 200
            while min(delivery_counts(master, key_prefix, task_ids)) <= MAX_DELIVERIES + 1:
                assert time.monotonic() < deadline, (
                    f"deliveries never passed the limit: "
                    f"{delivery_counts(master, key_prefix, task_ids)}"
                )
                time.sleep(0.5)
            counts_past_limit = delivery_counts(master, key_prefix, task_ids)
            records_while_paused = worker.records()
        worker.wait_until(all_scored(messages), timeout=120, what="every message scored")
        wait_for_value(
            lambda: queue_length(BROKER_URL, queue) + unacked_count(BROKER_URL, queue),
            0,
            timeout=60,
        )
    finally:
        master.close()

    assert min(counts_past_limit) > MAX_DELIVERIES + 1
    assert records_while_paused == []
    assert worker.events(REJECTED, "evidence_coverage.unrecordable") == []
    by_case: dict[str, list[tuple[str, str, bool]]] = {}
    for record in worker.records():
        by_case.setdefault(record["case_id"], []).append(
            (record["event"], record["cache"], record["redelivered"])
        )
    # kombu restores copies of a task id held past the visibility timeout: each copy that
    # comes is a replay of the one write, with its own line saying so.
    assert {case: set(lines) for case, lines in by_case.items()} == {
        message["case_id"]: {(SCORED, "miss", True)} for message in messages
    }
    store = RedisStore.from_url(replicated_redis.url, prefix=key_prefix)
    try:
        assert store.dead_letters() == []
        histories = [store.history(worker_harness.hash_of(message)) for message in messages]
        assert [h.total_attempts if h else 0 for h in histories] == [1] * MESSAGES
    finally:
        store.close()
    lines = sum(len(lines) for lines in by_case.values())
    print(
        f"published {MESSAGES}, recorded {len(by_case)} (one attempt each; {lines} replay "
        f"lines), dead-lettered 0, lost 0; delivery counts past the limit {counts_past_limit}"
    )
