"""Every loss detected: messages published through the ledger, a fault that loses some of them
upstream of the store (a broker killed with and without persistence, a worker killed again
and again), then `reconcile` must list exactly the messages that have no outcome, and
`reconcile --republish` must complete them, with no conflict and nothing recorded twice.

Real parts throughout: a throwaway redis-server as the broker, the harness's Redis as the
store (it outlives the broker), real worker subprocesses, the real command line.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from celery import Celery

from contracts.record_models import SCORED
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import (
    STORE_URL,
    RedisServer,
    Worker,
    check_first_outcomes,
    free_port,
    hash_of,
    queue_length,
    unacked_count,
)
from worker.cli import main
from worker.cli.exit_codes import OK, UNRECORDED
from worker.settings import Settings
from worker.stores.redis.redis_store import RedisStore
from worker.upstream.publishing import publish_lines

pytestmark = pytest.mark.integration

start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store
redis_server = harness.redis_server

MessageFactory = Callable[..., dict[str, Any]]
QUEUE = "reconcile-queue"  # on the throwaway broker, which takes its keys with it
VISIBILITY_TIMEOUT = "5"  # a killed worker's unacknowledged messages come back soon
QUIET_SECONDS = 4.0


@dataclass
class Run:
    code: int
    lines: list[dict[str, Any]]
    stderr: str


def distinct(message_dict: MessageFactory, tag: str, count: int) -> list[dict[str, Any]]:
    return [
        message_dict(case_id=f"{tag}-{n:05d}", answer=f"Returns within 30 days. [{tag} {n}]")
        for n in range(count)
    ]


def publish(app: Celery, store: RedisStore, messages: Sequence[dict[str, Any]]) -> None:
    """As `evidence-worker publish` does: validated, noted in the ledger, then sent."""
    settings = Settings()
    published = publish_lines(
        ((n, json.dumps(m).encode()) for n, m in enumerate(messages, 1)),
        app=app,
        queue=QUEUE,
        max_message_bytes=settings.max_message_bytes,
        max_batch_bytes=settings.max_batch_bytes,
        ledger=store,
    )
    assert (published.messages, published.rejected) == (len(messages), [])


def unrecorded(store: RedisStore, messages: Sequence[dict[str, Any]]) -> list[str]:
    """The ground truth: case IDs of messages whose inputs have no outcome in the store."""
    return sorted(m["case_id"] for m in messages if store.history(hash_of(m)) is None)


def wait_quiet(
    broker: RedisServer,
    store: RedisStore,
    messages: Sequence[dict],
    worker: Worker,
    *,
    timeout: float,
) -> None:
    """Until the broker holds nothing for the queue and no outcome was added for a while;
    the worker must live through it."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while True:
        assert worker.alive(), f"the worker exited\n{worker}"
        recorded = len(messages) - len(unrecorded(store, messages))
        idle = queue_length(broker.url, QUEUE) == 0 and unacked_count(broker.url, QUEUE) == 0
        if recorded != last or not idle:
            last, since = recorded, time.monotonic()
        elif time.monotonic() - since >= QUIET_SECONDS:
            return
        assert time.monotonic() < deadline, f"still busy after {timeout}s ({recorded} recorded)"
        time.sleep(0.5)


@pytest.fixture
def reconcile(
    key_prefix: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Run]:
    """`evidence-worker reconcile ARGS` in this process, on the test's store and a broker."""

    def run(*args: str, broker_url: str) -> Run:
        for name, value in {
            "EVIDENCE_BROKER_URL": broker_url,
            "EVIDENCE_STORE_URL": STORE_URL,
            "EVIDENCE_KEY_PREFIX": key_prefix,
            "EVIDENCE_QUEUE": QUEUE,
        }.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        code = main(["reconcile", *args])
        out, err = capsys.readouterr()
        return Run(code, [json.loads(line) for line in io.StringIO(out)], err)

    return run


