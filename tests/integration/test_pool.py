"""The worker's pool: prefork writing each task to a child's pipe even while it is busy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from tests.integration import worker_harness as harness
from tests.integration.worker_harness import Worker

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher


def pool_stats(app: Celery, worker: Worker) -> dict[str, Any]:
    worker.wait_ready()
    # Asked again if unanswered: on Redis, a broadcast sent before the worker's control
    # channel subscribed is lost (seen once in a full run on the loaded 2-core VM).
    replies = None
    for _ in range(4):
        replies = app.control.inspect(destination=[worker.hostname], timeout=5.0).stats()
        if replies:
            break
    assert replies is not None, f"no stats from {worker}"
    pool: dict[str, Any] = replies[worker.hostname]["pool"]
    return pool


def test_the_procfile_s_prefork_pool_writes_first_come_first_served(
    start_worker: Callable[..., Worker], publisher: Callable[..., Celery], queue: str
) -> None:
    """`--pool prefork` (and no --pool, as in the Procfile) is our pool, with Celery's fcfs
    writes: a busy child's next task already waits in its pipe."""
    worker = start_worker(queue, pool="prefork", concurrency=2)

    pool = pool_stats(publisher(), worker)

    assert pool["implementation"] == "worker.runtime.pool:PrefetchingTaskPool"
    assert pool["writes"]["strategy"] == "fcfs"
    assert pool["max-concurrency"] == 2


def test_an_explicit_fair_optimization_is_kept(
    start_worker: Callable[..., Worker], publisher: Callable[..., Celery], queue: str
) -> None:
    """`-O fair` on the command line still means fair: the pool only replaces the default."""
    worker = start_worker(queue, concurrency=2, options=["-O", "fair"])

    pool = pool_stats(publisher(), worker)

    assert pool["implementation"] == "worker.runtime.pool:PrefetchingTaskPool"
    assert pool["writes"]["strategy"] == "fair"
