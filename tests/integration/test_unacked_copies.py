"""The unacknowledged copy the worker's Redis channel keeps of each delivered message (spelled
by orjson, worker/runtime/kombu_qos.py) brings the message back whole when it is
requeued, as kombu's own copy does: the at-least-once promise rests on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis
from kombu import Connection, Queue

from tests.integration import worker_harness as harness
from tests.integration.worker_harness import BROKER_URL, unacked_task_ids
from worker.runtime.consumer import guard_redis_transport

pytestmark = pytest.mark.integration

queue = harness.queue

TEXT = json.dumps({"case_id": "c-1", "answer": 'café \u00e9 "quoted" \\ back'})


@pytest.fixture
def connection() -> Iterator[Connection]:
    with Connection(BROKER_URL) as opened:
        guard_redis_transport(opened.transport)
        yield opened


@pytest.mark.parametrize("eta", [None, datetime(2026, 12, 7, 12, 0, tzinfo=UTC)])
def test_a_requeued_message_comes_back_whole(
    connection: Connection, queue: str, eta: datetime | None
) -> None:
    """A batch body and headers (one a datetime, which only kombu's dumps keeps as one) are
    held in the unacked hash while the message is out, and come back equal on requeue."""
    channel = connection.channel()
    producer = connection.Producer(channel)
    headers: dict[str, object] = {
        "id": "task-1",
        "task": "evidence_coverage.score_batch",
        "origin": "höst",
    }
    if eta is not None:
        headers["eta"] = eta
    producer.publish(
        [[[TEXT, TEXT]], {}, {}],
        routing_key=queue,
        declare=[Queue(queue)],
        headers=headers,
        serializer="json",
    )

    taken = channel.basic_get(queue, no_ack=False)
    assert taken is not None
    assert unacked_task_ids(BROKER_URL, queue) == ["task-1"]
    kept = redis.Redis.from_url(BROKER_URL).hget("unacked", taken.delivery_tag)
    assert isinstance(kept, bytes)
    # orjson's spelling (UTF-8 as is) where it reads back the same; kombu's (\\u escapes) for
    # a datetime
    assert ("höst".encode() in kept) is (eta is None)
    taken.reject(requeue=True)

    again = channel.basic_get(queue, no_ack=False)
    assert again is not None
    assert again.body == taken.body
    # kombu marks a requeued message redelivered; nothing else differs
    assert again.headers == {**taken.headers, "redelivered": True}
    assert again.headers.get("eta") == eta
    assert again.decode() == [[[TEXT, TEXT]], {}, {}]
    again.ack()
    assert unacked_task_ids(BROKER_URL, queue) == []
