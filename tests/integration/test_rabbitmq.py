"""The same worker on RabbitMQ (amqp://), with the store on real Redis: quorum queues and
publisher confirms leave no window in which a message is lost.

Fails, never skips, when RabbitMQ is unreachable on 127.0.0.1:5672. Every test uses a fresh
queue name: a classic queue left by an older run could not be redeclared as a quorum queue.
The restart test needs `rabbitmqctl` for the local node (as root, or in the rabbitmq group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from amqp.exceptions import PreconditionFailed
from celery import Celery
from kombu import Connection, Exchange
from kombu import Queue as KombuQueue
from kombu.exceptions import OperationalError

from contracts.record_models import REJECTED, SCORED
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import (
    AMQP_URL,
    Line,
    Worker,
    check_first_outcomes,
    hash_of,
    send_scores,
)
from worker.constants import SCORE
from worker.stores.redis.keys import outcome_key
from worker.stores.redis.redis_store import RedisStore
from worker.upstream.publishing import send

pytestmark = pytest.mark.integration
# The machine's RabbitMQ, one module at a time across processes (worker_harness.rabbitmq_turn).
rabbitmq_turn = harness.rabbitmq_turn

# The harness's factory fixtures, used by name below.
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store
amqp_queue = harness.amqp_queue

MessageFactory = Callable[..., dict[str, Any]]


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


@pytest.mark.timeout(240)
def test_a_task_failing_on_a_bug_goes_back_to_rabbitmq_until_it_is_recorded(
    start_worker: Callable[..., Worker],
    amqp_queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """The record script fails on a corrupt key (WRONGTYPE): RabbitMQ gets the message back
    (basic.reject with requeue), redelivers it flagged, and on redelivery 2
    (EVIDENCE_MAX_DELIVERIES) it is recorded rejected; the next message is scored, and the
    queue ends empty with nothing unacknowledged."""
    broken, fine = (
        message_dict(case_id=f"amqp-{name}", answer=f"Returns within 30 days. [{name}]")
        for name in ("broken", "fine")
    )
    store.client.set(outcome_key(store.prefix, hash_of(broken)), "not a hash")
    worker = start_worker(amqp_queue, broker_url=AMQP_URL, env={"EVIDENCE_MAX_DELIVERIES": "2"})
    send_scores(publisher(AMQP_URL), amqp_queue, [broken, fine])

    records = worker.wait_for(2, timeout=120)
    wait_for(lambda: in_queue(amqp_queue) == (0, 0), timeout=30, what="an empty queue")

    assert sorted((line["case_id"], line["event"]) for line in records) == [
        ("amqp-broken", REJECTED),
        ("amqp-fine", SCORED),
    ]
    (rejected,) = [line for line in records if line["event"] == REJECTED]
    assert rejected["reason"].startswith(
        "scoring failed on its last delivery (EVIDENCE_MAX_DELIVERIES=2): ResponseError: WRONGTYPE"
    )
    assert rejected["redelivered"] is True
    failed = worker.events("evidence_coverage.task_failed")
    assert [(line["case_ids"], line["redelivered"]) for line in failed] == [
        (["amqp-broken"], False),
        (["amqp-broken"], True),
        (["amqp-broken"], True),
    ]
    assert [letter.error for letter in store.dead_letters()] == [rejected["reason"]]


def declared_type(name: str) -> str:
    """The x-queue-type RabbitMQ holds for an existing queue, without the management plugin:
    a declare whose arguments differ from the queue's is refused (PRECONDITION_FAILED)."""
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        connection.default_channel.queue_declare(name, passive=True)  # it exists
        for queue_type in ("quorum", "classic"):
            channel = connection.channel()
            try:
                channel.queue_declare(
                    name, durable=True, auto_delete=False, arguments={"x-queue-type": queue_type}
                )
            except PreconditionFailed:
                continue
            finally:
                channel.close()
            return queue_type
    raise AssertionError(f"{name}: neither quorum nor classic")


def message_count(name: str) -> int:
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        count: int = connection.default_channel.queue_declare(name, passive=True).message_count
        return count


def test_the_worker_declares_its_queue_as_a_quorum_queue(
    start_worker: Callable[..., Worker], amqp_queue: str
) -> None:
    """A worker on amqp:// declares its queue as a quorum queue before it reports ready."""
    start_worker(amqp_queue, broker_url=AMQP_URL).wait_ready()

    assert declared_type(amqp_queue) == "quorum"


