"""worker/runtime/kombu_qos.py against kombu's Redis QoS: each queue item of a table is
delivered through kombu's Redis transport (on fakeredis: kombu's channel, QoS and restore
code run whole) once with kombu's QoS and once with UnackedJsonQoS, and what each leaves in
Redis must read back the same, and each requeue, sweep and close put back the same bytes."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import fakeredis
import pytest
from kombu import Connection
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_utils_json

from tests.unit.seams.test_kombu_json import same
from worker.runtime import kombu_qos
from worker.runtime.consumer import GuardedRedisChannel
from worker.runtime.kombu_qos import UnackedJsonQoS

CHECKED_AGAINST = kombu_qos.CHECKED_AGAINST

QUEUE = "evidence"
TAG = "5d1f6c9e-0000-4000-8000-000000000001"
DELIVERED_AT = 1_796_000_000.25
VISIBILITY_TIMEOUT = 3600
TEXT = '{"case_id": "c-1", "answer": "café \\u00e9 \\"q\\" \\\\ back"}'
BATCH_BODY = kombu_utils_json.dumps([[TEXT, TEXT], {}, {"callbacks": None, "chain": None}])


def item(
    *,
    body: str = BATCH_BODY,
    body_encoding: str = "utf-8",
    priority: int = 0,
    exchange: str = "",
    **headers: Any,
) -> str:
    """A queue item as kombu's Redis transport writes one (kombu's dumps of the envelope)."""
    return str(
        kombu_utils_json.dumps(
            {
                "body": body,
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": {
                    "lang": "py",
                    "task": "evidence_coverage.score_batch",
                    "id": "task-1",
                    "retries": 0,
                    "timelimit": [None, None],
                    "root_id": "task-1",
                    "origin": "gen1@host",
                    **headers,
                },
                "properties": {
                    "correlation_id": "task-1",
                    "delivery_mode": 2,
                    "delivery_info": {"exchange": exchange, "routing_key": QUEUE},
                    "priority": priority,
                    "body_encoding": body_encoding,
                    "delivery_tag": TAG,
                },
            }
        )
    )


ITEMS = {
    "plain": item(),
    "no-headers": item(eta=None, expires=None),
    "base64-body": item(
        body=base64.b64encode(BATCH_BODY.encode()).decode(), body_encoding="base64"
    ),
    "large-body": item(body=kombu_utils_json.dumps([["x" * 250_000], {}, {}])),
    "non-ascii": item(origin="gen1@höst", argsrepr="('é ✓ 😀',)"),
    "control-characters": item(argsrepr='"\n\t\x00\\/'),
    "float": item(expires=1.5e-05, soft=0.1),
    "float-edges": item(stamps=[-0.0, 5e-324, 1.7976931348623157e308]),
    "nan": item(expires=float("nan")),
    "infinities": item(expires=float("inf"), soft=float("-inf")),
    "int-64": item(retries=2**63 - 1),
    "uint-64": item(retries=2**64 - 1),
    "huge-int": item(retries=2**70),
    "negative-huge-int": item(retries=-(2**63) - 1),
    "lone-surrogate": item(origin="\ud800"),
    "lone-surrogate-key": item(stamps={"\udc80": 1}),
    "datetime": item(eta=datetime(2026, 12, 7, 12, 0, tzinfo=UTC)),
    "datetime-naive": item(eta=datetime(2026, 12, 7, 12, 0)),
    "date-time-uuid-decimal": item(
        day=date(2026, 12, 7), at=time(12, 30), root_id=uuid.UUID(int=7), weight=Decimal("0.1")
    ),
    "bytes": item(raw=b"text", other=b"\xff\x00"),
    "type-key-as-data": item(meta={"__type__": "x"}),
    "nesting": item(stamps=[[[[[[[[[[{"deep": [1, 2.5, None, True]}]]]]]]]]]]),
    "priority": item(priority=5),
}


def fake_connection_class(server: fakeredis.FakeServer) -> type[Any]:
    """redis-py's connection class, for kombu's pool, on one fakeredis server."""

    class FakeServerConnection(fakeredis.FakeRedisConnection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, server=server, **kwargs)

    return FakeServerConnection


Delivered = tuple[Connection, Any, Any, Any]  # (connection, channel, message, client)
# A fresh, empty Redis for one delivery: its URL and the channel class attributes that reach it.
FreshRedis = Callable[[], tuple[str, dict[str, Any]]]


@pytest.fixture
def fresh_redis() -> FreshRedis:
    """A new fakeredis server for each delivery (tests/integration/test_kombu_qos_contract.py
    runs the same tests on a real Redis)."""

    def fresh() -> tuple[str, dict[str, Any]]:
        return "redis://127.0.0.1:6379/0", {
            "connection_class": fake_connection_class(fakeredis.FakeServer())
        }

    return fresh


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Set the clock both QoS classes stamp the unacked index with."""

    def at(now: float) -> None:
        monkeypatch.setattr(kombu_redis, "time", lambda: now)
        monkeypatch.setattr(kombu_qos, "time", lambda: now)

    at(DELIVERED_AT)
    return at


