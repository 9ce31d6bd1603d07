"""A queue item that is no message is filed (as the message that stands in for it, and so in
kombu's unacked hash) as its dead letter keeps it, never whole: the guard's cut, and the
letter written from it, which is the letter the whole item would have had."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from kombu.transport import redis as kombu_redis

from tests.conftest import FIXED_NOW
from worker.pipeline.alert_delivery import AlertSink
from worker.pipeline.intake import CutBody
from worker.pipeline.scoring import Delivery
from worker.pipeline.service import Service
from worker.runtime.consumer import (
    NOT_AN_ENVELOPE,
    WHOLE_BYTES,
    WHOLE_SHA256,
    GuardedRedisChannel,
    cut_item,
    foreign_item_problem,
    guard_brpop_reply,
    guard_redis_transport,
    item_limit,
    whole_item_cut,
)
from worker.settings import DEAD_LETTER_MAX_BYTES, Settings
from worker.stores import DeadLetter
from worker.stores.redis.redis_store import RedisStore

ITEM_LIMIT = item_limit(1, 1)  # the smallest the settings allow: 8,194 bytes
OVERSIZE = "not a message envelope: the queue item is 9101 bytes, over the 8194-byte limit"
# 99 bytes, a two-byte é across the 100-byte bound, then enough to be over the item limit.
ITEM = ("a" * 99 + "é" + "b" * 9_000).encode()


class StubChannel:
    """What the guard uses of the worker's Redis channel: kombu's Message class and body
    codecs, and the item limit and dead-letter bound it was given."""

    sep = kombu_redis.Channel.sep
    Message = kombu_redis.Channel.Message
    codecs = kombu_redis.Channel.codecs
    decode_body = kombu_redis.Channel.decode_body

    def __init__(self, max_item_bytes: int = ITEM_LIMIT, keep_item_bytes: int = 100) -> None:
        self.max_item_bytes = max_item_bytes
        self.keep_item_bytes = keep_item_bytes


def wrapped(item: bytes, channel: StubChannel) -> tuple[str, Any]:
    """The guard's BRPOP reply for `item`: the wrapped text and the message kombu makes of it."""
    _, text = guard_brpop_reply(channel, None, [b"q", item])
    return text, StubChannel.Message(json.loads(text), channel=channel)


def test_an_oversize_item_is_wrapped_as_the_first_bytes_its_letter_keeps() -> None:
    """The message carries the item's first 99 bytes (é is not cut in half), the whole item's
    SHA-256 and size, and the reason; the wrapped text is within the item limit."""
    text, message = wrapped(ITEM, StubChannel())

    assert message.body == b"a" * 99
    assert message.headers == {
        NOT_AN_ENVELOPE: OVERSIZE,
        WHOLE_SHA256: hashlib.sha256(ITEM).hexdigest(),
        WHOLE_BYTES: 9_101,
    }
    assert len(text.encode()) <= ITEM_LIMIT


def test_the_cut_is_at_most_half_the_item_limit_so_a_restored_copy_is_decoded() -> None:
    """With a dead-letter bound over half the item limit the item is cut at 4,097 bytes, and
    the wrapped text, put back on the queue, passes the guard as a message."""
    text, message = wrapped(ITEM, StubChannel(keep_item_bytes=10_000))

    assert message.body == b"a" * 99 + "é".encode() + b"b" * 3_996
    assert foreign_item_problem(text.encode(), StubChannel(), ITEM_LIMIT) is None


def test_an_item_its_letter_keeps_whole_is_wrapped_whole_without_a_digest() -> None:
    """Under the dead-letter bound the message carries the item's bytes and the reason alone."""
    _, message = wrapped(b"\x80 not json", StubChannel())

    assert message.body == b"\x80 not json"
    assert list(message.headers) == [NOT_AN_ENVELOPE]
    assert whole_item_cut(message) is None