def test_a_publisher_naming_another_queue_declares_it_as_a_quorum_queue(
    amqp_queue: str, publisher: Callable[..., Celery], message_dict: MessageFactory
) -> None:
    """A queue created on demand by a publisher (not its default) is a quorum queue too."""
    app = publisher(AMQP_URL)
    assert app.conf.task_default_queue != amqp_queue

    send_scores(app, amqp_queue, [message_dict(case_id="amqp-missing-queue")])

    assert (declared_type(amqp_queue), message_count(amqp_queue)) == ("quorum", 1)


QUEUE_LIMIT = 3


def test_a_publish_the_broker_refuses_raises_instead_of_being_dropped(
    amqp_queue: str, publisher: Callable[..., Celery], message_dict: MessageFactory
) -> None:
    """A full queue (reject-publish) nacks the next message: send raises, and exactly the
    messages whose send returned are in the queue."""
    app = publisher(AMQP_URL)
    app.conf.task_queues = [
        KombuQueue(
            amqp_queue,
            Exchange(amqp_queue),
            amqp_queue,
            queue_arguments={
                "x-queue-type": "quorum",
                "x-max-length": QUEUE_LIMIT,
                "x-overflow": "reject-publish",
            },
        )
    ]
    confirmed: list[str] = []

    def fill() -> None:
        with app.producer_or_acquire() as producer:
            for n in range(QUEUE_LIMIT * 10):
                message = message_dict(case_id=f"amqp-full-{n}")
                confirmed.append(send(app, SCORE, message, queue=amqp_queue, producer=producer))

    with pytest.raises(OperationalError, match=r"refused task .*basic\.nack.*not queued"):
        fill()

    assert QUEUE_LIMIT <= len(confirmed) < QUEUE_LIMIT * 10
    assert message_count(amqp_queue) == len(confirmed)


def test_a_publish_no_queue_takes_raises_instead_of_being_dropped(
    amqp_queue: str, publisher: Callable[..., Celery], message_dict: MessageFactory
) -> None:
    """A queue deleted after the publisher declared it: the returned message raises."""
    app = publisher(AMQP_URL)
    with app.producer_or_acquire() as producer:
        send(app, SCORE, message_dict(case_id="amqp-routed"), queue=amqp_queue, producer=producer)
        with Connection(AMQP_URL, connect_timeout=3) as connection:
            connection.default_channel.queue_delete(amqp_queue)

        with pytest.raises(OperationalError, match=r"no queue took task .*NO_ROUTE"):
            send(
                app,
                SCORE,
                message_dict(case_id="amqp-unroutable"),
                queue=amqp_queue,
                producer=producer,
            )


KILL_LOOP_MESSAGES = 500
KILLS = 3


def recorded_case_ids(workers: list[Worker]) -> set[str]:
    return {line["case_id"] for worker in workers for line in worker.records()}


def recorded_at_least(workers: list[Worker], count: int) -> Callable[[list[Line]], bool]:
    """A wait_until condition: `count` distinct case_ids recorded by these workers together."""
    return lambda _: len(recorded_case_ids(workers)) >= count


def check_every_message_recorded_once(
    store: RedisStore, messages: list[dict[str, Any]], workers: list[Worker]
) -> list[Line]:
    """Exact accounting: every case_id has its first outcome, one attempt, no rejection,
    no conflict and no alert. Returns all workers' records."""
    records = [line for worker in workers for line in worker.records()]
    histories = check_first_outcomes(store, messages, records)
    assert len(histories) == len(messages)
    assert {history.first.case_id for history in histories.values()} == {
        message["case_id"] for message in messages
    }
    assert sum(history.total_attempts for history in histories.values()) == len(messages)
    assert [line for line in records if line["event"] == REJECTED] == []
    assert [line for line in records if line.get("cache") == "conflict"] == []
    assert store.alerts(limit=1000) == []
    return records