def reconcile_and_republish(
    reconcile: Callable[..., Run],
    broker: RedisServer,
    store: RedisStore,
    worker: Worker,
    messages: Sequence[dict[str, Any]],
) -> list[str]:
    """The recovery every fault here ends with; returns what the fault lost."""
    lost = unrecorded(store, messages)
    # For whoever runs it with -s (capsys holds sys.stderr): what the fault took.
    print(f"{len(messages)} published, {len(lost)} lost", file=sys.__stderr__)
    listed = reconcile("--older-than", "0", broker_url=broker.url)
    assert sorted(line["case_id"] for line in listed.lines) == lost, listed.stderr
    assert listed.code == (UNRECORDED if lost else OK)
    assert {line["input_hash"] for line in listed.lines} == {
        hash_of(m) for m in messages if m["case_id"] in lost
    }

    sent = reconcile("--older-than", "0", "--republish", broker_url=broker.url)
    assert sorted(line["case_id"] for line in sent.lines) == lost
    assert all("republished_as" in line for line in sent.lines)
    wait_quiet(broker, store, messages, worker, timeout=120)

    assert unrecorded(store, messages) == []
    after = reconcile("--older-than", "0", broker_url=broker.url)
    assert (after.code, after.lines) == (OK, [])
    records = worker.records()
    check_first_outcomes(store, messages, records)
    assert store.alerts() == []
    republished = {line["republished_as"] for line in sent.lines}
    assert [
        line["cache"]
        for line in records
        if line.get("event") == SCORED and line["task_id"] in republished
    ] == ["miss"] * len(lost)
    return lost


@pytest.mark.timeout(300)
def test_a_broker_killed_without_persistence_loses_what_reconcile_then_finds_and_completes(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    publisher: Callable[..., Celery],
    store: RedisStore,
    reconcile: Callable[..., Run],
    message_dict: MessageFactory,
) -> None:
    messages = distinct(message_dict, "no-aof", 4_000)
    publish(publisher(redis_server.url), store, messages)
    worker = start_worker(QUEUE, broker_url=redis_server.url)
    worker.wait_for(300, timeout=120)

    redis_server.kill()  # the queue and the unacknowledged index go with it
    redis_server.start()
    wait_quiet(redis_server, store, messages, worker, timeout=120)

    lost = reconcile_and_republish(reconcile, redis_server, store, worker, messages)
    assert len(lost) > 1_000, "the broker was killed after the queue drained"
    assert worker.alive()


@pytest.mark.timeout(300)
def test_a_broker_killed_with_aof_loses_at_most_its_last_second_and_reconcile_finds_it(
    start_worker: Callable[..., Worker],
    tmp_path: Any,
    publisher: Callable[..., Celery],
    store: RedisStore,
    reconcile: Callable[..., Run],
    message_dict: MessageFactory,
) -> None:
    broker = RedisServer(
        port=free_port(),
        directory=tmp_path,
        options=["--appendonly", "yes", "--appendfsync", "everysec"],
    )
    broker.start()
    try:
        messages = distinct(message_dict, "aof", 4_000)
        publish(publisher(broker.url), store, messages)
        worker = start_worker(
            QUEUE,
            broker_url=broker.url,
            env={"EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": VISIBILITY_TIMEOUT},
        )
        worker.wait_for(300, timeout=120)

        broker.kill()
        broker.start()  # from its append-only file
        wait_quiet(broker, store, messages, worker, timeout=180)

        lost = reconcile_and_republish(reconcile, broker, store, worker, messages)
        assert len(lost) < 1_000  # the file kept the queue, less at most its last second
    finally:
        broker.kill()


@pytest.mark.timeout(300)
def test_a_worker_killed_again_and_again_loses_nothing_reconcile_cannot_find(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    publisher: Callable[..., Celery],
    store: RedisStore,
    reconcile: Callable[..., Run],
    message_dict: MessageFactory,
) -> None:
    """kill -9 of the whole worker as it consumes: its unacknowledged messages come back after
    the visibility timeout; one popped but not yet in kombu's unacked index is gone from the
    broker, and only the ledger still knows it."""
    messages = distinct(message_dict, "kill-loop", 3_000)
    publish(publisher(redis_server.url), store, messages)
    env = {"EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": VISIBILITY_TIMEOUT}
    for _ in range(3):
        worker = start_worker(QUEUE, broker_url=redis_server.url, env=env)
        worker.wait_for(200, timeout=120)
        worker.kill()
    worker = start_worker(QUEUE, broker_url=redis_server.url, env=env)
    wait_quiet(redis_server, store, messages, worker, timeout=180)

    reconcile_and_republish(reconcile, redis_server, store, worker, messages)
