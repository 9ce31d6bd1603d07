"""Broker safety nets, without a broker: the Redis connection options, the BRPOP guard that
turns a raw queue item into a message, and the heartbeat that is sent once."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kombu.transport import redis as kombu_redis

from worker.runtime.celery_app import celery_config
from worker.runtime.consumer import (
    NOT_AN_ENVELOPE,
    BoundedHeart,
    EvidenceConsumer,
    GuardedRedisChannel,
    foreign_item_problem,
    guard_brpop_reply,
    guard_redis_transport,
    item_limit,
    wrap_foreign_item,
)
from worker.settings import Settings


class StubChannel:
    """What the guard uses of kombu's Redis channel: its Message class and body codecs."""

    sep = kombu_redis.Channel.sep
    Message = kombu_redis.Channel.Message
    codecs = kombu_redis.Channel.codecs
    decode_body = kombu_redis.Channel.decode_body


def kombu_item(body: str = "[[], {}, {}]") -> bytes:
    """A queue item as kombu's Redis transport writes one."""
    return json.dumps(
        {
            "body": body,
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "headers": {"task": "evidence_coverage.score", "id": "t-1"},
            "properties": {
                "delivery_tag": "tag-1",
                "body_encoding": "utf-8",
                "delivery_info": {"exchange": "", "routing_key": "q"},
            },
        }
    ).encode()


def test_a_redis_broker_gets_socket_timeouts_keepalive_and_health_checks() -> None:
    """Every wait on a Redis broker is bounded by the configured timeout."""
    settings = Settings(broker_socket_timeout_seconds=7, broker_health_check_seconds=3)
    options = celery_config(settings)["broker_transport_options"]

    assert options["socket_timeout"] == 7
    assert options["socket_connect_timeout"] == 7
    assert options["socket_keepalive"] is True
    assert options["health_check_interval"] == 3


def test_an_amqp_broker_gets_no_redis_socket_options() -> None:
    """py-amqp has its own timeouts; Redis' option names are not passed to it."""
    options = celery_config(Settings(broker_url="amqp://guest:guest@rabbit.example//"))[
        "broker_transport_options"
    ]

    assert "socket_timeout" not in options
    assert "health_check_interval" not in options


def test_every_redis_option_is_one_kombu_s_channel_reads() -> None:
    """A misspelt option would be dropped by kombu without a word."""
    options = celery_config(Settings())["broker_transport_options"]
    redis_options = {"socket_timeout", "socket_connect_timeout", "socket_keepalive"}
    redis_options |= {"socket_keepalive_options", "health_check_interval"}

    assert redis_options <= set(options)
    assert redis_options <= set(kombu_redis.Channel.from_transport_options)


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        (b"not json", "the queue item is not JSON (Expecting value: line 1 column 1 (char 0))"),
        (b"[1, 2]", "kombu cannot read it as a message (TypeError: list indices must be"),
        (b'{"a":1}', "kombu cannot read it as a message (KeyError: 'properties')"),
        (b'{"properties": {}}', "kombu cannot read it as a message (KeyError: 'delivery_tag')"),
        (
            b'{"body": "%%%", "properties": {"delivery_tag": "t", "body_encoding": "rot13"}}',
            "kombu cannot read it as a message (AttributeError:",
        ),
    ],
    ids=["not-json", "json-list", "no-properties", "no-delivery-tag", "unknown-encoding"],
)
def test_a_queue_item_kombu_cannot_read_is_named_for_what_it_is(item: bytes, problem: str) -> None:
    """The reason says the item is no message envelope, and why kombu could not read it."""
    reason = foreign_item_problem(item, StubChannel())

    assert reason is not None
    assert reason.startswith("not a message envelope: ")
    assert problem in reason


def kombu_item_with(path: tuple[str, ...], value: Any) -> bytes:
    """kombu_item() with the field at `path` set to `value`."""
    envelope = json.loads(kombu_item())
    parent = envelope
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return json.dumps(envelope).encode()


KOMBU_JSON = "not a message envelope: the queue item is JSON but its"


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (
            kombu_item_with(("headers", "task"), ["evidence_coverage.score"]),
            f"{KOMBU_JSON} headers.task is a list, not text",
        ),
        (
            kombu_item_with(("headers", "id"), {"a": 1}),
            f"{KOMBU_JSON} headers.id is a dict, not text",
        ),
        (
            kombu_item_with(("headers",), [1]),
            "not a message envelope: the queue item is JSON but kombu cannot read it as a "
            "message (AttributeError: 'list' object has no attribute 'get')",
        ),
        (
            kombu_item_with(("headers", "retries"), True),
            f"{KOMBU_JSON} headers.retries is a bool, not a whole number",
        ),
        (
            kombu_item_with(("headers", "timelimit"), [1, 2, 3]),
            f"{KOMBU_JSON} headers.timelimit is a list, not [soft, hard] seconds",
        ),
        (
            kombu_item_with(("properties", "delivery_tag"), [1]),
            f"{KOMBU_JSON} properties.delivery_tag is a list, not text",
        ),
        (
            kombu_item_with(("properties", "delivery_info"), None),
            f"{KOMBU_JSON} properties.delivery_info is null, not an object",
        ),
        (
            kombu_item_with(("properties", "delivery_info"), {"exchange": ""}),
            f"{KOMBU_JSON} properties.delivery_info.routing_key is null, not text",
        ),
        (kombu_item_with(("content-type",), 7), f"{KOMBU_JSON} content-type is a int, not text"),
        (
            b"[" * 100_000 + b"]" * 100_000,
            "not a message envelope: the queue item nests deeper than 64 levels",
        ),
        (
            b"x" * 1_000_001,
            "not a message envelope: the queue item is 1000001 bytes, over the 1000000-byte limit",
        ),
        (12, "not a message envelope: the queue item is a int, not text"),
    ],
    ids=[
        "task-a-list",
        "id-an-object",
        "headers-a-list",
        "retries-a-bool",
        "timelimit-of-three",
        "tag-a-list",
        "no-delivery-info",
        "no-routing-key",
        "content-type-a-number",
        "nested-100000-deep",
        "over-the-size-limit",
        "not-bytes",
    ],
)
def test_an_item_kombu_or_celery_would_raise_on_is_named_exactly(item: Any, reason: str) -> None:
    """Each would raise in the event loop (kombu filing it as unacknowledged, Celery reading
    its headers, JSON decoding past the recursion limit) and stop the worker."""
    assert foreign_item_problem(item, StubChannel(), 1_000_000) == reason