@pytest.fixture
def deliver(
    frozen: Callable[[float], None], fresh_redis: FreshRedis
) -> Iterator[Callable[[type[Any], str], Delivered]]:
    """Push a queue item onto a fresh Redis and take it with basic_get (kombu's QoS.append or
    the fast one files the copy), through kombu's Redis transport with the given QoS."""
    opened: list[Connection] = []

    def delivered(qos: type[Any], queue_item: str) -> Delivered:
        url, reach = fresh_redis()
        connection = Connection(url, transport_options={"visibility_timeout": VISIBILITY_TIMEOUT})
        opened.append(connection)
        connection.transport.Channel = type(
            "ContractChannel", (kombu_redis.Channel,), {"QoS": qos, **reach}
        )
        channel = connection.channel()
        client = channel.client
        pri = channel._get_message_priority(kombu_utils_json.loads(queue_item), reverse=False)
        client.lpush(channel._q_for_pri(QUEUE, pri), queue_item)
        message = channel.basic_get(QUEUE, no_ack=False)
        assert message is not None
        return connection, channel, message, client

    yield delivered
    for connection in opened:
        connection.release()


def unacked(client: Any) -> tuple[Any, Any]:
    """The unacked hash, each copy as kombu's loads reads it, and the index with its scores."""
    copies = {tag: kombu_utils_json.loads(copy) for tag, copy in client.hgetall("unacked").items()}
    return copies, client.zrange("unacked_index", 0, -1, withscores=True)


def queued(client: Any) -> dict[bytes, list[bytes]]:
    """Every queue list's items, as bytes."""
    return {key: client.lrange(key, 0, -1) for key in sorted(client.keys(f"{QUEUE}*"))}


def requeue(channel: Any, message: Any, at: Callable[[float], None]) -> None:
    message.reject(requeue=True)


def sweep(channel: Any, message: Any, at: Callable[[float], None]) -> None:
    at(DELIVERED_AT + VISIBILITY_TIMEOUT + 1)
    channel.qos.restore_visible(num=10)


def close(channel: Any, message: Any, at: Callable[[float], None]) -> None:
    channel.close()


ENDINGS = {"requeue": requeue, "visibility sweep": sweep, "channel close": close}


@pytest.mark.parametrize("name", list(ITEMS))
def test_the_unacked_copy_reads_back_as_kombu_s_own(
    name: str, deliver: Callable[[type[Any], str], Delivered]
) -> None:
    """The unacked hash and its index after a delivery: the same tags, scores and copies as
    kombu's loads reads them (kombu's spelling and the fast one differ in bytes only)."""
    *_, kombu_client = deliver(kombu_redis.QoS, ITEMS[name])
    *_, fast_client = deliver(UnackedJsonQoS, ITEMS[name])

    kombu_copies, kombu_index = unacked(kombu_client)
    fast_copies, fast_index = unacked(fast_client)
    assert kombu_index == [(TAG.encode(), DELIVERED_AT)]
    assert fast_index == kombu_index
    assert list(kombu_copies) == [TAG.encode()]
    assert same(fast_copies, kombu_copies)


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("name", list(ITEMS))
def test_a_restored_message_is_the_same_bytes(
    name: str,
    ending: str,
    deliver: Callable[[type[Any], str], Delivered],
    frozen: Callable[[float], None],
) -> None:
    """A requeue, the visibility sweep and a channel's close put back, byte for byte, what
    they put back with kombu's own copy, and leave the unacked hash and index empty."""
    restored = []
    for qos in (kombu_redis.QoS, UnackedJsonQoS):
        frozen(DELIVERED_AT)
        _, channel, message, client = deliver(qos, ITEMS[name])
        ENDINGS[ending](channel, message, frozen)
        assert (client.hlen("unacked"), client.zcard("unacked_index")) == (0, 0)
        restored.append(queued(client))

    kombu_restored, fast_restored = restored
    assert sum(len(items) for items in kombu_restored.values()) == 1
    assert fast_restored == kombu_restored


def test_the_worker_s_redis_channel_files_its_copies_with_the_fast_qos() -> None:
    """The consumer's channel (GuardedRedisChannel) uses UnackedJsonQoS."""
    assert GuardedRedisChannel.QoS is UnackedJsonQoS
