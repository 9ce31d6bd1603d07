"""The worker never hangs and never dies on one item: a broker that stops answering, and items
on the queue that are not messages at all.

Workers run the Procfile's command line (heartbeat on: its PUBLISH every 2 s is what used to
block the event loop), with a unique hostname and two pool processes. Timeouts are short
versions of the defaults that take the same paths.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection, Queue

from contracts.record_models import REJECTED, SCORED
from tests.integration import worker_harness as harness
from tests.integration.fault_proxy import FaultProxy
from tests.integration.worker_harness import (
    BROKER_URL,
    STORE_URL,
    Line,
    RedisServer,
    Worker,
    check_first_outcomes,
    queue_length,
    scored_cases,
    send_scores,
    unacked_count,
    unacked_task_ids,
)
from worker.bench.launch import worker_command
from worker.cli import main
from worker.cli.exit_codes import OK
from worker.runtime.consumer import guard_redis_transport
from worker.settings import DEAD_LETTER_MAX_BYTES
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
proxy = harness.proxy
store = harness.store
redis_server = harness.redis_server

MessageFactory = Callable[..., dict[str, Any]]
BROKER_DB = 12
SOCKET_TIMEOUT_SECONDS = 2
HEALTH_CHECK_SECONDS = 2
SHORT_TIMEOUTS = {
    "EVIDENCE_BROKER_SOCKET_TIMEOUT_SECONDS": str(SOCKET_TIMEOUT_SECONDS),
    "EVIDENCE_BROKER_HEALTH_CHECK_SECONDS": str(HEALTH_CHECK_SECONDS),
}
# Longer than the socket timeout and the BRPOP check together, so both have fired.
DROP_SECONDS = 3 * (SOCKET_TIMEOUT_SECONDS + HEALTH_CHECK_SECONDS)
RESUME_BOUND_SECONDS = 60.0
NOTICE_BOUND_SECONDS = 30.0
# What kombu and Celery log when a connection stops answering (WARNING), and when Celery has
# connected again.
STALE_EVENTS = ("Redis BRPOP got no reply", "consumer: Connection to broker lost")
CONNECTED_EVENT = "Connected to redis://"


def distinct(message_dict: MessageFactory, tag: str, count: int) -> list[dict[str, Any]]:
    return [
        message_dict(case_id=f"{tag}-{n:03d}", answer=f"Returns within 30 days. [{tag} {n}]")
        for n in range(count)
    ]


def procfile_worker(start: Callable[..., Worker], queue: str, **kwargs: Any) -> Worker:
    """A worker started as the Procfile starts one (heartbeat on), plus a unique hostname."""
    hostname = f"{queue}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
    command = worker_command(queue, hostname=hostname, concurrency=2)
    return start(queue, command=command, **kwargs)


def is_stale_line(line: Line) -> bool:
    return any(text in str(line.get("event", "")) for text in STALE_EVENTS)


def connected_after_stale(lines: list[Line]) -> bool:
    """A `Connected to` line after the first line saying the broker stopped answering."""
    stale = next((n for n, line in enumerate(lines) if is_stale_line(line)), None)
    return stale is not None and any(
        str(line.get("event", "")).startswith(CONNECTED_EVENT) for line in lines[stale + 1 :]
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("then_reset", [False, True], ids=["dropped", "dropped-then-reset"])
def test_a_broker_that_stops_replying_costs_a_bounded_pause_and_no_message(
    then_reset: bool,
    proxy: FaultProxy,
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """Replies dropped for longer than the socket timeout (then every connection reset, or
    not), then let through: the worker reconnects, says so, and records every message
    published after the fault within 60 s."""
    worker = procfile_worker(
        start_worker, queue, broker_url=proxy.url(BROKER_DB), env=SHORT_TIMEOUTS
    )
    worker.wait_ready()
    before = distinct(message_dict, "before", 5)
    send_scores(publisher(), queue, before)
    worker.wait_until(
        lambda lines: scored_cases(lines) >= {m["case_id"] for m in before},
        timeout=60,
        what="the messages published before the fault",
    )

    proxy.drop_replies()
    dropped_at = time.monotonic()
    try:
        # Noticed while the broker is still silent, not only once it answers again.
        worker.wait_until(
            lambda lines: any(is_stale_line(line) for line in lines),
            timeout=NOTICE_BOUND_SECONDS,
            what="a line saying the broker stopped answering",
        )
        time.sleep(max(0.0, DROP_SECONDS - (time.monotonic() - dropped_at)))
        if then_reset:
            proxy.reset_all()
    finally:
        proxy.pass_traffic()  # also for the teardown's flush, which goes through the proxy
    assert proxy.dropped_bytes > 0  # the worker did talk to the broker meanwhile

    after = distinct(message_dict, "after", 20)
    send_scores(publisher(), queue, after)  # straight to Redis, not through the proxy
    published_at = time.monotonic()
    worker.wait_until(
        lambda lines: scored_cases(lines) >= {m["case_id"] for m in after},
        timeout=RESUME_BOUND_SECONDS,
        what="every message published after the fault",
    )
    resumed_seconds = time.monotonic() - published_at

    assert worker.alive()
    assert connected_after_stale(worker.lines()), "no line says the worker reconnected"
    records = [line for line in worker.records() if line.get("case_id", "").startswith("after")]
    assert sorted(str(line["case_id"]) for line in records) == sorted(m["case_id"] for m in after)
    assert all(line["event"] == SCORED and line["cache"] == "miss" for line in records)
    check_first_outcomes(store, after, records)
    assert store.dead_letters() == []
    assert resumed_seconds < RESUME_BOUND_SECONDS


def envelope(headers: dict[str, Any], properties: dict[str, Any]) -> bytes:
    """A kombu envelope as its Redis transport writes one, with these headers and
    properties."""
    return json.dumps(
        {
            "body": "W1tdLCB7fSwge31d",  # [[], {}, {}] in base64
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "headers": headers,
            "properties": {
                "body_encoding": "base64",
                "delivery_tag": "junk-tag",
                "delivery_info": {"exchange": "", "routing_key": "q"},
                **properties,
            },
        }
    ).encode()


NOT_JSON = "not a message envelope: the queue item is not JSON"
NOT_KOMBU = "not a message envelope: the queue item is JSON but kombu cannot read it as a message"
WRONG_TYPE = "not a message envelope: the queue item is JSON but its"
# Raw items no kombu client would push, and the reason each one's record must give. The last
# two raised TypeError (unhashable) in the event loop: the worker exited, the item was gone.
JUNK = {
    b"not json": f"{NOT_JSON} (Expecting value: line 1 column 1 (char 0))",
    b'{"a":1}': f"{NOT_KOMBU} (KeyError: 'properties')",
    b"\x80\x81 binary \x00 bytes": f"{NOT_JSON} (Expecting value: line 1 column 1 (char 0))",
    envelope({"task": ["evidence_coverage.score"], "id": "junk-1"}, {}): (
        f"{WRONG_TYPE} headers.task is a list, not text"
    ),
    envelope({"task": "evidence_coverage.score", "id": "junk-2"}, {"delivery_tag": [1]}): (
        f"{WRONG_TYPE} properties.delivery_tag is a list, not text"
    ),
}
JUNK_ITEMS = list(JUNK)


@pytest.mark.timeout(180)
def test_items_that_are_not_messages_are_dead_lettered_and_the_worker_keeps_consuming(
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """Five raw items pushed onto the queue's list between five messages: five scored, five
    rejected with a reason naming what they were, five dead letters holding them whole."""
    worker = procfile_worker(start_worker, queue)
    worker.wait_ready()
    messages = distinct(message_dict, "valid", 5)
    app = publisher()
    client = redis.Redis.from_url(BROKER_URL)
    try:
        # kombu publishes with LPUSH and consumes with BRPOP: pushed in this order, they are
        # consumed in this order.
        for n, message in enumerate(messages):
            send_scores(app, queue, [message])
            if n < len(JUNK_ITEMS):
                client.lpush(queue, JUNK_ITEMS[n])
    finally:
        client.close()

    lines = worker.wait_for(len(messages) + len(JUNK_ITEMS), timeout=60)

    assert worker.alive()
    assert scored_cases(lines) == {m["case_id"] for m in messages}
    rejected = [line for line in lines if line["event"] == REJECTED]
    assert len(rejected) == len(JUNK_ITEMS)
    assert sorted(line["reason"] for line in rejected) == sorted(JUNK.values())
    letters = store.dead_letters()
    # Each dead letter holds its item whole, under the reason its record gave.
    assert sorted((letter.body, letter.error) for letter in letters) == sorted(
        (item.decode("utf-8", "replace"), reason) for item, reason in JUNK.items()
    )
    check_first_outcomes(store, messages, lines)
    assert queue_length(BROKER_URL, queue) == 0
    assert unacked_count(BROKER_URL, queue) == 0


# The poison item: a kombu envelope whose headers nest `[` 100,000 deep. kombu's JSON
# raised RecursionError on it in the event loop: the worker exited and the item was gone.
DEEP = 100_000
DEEP_ITEM = json.dumps(
    {
        "body": "W1tdLCB7fSwge31d",
        "content-type": "application/json",
        "content-encoding": "utf-8",
        "headers": {"task": "evidence_coverage.score", "id": "deep-1", "x": "DEEP"},
        "properties": {
            "body_encoding": "base64",
            "delivery_tag": "deep-tag",
            "delivery_info": {"exchange": "", "routing_key": "q"},
        },
    }
).replace('"DEEP"', "[" * DEEP + "]" * DEEP)
TOO_DEEP = "not a message envelope: the queue item nests deeper than 64 levels"


@pytest.mark.timeout(180)
def test_an_item_nested_a_hundred_thousand_deep_is_dead_lettered_and_the_worker_goes_on(
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    store: RedisStore,
    key_prefix: str,
    message_dict: MessageFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The poison item pushed first, then ten messages: the worker stays up, the item is one
    rejected record and one dead letter (`dead-letters list` shows it; its first bytes, size
    and digest are kept), and every message is scored once."""
    worker = procfile_worker(start_worker, queue)
    worker.wait_ready()
    messages = distinct(message_dict, "after-deep", 10)
    client = redis.Redis.from_url(BROKER_URL)
    try:
        client.lpush(queue, DEEP_ITEM)
    finally:
        client.close()
    send_scores(publisher(), queue, messages)

    lines = worker.wait_for(len(messages) + 1, timeout=60)

    assert worker.alive()
    assert scored_cases(lines) == {m["case_id"] for m in messages}
    assert len([line for line in lines if line["event"] == SCORED]) == len(messages)
    assert [line["reason"] for line in lines if line["event"] == REJECTED] == [TOO_DEEP]
    check_first_outcomes(store, messages, lines)
    monkeypatch.setenv("EVIDENCE_STORE_URL", STORE_URL)
    monkeypatch.setenv("EVIDENCE_KEY_PREFIX", key_prefix)
    capsys.readouterr()
    assert main(["dead-letters", "list"]) == OK
    (listed,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (listed["reason"], listed["case_id"], listed["truncated"]) == (TOO_DEEP, None, True)
    (letter,) = store.dead_letters()
    # Too large to keep whole: its first EVIDENCE_DEAD_LETTER_MAX_BYTES, its size and digest.
    assert (letter.error, letter.body, letter.body_bytes, letter.body_sha256) == (
        TOO_DEEP,
        DEEP_ITEM[:DEAD_LETTER_MAX_BYTES],
        len(DEEP_ITEM),
        hashlib.sha256(DEEP_ITEM.encode()).hexdigest(),
    )
    assert queue_length(BROKER_URL, queue) == 0
    assert unacked_count(BROKER_URL, queue) == 0


def unacked_on(queue: str) -> int:
    """Messages of `queue` in kombu's unacked hash (read directly: a wrapped item carries no
    task id for the harness's helpers to read)."""
    client = redis.Redis.from_url(BROKER_URL)
    try:
        return sum(json.loads(value)[2] == queue for _, value in client.hscan_iter("unacked"))
    finally:
        client.close()


@pytest.mark.timeout(180)
def test_an_item_that_is_not_a_message_waits_out_a_store_outage_unacknowledged(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    queue: str,
    key_prefix: str,
) -> None:
    """Raw items consumed while the store is down stay unacknowledged in the broker, and are
    rejected and dead-lettered once it is back; the worker consumes throughout."""
    worker = procfile_worker(
        start_worker,
        queue,
        store_url=redis_server.url,
        env={
            "EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": "10",
            "EVIDENCE_STORE_RETRY_WINDOW_SECONDS": "3",
        },
    )
    worker.wait_ready()
    redis_server.kill()
    client = redis.Redis.from_url(BROKER_URL)
    try:
        client.lpush(queue, *JUNK_ITEMS)
    finally:
        client.close()
    worker.wait_for(len(JUNK_ITEMS), events=["evidence_coverage.store_unavailable"], timeout=60)
    assert queue_length(BROKER_URL, queue) == 0
    assert unacked_on(queue) == len(JUNK_ITEMS)
    assert worker.records() == []

    redis_server.start()
    rejected = worker.wait_for(len(JUNK_ITEMS), events=[REJECTED], timeout=90)

    assert worker.alive()
    assert sorted(line["reason"] for line in rejected) == sorted(JUNK.values())
    store = RedisStore.from_url(redis_server.url, prefix=key_prefix)
    try:
        assert sorted((letter.body, letter.error) for letter in store.dead_letters()) == sorted(
            (item.decode("utf-8", "replace"), reason) for item, reason in JUNK.items()
        )
    finally:
        store.close()
    assert unacked_on(queue) == 0


@pytest.mark.parametrize("guarded", [True, False])
def test_a_channel_closed_after_its_transport_leaves_its_messages_for_the_sweep(
    queue: str, guarded: bool
) -> None:
    """kombu's order when the consumer restarts after a lost broker: the transport is closed,
    then the channel, whose QoS asks the detached transport for a client to requeue what it
    holds, and an ack scheduled before runs after. kombu's own channel raises AttributeError
    in both, out of the event loop, and the worker exits; ours raises the connection error
    kombu and Celery handle, and the message stays in the unacked hash for the sweep."""
    with Connection(BROKER_URL) as connection:
        if guarded:
            guard_redis_transport(connection.transport)
        channel = connection.channel()
        producer = connection.Producer(channel)
        producer.publish(
            {"held": True}, routing_key=queue, declare=[Queue(queue)], headers={"id": "held"}
        )
        message = channel.basic_get(queue, no_ack=False)
        assert message is not None
        connection.transport.client = None  # what closing the transport does

        if guarded:
            with pytest.raises(redis.ConnectionError, match="the broker connection is closed"):
                channel.close()
            assert unacked_task_ids(BROKER_URL, queue) == ["held"]
            # An ack the event loop runs after the channel is gone: what Celery logs as
            # "Couldn't ack" and goes on.
            channel.connection = None
            with pytest.raises(redis.ConnectionError, match="the broker connection is closed"):
                message.ack()
        else:
            with pytest.raises(AttributeError, match="hostname"):
                channel.close()
            channel.connection = None
            with pytest.raises(AttributeError, match="client"):
                message.ack()
        assert unacked_task_ids(BROKER_URL, queue) == ["held"]
