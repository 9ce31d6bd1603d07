"""The same worker on RabbitMQ (amqp://), with the store on real Redis.

Fails, never skips, when RabbitMQ is unreachable on 127.0.0.1:5672.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from kombu import Connection
from kombu import Queue as KombuQueue

from contracts.records import SCORED
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import (
    AMQP_URL,
    Worker,
    check_first_outcomes,
    check_rabbitmq,
    hash_of,
    send_scores,
)
from worker.constants import SCORE
from worker.stores.redis import RedisStore

pytestmark = pytest.mark.integration

# The harness's factory fixtures, used by name below.
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store

MessageFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def amqp_queue() -> Iterator[str]:
    """A queue of this test's own on RabbitMQ; it and its exchange are deleted afterwards."""
    check_rabbitmq()
    name = f"test-queue-{uuid.uuid4().hex[:10]}"
    yield name
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        channel = connection.default_channel
        channel.queue_delete(name)
        channel.exchange_delete(name)


def distinct(message_dict: MessageFactory, tag: str, count: int) -> list[dict[str, Any]]:
    return [
        message_dict(case_id=f"{tag}-{n:03d}", answer=f"Returns within 30 days. [{tag} {n}]")
        for n in range(count)
    ]


def test_twenty_messages_through_rabbitmq_are_all_scored(
    start_worker: Callable[..., Worker],
    amqp_queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """amqp:// broker, Redis store: 20 messages give 20 `miss` records and 20 first outcomes."""
    messages = distinct(message_dict, "amqp", 20)
    worker = start_worker(amqp_queue, broker_url=AMQP_URL)

    send_scores(publisher(AMQP_URL), amqp_queue, messages)

    records = worker.wait_for(20, timeout=120)
    assert sorted((line["event"], line["case_id"], line["cache"]) for line in records) == [
        (SCORED, message["case_id"], "miss") for message in messages
    ]
    assert len(check_first_outcomes(store, messages, records)) == 20
    assert store.alerts() == []


@pytest.mark.timeout(240)
def test_a_duplicate_redelivered_by_rabbitmq_is_recognised_as_the_same_write(
    start_worker: Callable[..., Worker],
    amqp_queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """A copy taken by a consumer that dies unacknowledged comes back redelivered; the store
    knows it for the task's own earlier write: its record repeats the miss, nothing is added."""
    message = message_dict(case_id="amqp-redelivered", answer="Returns within 30 days. [amqp]")
    app = publisher(AMQP_URL)
    first = start_worker(amqp_queue, broker_url=AMQP_URL)
    (task_id,) = send_scores(app, amqp_queue, [message])
    first.wait_for(1, timeout=120)
    first.stop()

    app.send_task(SCORE, args=[message], queue=amqp_queue, task_id=task_id)
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        taken = KombuQueue(amqp_queue, channel=connection.default_channel).get(no_ack=False)
        assert taken is not None
        assert (taken.headers["id"], taken.delivery_info["redelivered"]) == (task_id, False)
    # The connection closed without an ack: RabbitMQ requeues the copy, flagged redelivered.
    second = start_worker(amqp_queue, broker_url=AMQP_URL)

    (record,) = second.wait_for(1, timeout=120)
    assert (record["task_id"], record["redelivered"], record["cache"]) == (task_id, True, "miss")
    history = store.history(hash_of(message))
    assert history is not None
    assert [attempt.redelivered for attempt in history.attempts] == [False]
    assert history.total_attempts == 1
    assert store.alerts() == []
