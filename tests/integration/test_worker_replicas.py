"""A real worker whose store's replica stops acknowledging: no message is acknowledged, and
none is recorded, until the replica has its outcome; then every one is recorded once.

The store is a master with one replica of the module's own (tests/integration/redis_servers.py),
the broker the shared Redis. The worker runs with the settings' automatic default (one replica,
since the master has one) and short versions of the waits, as test_store_outage.py does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from contracts.record_models import SCORED
from tests.integration import redis_servers, worker_harness
from tests.integration.fault_helpers import MessageFactory, all_scored, distinct, wait_for_value
from tests.integration.redis_servers import ReplicatedRedis
from tests.integration.worker_harness import (
    BROKER_URL,
    Worker,
    check_first_outcomes,
    hash_of,
    queue_length,
    send_scores,
    unacked_count,
)
from worker.stores.redis.keys import outcome_key
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

replicated_redis = redis_servers.replicated_redis
start_worker = worker_harness.start_worker
publisher = worker_harness.publisher
queue = worker_harness.queue

MESSAGES = 20
TIMEOUT_MS = 200
LAGGING_ENV = {
    "EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": "10",
    "EVIDENCE_STORE_RETRY_WINDOW_SECONDS": "3",
    "EVIDENCE_STORE_REPLICA_TIMEOUT_MS": str(TIMEOUT_MS),
}


def held(worker: Worker) -> int:
    """The worker's messages still on the broker: waiting in the queue or unacknowledged."""
    return queue_length(BROKER_URL, worker.queue) + unacked_count(BROKER_URL, worker.queue)


@pytest.mark.timeout(240)
def test_no_message_is_acknowledged_before_the_replica_has_its_outcome(
    start_worker: Callable[..., Worker],
    replicated_redis: ReplicatedRedis,
    publisher: Callable[..., Celery],
    queue: str,
    key_prefix: str,
    message_dict: MessageFactory,
) -> None:
    """Replica stopped (SIGSTOP) while messages arrive: the worker says it waits for the
    replica, hands messages back, emits no record, and every message stays on the broker.
    Replica continued: each message is scored exactly once, a miss, its outcome on the
    replica, and nothing is left on the broker."""
    messages = distinct(message_dict, "replica", MESSAGES)
    worker = start_worker(queue, store_url=replicated_redis.url, env=LAGGING_ENV)
    worker.wait_ready()
    expected_problem = (
        f"store {replicated_redis.url}: the write reached 0 of 1 replica in {TIMEOUT_MS} ms "
        "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"
    )

    with replicated_redis.paused():
        send_scores(publisher(), queue, messages)
        worker.wait_until(
            lambda lines: any(line.get("event") == "evidence_coverage.requeued" for line in lines),
            timeout=60,
            what="a message handed back to the broker",
        )
        # kombu moves a message between the queue and its unacknowledged set: poll.
        wait_for_value(lambda: held(worker), MESSAGES, timeout=10)
        records_while_paused = worker.records()
    worker.wait_until(all_scored(messages), timeout=120, what="every message scored")
    wait_for_value(lambda: held(worker), 0, timeout=30)

    assert records_while_paused == []
    assert worker.events("evidence_coverage.unrecordable") == []
    problems = {
        line["problem"]
        for line in worker.events(
            "evidence_coverage.store_unavailable", "evidence_coverage.requeued"
        )
    }
    assert problems == {expected_problem}
    records = worker.records()
    by_case: dict[str, list[str]] = {}
    for record in records:
        by_case.setdefault(record["case_id"], []).append(f"{record['event']}/{record['cache']}")
    assert by_case == {message["case_id"]: [f"{SCORED}/miss"] for message in messages}
    store = RedisStore.from_url(replicated_redis.url, prefix=key_prefix)
    replica = replicated_redis.replica_client()
    try:
        histories = check_first_outcomes(store, messages, records)
        assert [h.total_attempts for h in histories.values()] == [1] * MESSAGES
        assert (store.alerts(), store.dead_letters()) == ([], [])
        on_replica: list[Any] = [
            replica.exists(outcome_key(key_prefix, hash_of(message))) for message in messages
        ]
        assert on_replica == [1] * MESSAGES
    finally:
        replica.close()
        store.close()