def test_the_consumer_reads_the_cut_back_from_the_message() -> None:
    """The kept text, digest and size the guard wrote are what the consumer dead-letters."""
    _, message = wrapped(ITEM, StubChannel())

    assert whole_item_cut(message) == CutBody("a" * 99, hashlib.sha256(ITEM).hexdigest(), 9_101)


@pytest.mark.parametrize(
    "headers",
    [
        {WHOLE_SHA256: "ab"},
        {WHOLE_BYTES: 10},
        {WHOLE_SHA256: ["ab"], WHOLE_BYTES: 10},
        {WHOLE_SHA256: "ab", WHOLE_BYTES: "10"},
        {WHOLE_SHA256: "ab", WHOLE_BYTES: True},
    ],
    ids=["no-size", "no-digest", "digest-a-list", "size-text", "size-a-bool"],
)
def test_a_message_without_both_whole_fields_is_dead_lettered_as_it_came(
    headers: dict[str, Any],
) -> None:
    """Anything but a text digest and a whole-number size (another publisher's headers, say)
    is no cut: the body is dead-lettered as it is."""
    message = StubChannel.Message(
        json.loads(guard_brpop_reply(StubChannel(), None, [b"q", b"junk"])[1]),
        channel=StubChannel(),
    )
    message.headers.update(headers)

    assert whole_item_cut(message) is None


@pytest.fixture
def service() -> Iterator[Service]:
    """A service on fakeredis with the default dead-letter bound and a fixed clock."""
    store = RedisStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="unit-cut")
    yield Service(
        settings=Settings(), policy=None, store=store, alerts=AlertSink(), clock=lambda: FIXED_NOW
    )
    store.close()


def letter_of(service: Service, body: object) -> DeadLetter:
    """The one dead letter the service stores for `body`, rejected as the consumer rejects."""
    service.reject([body], OVERSIZE, Delivery(task_id=None), identify=False)
    (letter,) = service.store.dead_letters()
    service.store.client.flushall()  # type: ignore[attr-defined]
    return letter


KEEP = DEAD_LETTER_MAX_BYTES


@pytest.mark.parametrize(
    "item",
    [
        b"x" * (KEEP + 1),
        b"a" * (KEEP - 1) + "é".encode() + b"b" * 10,
        b"\xff" * 40_000,  # invalid UTF-8: three bytes a character once replaced
        b"a" * (KEEP - 1) + b"\n\n" + b"b" * 10,  # the cut ends in a newline
        b"a" * 70_000 + b"\n\n",  # the whole item ends in newlines
        "a😀".encode() * 20_000,
    ],
    ids=["ascii", "char-across-the-bound", "invalid-utf8", "newline-at-cut", "newline-at-end",
         "emoji"],
)  # fmt: skip
def test_the_letter_from_the_cut_is_the_letter_of_the_whole_item(
    service: Service, item: bytes
) -> None:
    """Dead-lettering the guard's cut (as after a restore) stores exactly what dead-lettering
    the whole item stores: the kept text, the whole digest and size, truncated."""
    cut = cut_item(item, KEEP)

    assert cut is not None
    from_cut = letter_of(service, cut)
    assert from_cut == letter_of(service, item)
    assert from_cut.truncated is True


def test_an_item_within_the_bound_is_not_cut() -> None:
    """Its letter keeps it whole, so there is nothing to cut."""
    assert cut_item(b"x" * KEEP, KEEP) is None


def test_the_worker_s_guard_cuts_at_its_dead_letter_bound() -> None:
    """The default bound is EVIDENCE_DEAD_LETTER_MAX_BYTES's default; the worker's consumer
    gives its transport its own settings' bound."""

    class Transport:
        Channel: Any = kombu_redis.Channel

    transport = Transport()
    guard_redis_transport(transport, 100_000, 4_096)

    assert GuardedRedisChannel.keep_item_bytes == DEAD_LETTER_MAX_BYTES
    assert (transport.Channel.max_item_bytes, transport.Channel.keep_item_bytes) == (
        100_000,
        4_096,
    )