def test_the_worker_s_guard_decodes_items_up_to_twice_its_largest_body() -> None:
    """The default limit, and a transport guarded with the worker's own settings'."""
    transport = FakeTransport(kombu_redis.Channel)

    guard_redis_transport(transport, item_limit(1_000, 50_000))

    assert GuardedRedisChannel.max_item_bytes == 2 * 33_554_432
    assert issubclass(transport.Channel, GuardedRedisChannel)
    assert transport.Channel.max_item_bytes == 100_000
    assert item_limit(1_000_000, 10) == 2 * (1_000_000 + 4_096)


def test_a_kombu_message_passes_the_guard_unchanged() -> None:
    """The BRPOP reply of a real message is returned as redis-py's callback returns it."""
    reply = [b"queue", kombu_item()]

    def redis_py(response: Any) -> Any:  # redis-py's own BRPOP callback (RESP2)
        return (response and tuple(response)) or None

    assert guard_brpop_reply(StubChannel(), redis_py, reply) == (b"queue", kombu_item())
    assert guard_brpop_reply(StubChannel(), redis_py, None) is None


def test_a_raw_item_becomes_a_message_that_carries_it_whole() -> None:
    """The wrapped item decodes to the raw bytes, names its problem and its queue, and has a
    delivery tag of its own so kombu can keep it unacknowledged."""
    raw = b"\x80 not json"
    sep = kombu_redis.Channel.sep
    list_name, wrapped = guard_brpop_reply(StubChannel(), None, [f"q1{sep}3".encode(), raw])
    payload = json.loads(wrapped)
    message = StubChannel.Message(payload, channel=StubChannel())

    assert list_name == f"q1{sep}3".encode()
    assert message.body == raw
    assert message.headers[NOT_AN_ENVELOPE].startswith("not a message envelope: ")
    assert payload["properties"]["delivery_info"] == {"exchange": "", "routing_key": "q1"}
    assert payload["properties"]["delivery_tag"]


def test_a_wrapped_item_is_base64_so_any_bytes_survive() -> None:
    payload = json.loads(wrap_foreign_item(bytes(range(256)), "junk", "q"))

    assert base64.b64decode(payload["body"]) == bytes(range(256))


class FakeTransport:
    def __init__(self, channel: Any) -> None:
        self.Channel = channel


def test_only_redis_transports_get_the_guarded_channel() -> None:
    """Redis (and Sentinel, a subclass) get the guard once; other transports are untouched."""
    redis_transport = FakeTransport(kombu_redis.Channel)
    sentinel_transport = FakeTransport(kombu_redis.SentinelChannel)
    other = FakeTransport(object)

    for transport in (redis_transport, sentinel_transport, other):
        guard_redis_transport(transport)
    guard_redis_transport(redis_transport)

    assert redis_transport.Channel is GuardedRedisChannel
    assert issubclass(sentinel_transport.Channel, GuardedRedisChannel)
    assert issubclass(sentinel_transport.Channel, kombu_redis.SentinelChannel)
    assert other.Channel is object


def test_the_consumer_sends_heartbeats_through_the_bounded_step() -> None:
    """Celery's heartbeat step is replaced, every other step kept in its place, and the
    heartbeat file's step added after them."""
    *celery_steps, heartbeat_file = EvidenceConsumer.Blueprint.default_steps

    assert "worker.runtime.consumer:BoundedHeartStep" in celery_steps
    assert not any(step.endswith(".heart:Heart") for step in celery_steps)
    assert len(celery_steps) == len(EvidenceConsumer.__mro__[1].Blueprint.default_steps)
    assert heartbeat_file == "worker.runtime.heartbeat:HeartbeatFileStep"


def test_a_heartbeat_is_sent_once_never_retried() -> None:
    """Celery's retry=True would have kombu resend for as long as the broker is silent."""
    sent: list[dict[str, Any]] = []

    class Eventer:
        enabled = True

        def __init__(self) -> None:
            self.on_enabled: set[Any] = set()
            self.on_disabled: set[Any] = set()

        def send(self, event: str, **fields: Any) -> None:
            sent.append({"event": event, **fields})

    class Timer:
        def call_repeatedly(self, *args: Any) -> None:
            return None

    heart = BoundedHeart(Timer(), Eventer(), interval=2)
    heart._send("worker-heartbeat", retry=True)

    assert [(s["event"], s["retry"]) for s in sent] == [("worker-heartbeat", False)]
