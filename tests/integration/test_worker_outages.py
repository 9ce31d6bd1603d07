"""Fault tests on real workers: Redis restarted under a running worker, and a policy file
gone after start.

Every test checks the product's promise for what it published: one first outcome per input
hash, never overwritten, and exactly the alerts the scenario implies.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
from celery import Celery

from contracts.record_models import REJECTED, SCORED
from tests.conftest import EXAMPLES
from tests.integration import worker_harness as harness
from tests.integration.fault_helpers import MessageFactory, all_scored, distinct, wait_for_value
from tests.integration.worker_harness import (
    BROKER_URL,
    Line,
    RedisServer,
    Worker,
    check_first_outcomes,
    queue_length,
    send_scores,
    unacked_count,
)
from worker.settings import read_policy_file
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

# The harness's factory fixtures, used by name below.
queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store
redis_server = harness.redis_server


POLICY = EXAMPLES / "policy.toml"


# Redis restarted under a running worker


@pytest.mark.timeout(240)
def test_a_worker_reconnects_after_a_redis_restart_and_scores_what_comes_next(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    publisher: Callable[..., Celery],
    key_prefix: str,
    message_dict: MessageFactory,
) -> None:
    """Broker and store restart (memory lost): the same worker process scores later messages."""
    queue = "restart-queue"  # on the throwaway server, which takes its keys with it
    before = distinct(message_dict, "before-restart", 20)
    after = distinct(message_dict, "after-restart", 20)
    worker = start_worker(queue, broker_url=redis_server.url, store_url=redis_server.url)
    throwaway = RedisStore.from_url(redis_server.url, prefix=key_prefix)
    try:
        send_scores(publisher(redis_server.url), queue, before)
        worker.wait_until(all_scored(before), timeout=120, what="the first half scored")
        check_first_outcomes(throwaway, before, worker.records())
        pid, children = worker.pid, worker.child_pids()

        redis_server.kill()
        redis_server.start()
        worker.wait_until(
            lambda lines: (
                sum(str(line.get("event")).startswith("Connected to redis://") for line in lines)
                >= 2
            ),
            timeout=90,
            what="the worker to reconnect",
        )
        send_scores(publisher(redis_server.url), queue, after)
        worker.wait_until(all_scored(after), timeout=90, what="the second half scored")

        assert worker.alive()
        assert worker.pid == pid
        assert worker.child_pids() == children
        records = worker.records()
        assert [line for line in records if line["event"] == REJECTED] == []
        histories = check_first_outcomes(throwaway, after, records)
        assert [history.total_attempts for history in histories.values()] == [1] * len(after)
        assert throwaway.alerts() == []
    finally:
        throwaway.close()


@pytest.mark.timeout(240)
def test_a_policy_file_gone_after_start_holds_messages_until_it_is_back(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
    tmp_path: Path,
) -> None:
    """A pool process reads the policy at its first message. With the file gone since the
    worker started, Celery would fail the task and ack it, unrecorded; here each delivery
    says so in a CRITICAL line and goes back to the broker, a second apart, until the file
    is back: then the message is scored once, and nothing is left unacknowledged."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY.read_text("utf-8"), "utf-8")
    worker = start_worker(queue, env={"EVIDENCE_POLICY_FILE": str(policy)})
    worker.wait_ready()
    policy.unlink()
    (message,) = distinct(message_dict, "no-policy", 1)
    (task_id,) = send_scores(publisher(), queue, [message])

    held = worker.wait_until(
        lambda lines: len(unrecordable(lines, task_id)) >= 2,
        timeout=60,
        what="the message handed back twice",
    )
    policy.write_text(POLICY.read_text("utf-8"), "utf-8")
    (record,) = worker.wait_for(1, timeout=60)
    wait_for_value(lambda: unacked_count(BROKER_URL, queue), 0, timeout=30)

    first, second = unrecordable(held, task_id)[:2]
    assert (first["level"], first["case_ids"], first["exception.type"]) == (
        "critical",
        [message["case_id"]],
        "ConfigurationError",
    )
    assert "policy.toml" in first["exception.message"]
    assert (second["redelivered"], record["redelivered"]) == (True, True)
    pause = datetime.fromisoformat(second["timestamp"]) - datetime.fromisoformat(first["timestamp"])
    assert pause.total_seconds() >= 1.0
    assert (record["event"], record["case_id"], record["policy_version"]) == (
        SCORED,
        message["case_id"],
        read_policy_file(POLICY).version,
    )
    check_first_outcomes(store, [message], [record])
    assert queue_length(BROKER_URL, queue) == 0


def unrecordable(lines: list[Line], task_id: str) -> list[Line]:
    return [
        line
        for line in lines
        if line.get("event") == "evidence_coverage.unrecordable" and line["task_id"] == task_id
    ]
