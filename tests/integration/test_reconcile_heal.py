"""Losses heal themselves: the beat's reconcile task sends again what a broker lost, with no
person involved, and dead-letters a message whose copies are never recorded.

Real parts: a throwaway redis-server as the broker (killed without persistence), the harness's
Redis as the store, a real worker subprocess that runs the reconcile task as beat sends it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest
from celery import Celery

from tests.integration import worker_harness as harness
from tests.integration.test_reconcile import (
    QUEUE,
    MessageFactory,
    distinct,
    publish,
    unrecorded,
    wait_quiet,
)
from tests.integration.worker_harness import (
    STORE_URL,
    RedisServer,
    Worker,
    check_first_outcomes,
    queue_length,
)
from worker.constants import RECONCILE
from worker.pipeline.service import Service
from worker.runtime.celery_app import create_app
from worker.settings import Settings
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store
redis_server = harness.redis_server

NOBODY = "nobody-consumes-this"


@pytest.mark.timeout(300)
def test_messages_a_broker_lost_are_recorded_after_the_beat_task_runs(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """kill -9 of a broker without persistence, then one beat run: every case ID recorded
    once, nothing dead-lettered, no alert, and the ledger empty."""
    messages = distinct(message_dict, "heal", 2_000)
    app = publisher(redis_server.url)
    publish(app, store, messages)
    worker = start_worker(
        QUEUE, broker_url=redis_server.url, env={"EVIDENCE_RECONCILE_AFTER_SECONDS": "1"}
    )
    worker.wait_for(200, timeout=120)
    redis_server.kill()  # the queue and the unacknowledged index go with it
    redis_server.start()
    wait_quiet(redis_server, store, messages, worker, timeout=120)
    lost = unrecorded(store, messages)
    assert len(lost) > 500, "the broker was killed after the queue drained"

    app.send_task(RECONCILE, kwargs={"older_than_seconds": 1}, queue=QUEUE)  # as beat does
    wait_quiet(redis_server, store, messages, worker, timeout=120)

    assert unrecorded(store, messages) == []
    check_first_outcomes(store, messages, worker.records())
    assert store.alerts() == []
    assert store.dead_letters() == []
    assert store.count_unrecorded(published_before=store.ledger_now()) == 0
    [line] = worker.events("evidence_coverage.unrecorded")  # one line for the run
    assert (line["republished"], line["dead_lettered"], line["unrecorded"]) == (len(lost), 0, 0)
    assert len(line["republished_case_ids"]) == 20
    assert set(line["republished_case_ids"]) <= set(lost)
    assert worker.alive()


@pytest.fixture
def beat_run(redis_server: RedisServer, key_prefix: str) -> Iterator[Callable[[], dict[str, int]]]:
    """The reconcile task's body in this process, as a worker would run it, on the test's
    store, republishing to a queue no worker consumes."""
    settings = Settings(
        broker_url=redis_server.url,
        store_url=STORE_URL,
        key_prefix=key_prefix,
        queue=NOBODY,
        reconcile_after_seconds=1,
        max_republishes=3,
    )
    app = create_app(settings)
    app.use_service(Service.for_worker(settings))
    task = app.tasks[RECONCILE]

    def run() -> dict[str, int]:
        task.push_request(id=f"beat-{time.monotonic_ns()}")
        try:
            result: dict[str, int] = task.run(1)
        finally:
            task.pop_request()
        return result

    yield run
    app.close_service()
    app.close()


def test_a_message_never_recorded_is_dead_lettered_after_three_republishes(
    redis_server: RedisServer,
    publisher: Callable[..., Celery],
    store: RedisStore,
    beat_run: Callable[[], dict[str, int]],
    message_dict: MessageFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    key_prefix: str,
) -> None:
    """No worker for its queue: three copies sent, then a dead letter naming the limit, which
    `dead-letters list` shows; its entry closed, so a later run does nothing."""
    [message] = distinct(message_dict, "orphan", 1)
    app = publisher(redis_server.url)
    publish(app, store, [message])

    results = []
    for _ in range(5):
        time.sleep(1.1)  # older than reconcile_after_seconds by the store's clock
        results.append(beat_run())

    assert [(r["republished"], r["dead_lettered"]) for r in results] == [
        (1, 0),
        (1, 0),
        (1, 0),
        (0, 1),
        (0, 0),
    ]
    assert queue_length(redis_server.url, NOBODY) == 3
    assert store.count_unrecorded(published_before=store.ledger_now()) == 0
    from worker.cli import main

    monkeypatch.setenv("EVIDENCE_STORE_URL", STORE_URL)
    monkeypatch.setenv("EVIDENCE_KEY_PREFIX", key_prefix)
    capsys.readouterr()
    assert main(["dead-letters", "list"]) == 0
    [letter] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (letter["case_id"], letter["reason"], letter["origin"]) == (
        "orphan-00000",
        "republished 3 times without a record (limit EVIDENCE_MAX_REPUBLISHES=3)",
        "worker",
    )
