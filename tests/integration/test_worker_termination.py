"""Celery's cancel of a task it cannot acknowledge (SIGTERM to the pool process) waits for
the record line: a record written is never a record without its line (SPEC §6).

A real prefork worker on a store of the test's own. The store is paused for writes (CLIENT
PAUSE) as the message arrives, so the pool process is blocked inside the record's write when
it gets SIGTERM, the moment a connection loss's cancel could strike. Before worker/runtime/
termination.py, the process died there: the write landed when the pause ended, its line never.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from contracts.record_models import SCORED
from tests.integration import worker_harness
from tests.integration.worker_harness import RedisServer, Worker, hash_of, send_scores
from worker.stores.redis.redis_store import RedisStore

start_worker = worker_harness.start_worker
redis_server = worker_harness.redis_server
publisher = worker_harness.publisher
queue = worker_harness.queue

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PAUSE_MS = 3000


def test_a_pool_process_terminated_inside_a_write_writes_the_line_before_it_ends(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    publisher: Callable[..., Any],
    queue: str,
    key_prefix: str,
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    worker = start_worker(queue, store_url=redis_server.url, concurrency=1)
    worker.wait_ready()
    (child,) = worker.child_pids()
    message = message_dict(case_id="terminated-mid-write")
    store_client = redis.Redis.from_url(redis_server.url)

    store_client.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
    send_scores(publisher(), queue, [message])
    time.sleep(1.0)  # the process has taken the message and waits for its write
    os.kill(child, signal.SIGTERM)

    worker.wait_until(
        lambda lines: any(line.get("case_id") == message["case_id"] for line in lines),
        timeout=60,
        what="the message's record line",
    )
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{child}"), "the pool process outlived its task"
    lines = [line for line in worker.records() if line.get("case_id") == message["case_id"]]
    assert (lines[0]["event"], lines[0]["cache"], lines[0]["redelivered"]) == (
        SCORED,
        "miss",
        False,
    )
    # The message was not acknowledged (its process died): a redelivery replays the write.
    assert all((line["event"], line["cache"]) == (SCORED, "miss") for line in lines)
    store = RedisStore.from_url(redis_server.url, prefix=key_prefix)
    try:
        history = store.history(hash_of(message))
        assert history is not None
        assert history.total_attempts == 1
    finally:
        store.close()
