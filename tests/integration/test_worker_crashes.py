"""Fault tests on real workers: kill -9 of a pool child mid-task, and of the whole worker with
messages in flight.

Every test checks the product's promise for what it published: one first outcome per input
hash, never overwritten, and exactly the alerts the scenario implies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable

import pytest
from celery import Celery

from contracts.record_models import REJECTED
from tests.integration import worker_harness as harness
from tests.integration.fault_helpers import (
    MessageFactory,
    all_scored,
    case_ids,
    distinct,
    wait_for_value,
)
from tests.integration.worker_harness import (
    BROKER_URL,
    Line,
    Worker,
    check_first_outcomes,
    queue_length,
    send_scores,
    unacked_count,
    unacked_task_ids,
)
from worker.constants import SCORE_BATCH
from worker.runtime.celery_app import celery_config
from worker.settings import Settings
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

# The harness's factory fixtures, used by name below.
queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store


def lost_task_lines(worker: Worker) -> list[Line]:
    return [line for line in worker.lines() if "WorkerLostError" in str(line.get("event"))]


def kill_a_child_running_a_task(worker: Worker, app: Celery, *, timeout: float) -> int:
    """Ask the worker which pool child runs a task, kill -9 that child, until Celery reports
    a job lost with it (the task may finish between answer and kill); returns the kills."""
    kills = 0
    deadline = time.monotonic() + timeout
    while not lost_task_lines(worker):
        assert time.monotonic() < deadline, f"no kill hit a running task in {kills} kills"
        replies = app.control.inspect(destination=[worker.hostname], timeout=1.0).active()
        running = [task["worker_pid"] for task in (replies or {}).get(worker.hostname, [])]
        if not running:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(running[0], signal.SIGKILL)
            kills += 1
        settle = time.monotonic() + 2  # Celery notices the death and fails the job
        while not lost_task_lines(worker) and time.monotonic() < settle:
            time.sleep(harness.POLL_SECONDS)
    return kills


# Kill -9 of a pool child mid-task

# Batches big enough that a pool child is still on one when the kill arrives: a batch takes
# ~0.3 s since the batch path got faster (1,000 messages, ~0.1 s, once finished between
# `inspect active` and the kill, and nothing was running after).
CHILD_KILL_BATCHES = 6
CHILD_KILL_BATCH_SIZE = 2_500


@pytest.mark.timeout(300)
def test_a_pool_child_killed_mid_task_has_its_message_redelivered_and_recorded_once(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """kill -9 of a busy pool child: its batch comes back, and every message has one outcome."""
    messages = distinct(message_dict, "child-kill", CHILD_KILL_BATCHES * CHILD_KILL_BATCH_SIZE)
    batches = [
        messages[start : start + CHILD_KILL_BATCH_SIZE]
        for start in range(0, len(messages), CHILD_KILL_BATCH_SIZE)
    ]
    worker = start_worker(queue, concurrency=2)
    app = publisher()
    with app.producer_or_acquire() as producer:
        for batch in batches:
            app.send_task(SCORE_BATCH, args=[batch], queue=queue, producer=producer)
    worker.wait_ready()
    pid = worker.pid

    kill_a_child_running_a_task(worker, app, timeout=120)
    assert len(case_ids(worker.lines())) < len(messages), "the queue drained before the kill"
    worker.wait_until(all_scored(messages), timeout=240, what="every message scored")

    records = worker.records()
    assert (worker.alive(), worker.pid) == (True, pid)
    assert [line for line in records if line["redelivered"]], "the lost task never came back"
    assert [line for line in records if line["event"] == REJECTED] == []
    check_first_outcomes(store, messages, records)
    assert store.alerts(limit=1000) == []


# Kill -9 of the whole worker with messages in flight

VISIBILITY_TIMEOUT_SECONDS = 5
REDELIVERY_PROMISE_SECONDS = VISIBILITY_TIMEOUT_SECONDS + 30
# Messages a worker with the harness's default two pool children holds unacknowledged at most.
PREFETCH = celery_config(Settings())["worker_prefetch_multiplier"] * 2


@pytest.mark.timeout(240)
def test_a_killed_worker_s_unacked_messages_are_finished_by_a_new_worker_in_time(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """kill -9 of main process and children: a new worker finishes all within timeout + 30 s."""
    env = {"EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY_TIMEOUT_SECONDS)}
    messages = distinct(message_dict, "worker-kill", 400)
    first = start_worker(queue, env=env)
    send_scores(publisher(), queue, messages)
    first.wait_for(20, timeout=120)
    # Freeze the pool so the consumer fills its prefetch window and stops fetching: kombu's
    # Redis transport pops a message before it marks it unacked, and a kill inside that gap
    # loses it whatever the worker does, so the kill waits until no fetch can be under way.
    for pid in first.child_pids():
        os.kill(pid, signal.SIGSTOP)
    wait_for_value(lambda: unacked_count(BROKER_URL, queue), PREFETCH, timeout=30)
    in_flight = set(unacked_task_ids(BROKER_URL, queue))
    queued = queue_length(BROKER_URL, queue)
    done_before = case_ids(first.lines())

    first.kill()
    killed_at = time.monotonic()
    second = start_worker(queue, env=env)
    second.wait_until(
        all_scored(messages, done_before),
        timeout=REDELIVERY_PROMISE_SECONDS - (time.monotonic() - killed_at),
        what=f"all messages within {REDELIVERY_PROMISE_SECONDS}s of the kill",
    )

    records = first.records() + second.records()
    assert queued + PREFETCH + len(done_before) >= len(messages)
    assert len(in_flight) == PREFETCH
    assert {line["task_id"] for line in second.records() if line["redelivered"]} == in_flight
    assert len([line for line in second.records() if not line["redelivered"]]) == queued
    assert [line for line in records if line["event"] == REJECTED] == []
    check_first_outcomes(store, messages, records)
    assert store.alerts(limit=1000) == []
