"""Fault tests on one shared real worker: poison messages, an identical redelivery, and a
task failing on a bug.

Every test checks the product's promise for what it published: one first outcome per input
hash, never overwritten, and exactly the alerts the scenario implies.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery import Celery

from contracts.record_models import NONDETERMINISM, REJECTED, SCORED
from tests.factories import TWO_THIRDS_REASON
from tests.integration.conftest import check_redis
from tests.integration.fault_helpers import MessageFactory, wait_for_value
from tests.integration.worker_harness import (
    BROKER_URL,
    RECORD_EVENTS,
    STORE_URL,
    Launcher,
    Line,
    Worker,
    check_first_outcomes,
    flush_queue,
    hash_of,
    publish_raw,
    unacked_count,
    unacked_task_ids,
)
from worker.constants import SCORE, SCORE_BATCH
from worker.runtime.celery_app import create_app
from worker.settings import Settings
from worker.stores.redis.keys import outcome_key
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration


TWO_THIRDS = 2 / 3


# Poison messages and an identical redelivery, on one shared worker

MAX_MESSAGE_BYTES = 10_000
# The third element of Celery's task body, as send_task writes it.
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


@dataclass
class Rig:
    """One worker (EVIDENCE_MAX_MESSAGE_BYTES=10000) shared by the poison and redelivery tests."""

    worker: Worker
    queue: str
    app: Celery
    store: RedisStore
    broker: redis.Redis

    def records_of(self, task_id: str, count: int = 1) -> list[Line]:
        """Wait for `count` records of one task id; return them in order."""
        self.worker.wait_until(
            lambda lines: len(records_with(lines, task_id)) >= count,
            timeout=60,
            what=f"{count} records of task {task_id}",
        )
        return records_with(self.worker.lines(), task_id)

    def dead_letter_of(self, task_id: str) -> Any:
        (letter,) = [
            letter for letter in self.store.dead_letters(limit=1000) if letter.task_id == task_id
        ]
        return letter


def records_with(lines: list[Line], task_id: str) -> list[Line]:
    return [
        line for line in lines if line.get("event") in RECORD_EVENTS and line["task_id"] == task_id
    ]


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    check_redis()
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    queue_name = f"test-queue-{uuid.uuid4().hex[:10]}"
    launcher = Launcher(tmp_path_factory.mktemp("rig"), prefix)
    app = create_app(Settings(broker_url=BROKER_URL))
    rig_store = RedisStore.from_url(STORE_URL, prefix=prefix)
    broker = redis.Redis.from_url(BROKER_URL)
    try:
        worker = launcher.start(
            queue_name, env={"EVIDENCE_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES)}
        )
        yield Rig(worker, queue_name, app, rig_store, broker)
    finally:
        launcher.stop_all()
        app.close()
        flush_queue(BROKER_URL, queue_name)
        flush_queue(BROKER_URL, f"{queue_name}-hold")
        keys = list(rig_store.client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            rig_store.client.delete(*keys)
        rig_store.close()
        broker.close()


def send_bad_schema(rig: Rig, message_dict: MessageFactory) -> tuple[str, str | None, Any]:
    message = message_dict(case_id="poison-schema")
    del message["grader"]
    task_id = rig.app.send_task(SCORE, args=[message], queue=rig.queue).id
    return task_id, "poison-schema", message


def send_oversize(rig: Rig, message_dict: MessageFactory) -> tuple[str, str | None, Any]:
    message = message_dict(case_id="poison-oversize", answer="x" * 20_000)
    task_id = rig.app.send_task(SCORE, args=[message], queue=rig.queue).id
    return task_id, None, [[message], {}, EMBED]  # kept whole: Celery's envelope and all


def send_invalid_json(rig: Rig, message_dict: MessageFactory) -> tuple[str, str | None, Any]:
    return publish_raw(rig.app, rig.queue, b"{not json"), None, "{not json"


def send_batch_of_one_dict(rig: Rig, message_dict: MessageFactory) -> tuple[str, str | None, Any]:
    message = message_dict(case_id="poison-batch")
    task_id = rig.app.send_task(SCORE_BATCH, args=[message], queue=rig.queue).id
    return task_id, "poison-batch", message


def body_value(text: str) -> Any:
    """A dead letter's body, decoded when it is JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


OVERSIZE_REASON = rf"message is \d+ bytes, over the {MAX_MESSAGE_BYTES + 4096}-byte limit"
INVALID_JSON_REASON = (
    "invalid message body: Expecting property name enclosed in double quotes: "
    "line 1 column 2 (char 1)"
)