@pytest.mark.timeout(600)
def test_three_kill_9s_of_the_worker_while_it_consumes_lose_nothing(
    start_worker: Callable[..., Worker],
    amqp_queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """kill -9 of the whole worker three times mid-queue, a new worker each time: all 500
    case_ids end with their first outcome, once, and no conflict."""
    messages = distinct(message_dict, "amqp-kill", KILL_LOOP_MESSAGES)
    send_scores(publisher(AMQP_URL), amqp_queue, messages)
    workers = [start_worker(amqp_queue, broker_url=AMQP_URL)]

    for kill in range(1, KILLS + 1):
        threshold = kill * KILL_LOOP_MESSAGES // (KILLS + 2)
        workers[-1].wait_until(
            recorded_at_least(workers, threshold),
            timeout=180,
            what=f"{threshold} messages recorded before kill {kill}",
        )
        workers[-1].kill()
        assert len(recorded_case_ids(workers)) < KILL_LOOP_MESSAGES, "drained before the kill"
        workers.append(start_worker(amqp_queue, broker_url=AMQP_URL))
    workers[-1].wait_until(
        lambda _: len(recorded_case_ids(workers)) == KILL_LOOP_MESSAGES,
        timeout=300,
        what="every message recorded",
    )

    records = check_every_message_recorded_once(store, messages, workers)
    assert [line for line in records if line["redelivered"]], "no kill caught a message"
    assert message_count(amqp_queue) == 0


RESTART_MESSAGES = 300


def restart_rabbitmq() -> float:
    """Stop and start the local node's RabbitMQ application; returns the seconds it took."""
    started = time.monotonic()
    for command in (["stop_app"], ["start_app"], ["await_startup"]):
        subprocess.run(["rabbitmqctl", *command], check=True, capture_output=True, timeout=60)
    return time.monotonic() - started


@pytest.mark.timeout(600)
def test_a_rabbitmq_restart_while_messages_are_queued_and_in_flight_loses_nothing(
    start_worker: Callable[..., Worker],
    amqp_queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """RabbitMQ restarts with confirmed messages queued and others held unacknowledged by a
    worker: all of them survive, the worker reconnects, and every case_id ends with its first
    outcome, once."""
    messages = distinct(message_dict, "amqp-restart", RESTART_MESSAGES)
    send_scores(publisher(AMQP_URL), amqp_queue, messages)
    worker = start_worker(amqp_queue, broker_url=AMQP_URL)
    worker.wait_until(
        lambda _: len(recorded_case_ids([worker])) >= RESTART_MESSAGES // 10,
        timeout=180,
        what="messages recorded before the restart",
    )
    # Freeze the pool: the worker then holds its prefetch window unacknowledged, and the rest
    # stays queued, for the whole restart (an unfrozen worker drains 300 before it begins).
    children = worker.child_pids()
    for pid in children:
        os.kill(pid, signal.SIGSTOP)
    # Let the prefetch window fill (nothing is recorded meanwhile): on a busy machine one
    # second was not always enough, and the restart then had nothing in flight to test.
    wait_for(lambda: in_queue(amqp_queue)[1] > 0, timeout=20, what="messages in flight")
    recorded = len(recorded_case_ids([worker]))
    queued = message_count(amqp_queue)
    assert queued > 0, "drained before the restart"

    took = restart_rabbitmq()
    # Counted as ready plus unacknowledged: the worker reconnects at once and may take its
    # prefetch window again before the count, so the ready figure alone can hide the messages
    # that were in flight. RabbitMQ refreshes a quorum queue's figures on its tick, after the
    # queue has elected its leader again.
    wait_for(
        lambda: sum(in_queue(amqp_queue)) > queued,
        timeout=30,
        what=f"more than the {queued} queued messages back after the restart (the in-flight ones)",
    )
    survived = sum(in_queue(amqp_queue))
    for pid in children:
        os.kill(pid, signal.SIGCONT)
    worker.wait_until(
        lambda _: len(recorded_case_ids([worker])) == RESTART_MESSAGES,
        timeout=300,
        what="every message recorded after the restart",
    )

    assert took < 30
    # Nothing is acknowledged while the pool is frozen, and a message is recorded before its
    # ack: every message not recorded survived, and at most one per child besides.
    assert RESTART_MESSAGES - recorded <= survived <= RESTART_MESSAGES - recorded + len(children)
    records = check_every_message_recorded_once(store, messages, [worker])
    assert [line for line in records if line["redelivered"]], "nothing was in flight"
    assert message_count(amqp_queue) == 0


def in_queue(name: str) -> tuple[int, int]:
    """`name`'s (ready, unacknowledged) messages as `rabbitmqctl` lists them: (0, 0) while the
    node does not list the queue or its figures yet."""
    listed = subprocess.run(
        [
            "rabbitmqctl",
            "list_queues",
            "--quiet",
            "--no-table-headers",
            "name",
            "messages_ready",
            "messages_unacknowledged",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    rows = {row[0]: row[1:] for row in map(str.split, listed.splitlines()) if len(row) == 3}
    ready, unacknowledged = rows.get(name, ("0", "0"))
    if not (ready.isdigit() and unacknowledged.isdigit()):
        return 0, 0
    return int(ready), int(unacknowledged)


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
