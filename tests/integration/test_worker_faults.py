"""Fault tests on real workers: crashes, races, a Redis restart, poison messages and fuzz.

Every test checks the product's promise for what it published: one first outcome per input
hash, never overwritten, and exactly the alerts the scenario implies.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import signal
import string
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from contracts import Alert, ContractDriftAlert
from contracts.records import CONTRACT_DRIFT, NONDETERMINISM, REJECTED, SCORED
from tests.conftest import BASE_MESSAGE, EXAMPLES
from tests.integration import worker_harness as harness
from tests.integration.conftest import check_redis
from tests.integration.worker_harness import (
    BROKER_URL,
    RECORD_EVENTS,
    STORE_URL,
    Launcher,
    Line,
    RedisServer,
    Worker,
    check_first_outcomes,
    flush_queue,
    hash_of,
    publish_raw,
    queue_length,
    send_scores,
    unacked_count,
    unacked_task_ids,
)
from worker.constants import SCORE, SCORE_BATCH
from worker.errors import InputError
from worker.pipeline.intake import check_encodable, parse_message
from worker.runtime.celery_app import celery_config, create_app
from worker.settings import Settings, read_policy_file
from worker.stores.keys import outcome_key
from worker.stores.redis import RedisStore

pytestmark = pytest.mark.integration

# The harness's factory fixtures, used by name below.
make_queue = harness.make_queue
queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store
redis_server = harness.redis_server

MessageFactory = Callable[..., dict[str, Any]]
POLICY = EXAMPLES / "policy.toml"
TWO_THIRDS = 2 / 3
TWO_THIRDS_REASON = "supported=2; required=3; missing=refund-method"
ONE_THIRD_REASON = "supported=1; required=3; missing=refund-method,support-channel"


def distinct(message_dict: MessageFactory, tag: str, count: int, **fields: Any) -> list[dict]:
    """`count` messages with inputs (and so input hashes) of their own."""
    return [
        message_dict(
            case_id=f"{tag}-{n:05d}",
            answer=f"Returns are accepted within 30 days. [{tag} {n}]",
            **fields,
        )
        for n in range(count)
    ]


def case_ids(lines: list[Line], event: str = SCORED) -> set[str]:
    return {line["case_id"] for line in lines if line.get("event") == event}


def all_scored(messages: list[dict], *also: set[str]) -> Callable[[list[Line]], bool]:
    wanted = {message["case_id"] for message in messages}
    return lambda lines: wanted <= case_ids(lines).union(*also)


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


# 1. kill -9 of a pool child mid-task

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


# 2. kill -9 of the whole worker with messages in flight

VISIBILITY_TIMEOUT_SECONDS = 5
REDELIVERY_PROMISE_SECONDS = VISIBILITY_TIMEOUT_SECONDS + 30
# Messages a worker with the harness's default two pool children holds unacknowledged at most.
PREFETCH = celery_config(Settings())["worker_prefetch_multiplier"] * 2


def wait_for_value(read: Callable[[], int], expected: int, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (value := read()) != expected:
        assert time.monotonic() < deadline, f"still {value} after {timeout}s, expected {expected}"
        time.sleep(harness.POLL_SECONDS)


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


# 3. two workers, one input hash, two outcomes, at the same time


@pytest.mark.timeout(180)
def test_two_workers_racing_on_one_input_hash_keep_one_first_outcome_and_raise_one_alert(
    start_worker: Callable[..., Worker],
    make_queue: Callable[..., str],
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """One hash sent to two workers at once with different supported IDs: miss and conflict."""
    pairs = 40
    left_queue, right_queue = make_queue(), make_queue()
    left, right = start_worker(left_queue), start_worker(right_queue)
    left.wait_ready()
    right.wait_ready()
    lefts = distinct(message_dict, "race-left", pairs)
    rights = [
        {**message, "case_id": f"race-right-{n:05d}", "supported_claim_ids": ["refund-window"]}
        for n, message in enumerate(lefts)
    ]
    app = publisher()
    with app.producer_or_acquire() as producer:
        for left_message, right_message in zip(lefts, rights, strict=True):
            app.send_task(SCORE, args=[left_message], queue=left_queue, producer=producer)
            app.send_task(SCORE, args=[right_message], queue=right_queue, producer=producer)
    left.wait_for(pairs)
    right.wait_for(pairs)

    records = left.records() + right.records()
    histories = check_first_outcomes(store, lefts + rights, records)
    alerts = store.alerts(limit=1000)
    assert len(histories) == pairs
    assert len(alerts) == pairs
    assert len(left.events(NONDETERMINISM)) + len(right.events(NONDETERMINISM)) == pairs
    for left_message, right_message in zip(lefts, rights, strict=True):
        key = hash_of(left_message)
        assert hash_of(right_message) == key
        caches = sorted(line["cache"] for line in records if line["input_hash"] == key)
        assert caches == ["conflict", "miss"]
        assert histories[key].total_attempts == 2
        (alert,) = [alert for alert in alerts if alert.input_hash == key]
        assert isinstance(alert, Alert)
        assert alert.decision == "kept_first"
        assert alert.first == histories[key].first
        assert {alert.first.case_id, alert.observed.case_id} == {
            left_message["case_id"],
            right_message["case_id"],
        }
        assert {alert.first.reason, alert.observed.reason} == {TWO_THIRDS_REASON, ONE_THIRD_REASON}


def test_two_workers_racing_on_one_case_with_two_required_sets_raise_one_drift_each(
    start_worker: Callable[..., Worker],
    make_queue: Callable[..., str],
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """Per case, one required set to each of two workers at once (same contract version):
    whichever records first keeps its set, the other is contract drift, alerted once, in
    the stream and as one ERROR line, and its record is owned by evaluation data."""
    pairs = 40
    left_queue, right_queue = make_queue(), make_queue()
    left, right = start_worker(left_queue), start_worker(right_queue)
    left.wait_ready()
    right.wait_ready()
    lefts = distinct(message_dict, "drift", pairs)
    rights = [
        {**message, "required_claim_ids": [*message["required_claim_ids"], "refund-fee"]}
        for message in lefts
    ]
    app = publisher()
    with app.producer_or_acquire() as producer:
        for left_message, right_message in zip(lefts, rights, strict=True):
            app.send_task(SCORE, args=[left_message], queue=left_queue, producer=producer)
            app.send_task(SCORE, args=[right_message], queue=right_queue, producer=producer)
    left.wait_for(pairs)
    right.wait_for(pairs)

    records = left.records() + right.records()
    drifted = sorted(r["case_id"] for r in records if r["contract_drift"])
    assert drifted == sorted(message["case_id"] for message in lefts)
    assert {r["owner"] for r in records if r["contract_drift"]} == {"evaluation-data"}
    alerts = store.alerts(limit=1000, kind="contract_drift")
    assert sorted(alert.case_id for alert in alerts if isinstance(alert, ContractDriftAlert)) == (
        drifted
    )
    lines = left.events(CONTRACT_DRIFT) + right.events(CONTRACT_DRIFT)
    assert sorted(line["case_id"] for line in lines) == drifted
    for alert in alerts:
        assert isinstance(alert, ContractDriftAlert)
        assert {*alert.added_claim_ids, *alert.removed_claim_ids} == {"refund-fee"}
        drifted_record = next(
            r for r in records if r["case_id"] == alert.case_id and r["contract_drift"]
        )
        assert drifted_record["input_hash"] == alert.input_hash != alert.first_input_hash


# 4. Redis restarted under a running worker


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


# 5 and 6. Poison messages and an identical redelivery, on one shared worker

MAX_MESSAGE_BYTES = 10_000
# The third element of Celery's task body, as send_task writes it.
EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
ENVELOPE_TAIL = ', {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'


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


# 7. Fuzz: at least 10,000 arbitrary payloads through a real worker

FUZZ_SEED = 20261202
BATCHES = 82
BATCH_SIZE = 100
SINGLES = 1_800
DEFAULT_MAX_MESSAGE_BYTES = Settings().max_message_bytes
# Letters, markup, non-ASCII, control characters, and lone surrogates (legal JSON escapes).
ALPHABET = string.ascii_letters + string.digits + ' -_.,:;/\\"{}[]' + "éß✓漢😀\u200b\u202e\x00\x7f"
SURROGATES = "\ud800\udbff\udc00\udfff"
SCALARS: list[Any] = [None, True, False, 0, -1, 1, 2**53 + 1, -(2**63), 10**30, 0.5, -0.0, 1e308]
SCALARS += [math.nan, math.inf]
BASE_FIELDS = [*BASE_MESSAGE, "produced_at", "trace_id", "policy_group", "blocking"]


def random_text(rng: random.Random, longest: int = 12) -> str:
    characters = ALPHABET + SURROGATES if rng.random() < 0.1 else ALPHABET
    return "".join(rng.choice(characters) for _ in range(rng.randint(0, longest)))


def random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 4 or roll < 0.45:
        return rng.choice(SCALARS)
    if roll < 0.65:
        return random_text(rng)
    if roll < 0.82:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = [*BASE_FIELDS, "", "__type__"]
    return {
        (rng.choice(keys) if rng.random() < 0.3 else random_text(rng, 6)): random_json(
            rng, depth + 1
        )
        for _ in range(rng.randint(0, 4))
    }


def random_ids(rng: random.Random) -> list[str]:
    pool = ["refund-window", "refund-method", "support-channel", "C1", "c1", " c1 ", "", "x\u00e9"]
    return [
        rng.choice(pool) if rng.random() < 0.8 else random_text(rng)
        for _ in range(rng.randint(0, 5))
    ]


def valid_message(rng: random.Random, message_dict: MessageFactory, n: int) -> dict[str, Any]:
    """A well-formed message with inputs of its own; its claim lists may be metric-invalid."""
    required = random_ids(rng)
    supported = rng.sample(required, rng.randint(0, len(required))) + (
        [random_text(rng)] if rng.random() < 0.2 else []
    )
    return message_dict(
        case_id=f"fuzz-{n:05d}",
        answer=f"Fuzzed answer {n}: {random_text(rng, 40)}",
        required_claim_ids=required,
        supported_claim_ids=supported,
    )


def near_valid_message(rng: random.Random, message_dict: MessageFactory, n: int) -> dict[str, Any]:
    """A valid message with exactly one thing broken."""
    message = valid_message(rng, message_dict, n)
    mode = rng.randrange(6)
    if mode == 0:
        message[rng.choice(BASE_FIELDS)] = random_json(rng)
    elif mode == 1:
        del message[rng.choice(list(message))]
    elif mode == 2:
        message[random_text(rng, 8) or "unknown"] = random_json(rng)
    elif mode == 3:
        message["contexts"][0][rng.choice(["document_id", "text", "extra"])] = random_json(rng)
    elif mode == 4:
        message["grader"][rng.choice(["name", "version", "model", "prompt", "params", "x"])] = (
            random_json(rng)
        )
    else:
        message["citations"] = [
            {"claim_id": "refund-window", "document_id": "d", "answer_span": random_json(rng)}
        ]
    return message


def arbitrary_payload(rng: random.Random, message_dict: MessageFactory, n: int) -> Any:
    roll = rng.random()
    if roll < 0.3:
        return random_json(rng)
    if roll < 0.75:
        return near_valid_message(rng, message_dict, n)
    return valid_message(rng, message_dict, n)


def expected_event(payload: Any) -> str:
    """What the worker must record for a payload, judged in this process by the same rules."""
    try:
        check_encodable(parse_message(payload, max_bytes=DEFAULT_MAX_MESSAGE_BYTES))
    except InputError:
        return REJECTED
    return SCORED


def raw_bodies(message_dict: MessageFactory) -> list[bytes]:
    """Bodies no JSON encoder would produce: deep nesting, bad UTF-8, broken envelopes."""
    deep_message = json.dumps(message_dict(case_id="fuzz-deep", answer="Deep params."))
    bodies = []
    for depth in (10, 60, 100, 500, 900, 990, 1_000, 2_000, 5_000):
        bodies.append(f"[[{'[' * depth}{']' * depth}]{ENVELOPE_TAIL}".encode())
        params = '{"a": ' * depth + "1" + "}" * depth
        deep = deep_message.replace('{"temperature": 0.0, "seed": 7}', params)
        bodies.append(f"[[{deep}]{ENVELOPE_TAIL}".encode())
    bodies += [
        b'[["\xff\xfe"], {}, {}]',
        b"\xc3\x28",
        f"[[{deep_message[:-40]}".encode(),
        b'{"args": 1}',
        b"[]",
        b"null",
        b"[[1], 5, {}]",
        f'[["\\ud800"]{ENVELOPE_TAIL}'.encode(),
        f'[[{{"__type__": "datetime", "__value__": "garbage"}}]{ENVELOPE_TAIL}'.encode(),
        b"[[], {}, {}]",
        b'[[1, 2], {"message": 3}, {}]',
    ]
    rng = random.Random(FUZZ_SEED)
    bodies += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))) for _ in range(40)]
    return bodies


def huge_messages(message_dict: MessageFactory) -> list[tuple[dict[str, Any], str]]:
    """Huge strings just under and over the default 1 MiB limit, with the expected event."""
    limit = DEFAULT_MAX_MESSAGE_BYTES
    return [
        (message_dict(case_id="fuzz-huge-answer", answer="a" * (limit - 10_000)), SCORED),
        (
            message_dict(
                case_id="fuzz-huge-context", contexts=[{"document_id": "d", "text": "t" * 500_000}]
            ),
            SCORED,
        ),
        (message_dict(case_id="c" * 300_000, answer="Huge case id."), SCORED),
        (
            message_dict(
                case_id="fuzz-huge-id", answer="Huge claim id.", required_claim_ids=["i" * 200_000]
            ),
            SCORED,
        ),
        (message_dict(case_id="fuzz-over-limit", answer="o" * (limit + 10_000)), REJECTED),
    ]


@pytest.mark.timeout(400)
def test_ten_thousand_arbitrary_payloads_each_end_as_exactly_one_record(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """Random JSON, near-valid, huge, deep and non-UTF-8 payloads: one record each, no crash."""
    rng = random.Random(FUZZ_SEED)
    worker = start_worker(queue)
    app = publisher()
    # task id -> the events its records must have, in order (None: scored or rejected).
    expected: dict[str, list[str | None]] = {}
    sent = 0
    n = 0
    with app.producer_or_acquire() as producer:
        for _ in range(BATCHES):
            batch = []
            for _ in range(BATCH_SIZE):
                batch.append(arbitrary_payload(rng, message_dict, n))
                n += 1
            task_id = app.send_task(SCORE_BATCH, args=[batch], queue=queue, producer=producer).id
            roundtrip = json.loads(json.dumps(batch))
            expected[task_id] = [expected_event(payload) for payload in roundtrip]
            sent += len(batch)
        for _ in range(SINGLES):
            payload = arbitrary_payload(rng, message_dict, n)
            n += 1
            task_id = app.send_task(SCORE, args=[payload], queue=queue, producer=producer).id
            expected[task_id] = [expected_event(json.loads(json.dumps(payload)))]
            sent += 1
        for message, event in huge_messages(message_dict):
            task_id = app.send_task(SCORE, args=[message], queue=queue, producer=producer).id
            expected[task_id] = [event]
            sent += 1
    for body in raw_bodies(message_dict):
        expected[publish_raw(app, queue, body)] = [None]
        sent += 1
    total = sum(len(events) for events in expected.values())

    worker.wait_until(
        lambda lines: (
            sum(line.get("event") in RECORD_EVENTS for line in lines) >= total
            or any(line.get("level") in ("error", "critical") for line in lines)
        ),
        timeout=300,
        what=f"{total} records",
    )
    records = worker.records()
    by_task: dict[str, list[Line]] = {}
    for record in records:
        by_task.setdefault(record["task_id"], []).append(record)
    assert sent >= 10_000
    assert {task_id: len(lines) for task_id, lines in by_task.items()} == {
        task_id: len(events) for task_id, events in expected.items()
    }
    wrong = {
        task_id: [(line["event"], line["reason"][:200]) for line in by_task[task_id]]
        for task_id, events in expected.items()
        if any(
            event not in (None, line["event"])
            for event, line in zip(events, by_task[task_id], strict=True)
        )
    }
    assert wrong == {}
    assert worker.alive()
    assert [line for line in worker.lines() if line.get("level") in ("error", "critical")] == []
    assert store.alerts() == []