@pytest.mark.parametrize(
    ("send", "reason"),
    [
        pytest.param(send_bad_schema, re.escape("schema: grader: Field required"), id="schema"),
        pytest.param(send_oversize, OVERSIZE_REASON, id="oversize"),
        pytest.param(send_invalid_json, re.escape(INVALID_JSON_REASON), id="invalid-json"),
        pytest.param(
            send_batch_of_one_dict,
            re.escape("score_batch takes a list of messages, got dict"),
            id="batch-not-a-list",
        ),
    ],
)
def test_a_poison_message_is_rejected_and_dead_lettered_and_the_worker_keeps_consuming(
    rig: Rig,
    message_dict: MessageFactory,
    send: Callable[[Rig, MessageFactory], tuple[str, str | None, Any]],
    reason: str,
) -> None:
    """A poison message gives one rejected record and a whole dead letter; the next is scored."""
    poison_id, case_id, body = send(rig, message_dict)
    valid = message_dict(case_id=f"after-{poison_id}", answer=f"Valid after poison {poison_id}.")
    valid_id = rig.app.send_task(SCORE, args=[valid], queue=rig.queue).id

    (poisoned,) = rig.records_of(poison_id)
    (scored,) = rig.records_of(valid_id)
    letter = rig.dead_letter_of(poison_id)
    assert poisoned["event"] == REJECTED
    assert re.fullmatch(reason, poisoned["reason"]), poisoned["reason"]
    assert (poisoned["status"], poisoned["owner"], poisoned["case_id"]) == (
        "invalid",
        "evaluation-data",
        case_id,
    )
    assert (letter.error, body_value(letter.body)) == (poisoned["reason"], body)
    assert (scored["event"], scored["cache"], scored["value"]) == (SCORED, "miss", TWO_THIRDS)
    assert rig.worker.alive()
    assert rig.store.alerts() == []


def test_a_redelivered_message_is_recognised_as_its_own_write_and_raises_no_alert(
    rig: Rig, message_dict: MessageFactory
) -> None:
    """The broker delivers the same message twice (as kombu restores it): the store knows the
    second for the same task's write, so its record repeats the first (a miss) and nothing
    more is stored."""
    message = message_dict(case_id="redelivered-1", answer="Returns within 30 days. [redelivery]")
    hold = f"{rig.queue}-hold"  # nobody consumes it: a place to take the raw message from
    task_id = rig.app.send_task(SCORE, args=[message], queue=hold).id
    raw = rig.broker.rpop(hold)
    assert isinstance(raw, bytes)
    rig.broker.lpush(rig.queue, raw)
    rig.records_of(task_id, 1)
    wait_for_value(lambda: unacked_count(BROKER_URL, rig.queue), 0, timeout=30)
    # What kombu's Redis transport does when it restores an unacknowledged message.
    again = json.loads(raw)
    again["headers"]["redelivered"] = True
    again["properties"]["delivery_info"]["redelivered"] = True
    rig.broker.lpush(rig.queue, json.dumps(again))

    first, second = rig.records_of(task_id, 2)
    history = check_first_outcomes(rig.store, [message], [first, second])[hash_of(message)]
    assert (first["cache"], first["redelivered"]) == ("miss", False)
    assert (second["cache"], second["redelivered"]) == ("miss", True)
    assert (second["value"], second["reason"]) == (TWO_THIRDS, TWO_THIRDS_REASON)
    assert (second["observed_value"], second["observed_reason"]) == (None, None)
    assert [attempt.redelivered for attempt in history.attempts] == [False]
    assert history.total_attempts == 1
    assert [
        line for line in rig.worker.events(NONDETERMINISM) if line["input_hash"] == hash_of(message)
    ] == []
    assert rig.store.alerts() == []


def test_a_task_failing_on_a_bug_is_tried_again_then_recorded_never_acked_without_a_record(
    rig: Rig, message_dict: MessageFactory
) -> None:
    """A string where one message's outcome hash belongs (a key some other program wrote)
    makes the record script fail with WRONGTYPE: a bug, to the worker. Celery would ack the
    failed batch with nothing recorded. Here the batch goes back to the broker until the
    delivery that reaches EVIDENCE_MAX_DELIVERIES (5); that one scores each message alone:
    the other two are scored, the broken one is recorded rejected with the error and
    dead-lettered, and only then is the message acknowledged."""
    tag = uuid.uuid4().hex[:8]
    batch = [
        message_dict(case_id=f"bug-{n}", answer=f"Returns within 30 days. [{tag} {n}]")
        for n in range(3)
    ]
    rig.store.client.set(outcome_key(rig.store.prefix, hash_of(batch[1])), "not a hash")
    task_id = rig.app.send_task(SCORE_BATCH, args=[batch], queue=rig.queue).id

    records = rig.records_of(task_id, 3)
    wait_for_value(lambda: task_id in unacked_task_ids(BROKER_URL, rig.queue), False, timeout=30)

    failed = [
        line
        for line in rig.worker.events("evidence_coverage.task_failed")
        if line["task_id"] == task_id
    ]
    assert [(line["redelivered"], line["exception.type"]) for line in failed] == [
        (False, "ResponseError")
    ] + [(True, "ResponseError")] * 5
    assert failed[0]["case_ids"] == [f"bug-{n}" for n in range(3)]
    assert [(line["case_id"], line["event"], line["status"]) for line in records] == [
        ("bug-0", SCORED, "scored"),
        ("bug-1", REJECTED, "invalid"),
        ("bug-2", SCORED, "scored"),
    ]
    prefix = (
        "scoring failed on its last delivery (EVIDENCE_MAX_DELIVERIES=5): ResponseError: "
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    )
    assert records[1]["reason"].startswith(prefix), records[1]["reason"]
    letter = rig.dead_letter_of(task_id)
    assert (letter.error, letter.position, json.loads(letter.body)) == (
        records[1]["reason"],
        1,
        batch[1],
    )
    check_first_outcomes(rig.store, [batch[0], batch[2]], [records[0], records[2]])
    assert rig.worker.alive()
    assert rig.store.alerts() == []
