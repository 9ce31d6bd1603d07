"""Dead letters keep a bounded prefix of a body with the whole body's SHA-256 and size, so a
huge poison message cannot sit whole in Redis; letters stored before that still read."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import cast

import fakeredis
import pytest

from tests.conftest import FIXED_NOW
from worker.pipeline.alert_delivery import AlertSink
from worker.pipeline.scoring import Delivery
from worker.pipeline.service import Service
from worker.settings import DEAD_LETTER_MAX_BYTES, Settings
from worker.stores import DeadLetter
from worker.stores.redis.keys import dead_letters_key
from worker.stores.redis.redis_store import RedisStore

PREFIX = "unit-dead"
HUNDRED_MB = 100 * 1024 * 1024


def letter(body: str) -> DeadLetter:
    return DeadLetter(received_at=FIXED_NOW, error="schema: bogus", body=body, task_id="task-1")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize(
    ("body", "max_bytes", "kept", "size", "truncated"),
    [
        ("abc", 10, "abc", 3, False),
        ("abcdefghij", 10, "abcdefghij", 10, False),  # exactly the bound: whole
        ("abcdefghijk", 10, "abcdefghij", 11, True),
        ("aaaaaaaaaé", 10, "aaaaaaaaa", 11, True),  # é is 2 bytes: not cut in half
        ("aaaaaaaa€", 10, "aaaaaaaa", 11, True),  # € is 3 bytes
        ("aaaaaaaa€", 11, "aaaaaaaa€", 11, False),
        ("a😀b", 4, "a", 6, True),  # 😀 is 4 bytes: bytes 1-4, cut after byte 4
        ("a😀b", 5, "a😀", 6, True),
        ("😀", 3, "", 4, True),  # not even one character fits
        ("", 10, "", 0, False),
    ],
)
def test_bounded_keeps_whole_characters_up_to_the_bound_with_the_whole_bodys_digest(
    body: str, max_bytes: int, kept: str, size: int, truncated: bool
) -> None:
    """The kept text is the longest prefix of whole characters within max_bytes UTF-8 bytes;
    the digest and size are the whole body's."""
    bounded = letter(body).bounded(max_bytes)

    assert (bounded.body, bounded.body_bytes, bounded.truncated) == (kept, size, truncated)
    assert bounded.body_sha256 == sha256(body)
    assert len(bounded.body.encode("utf-8")) <= max_bytes
    assert (bounded.error, bounded.task_id, bounded.received_at) == (
        "schema: bogus",
        "task-1",
        FIXED_NOW,
    )


def test_bounding_twice_keeps_the_digest_of_the_body_as_received() -> None:
    """A letter cut once and bounded again still names the original body."""
    once = letter("x" * 100).bounded(10)

    assert once.bounded(5) == once.model_copy(update={"body": "xxxxx"})
    assert once.bounded(10) is once


def test_a_letter_stored_the_old_way_reads_with_no_digest_and_not_truncated() -> None:
    """JSON written before body_sha256, body_bytes and truncated existed still parses."""
    old = json.dumps(
        {
            "received_at": "2026-12-01T12:00:00Z",
            "error": "schema: bogus",
            "body": '{"case_id": "junk"}',
            "task_id": None,
        }
    )

    assert DeadLetter.model_validate_json(old) == DeadLetter(
        received_at=FIXED_NOW,
        error="schema: bogus",
        body='{"case_id": "junk"}',
        body_sha256=None,
        body_bytes=None,
        truncated=False,
    )


@pytest.fixture
def service() -> Iterator[Service]:
    """A service on fakeredis with the default dead-letter bound."""
    store = RedisStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix=PREFIX)
    yield Service(
        settings=Settings(), policy=None, store=store, alerts=AlertSink(), clock=lambda: FIXED_NOW
    )
    store.close()


def stored_letter_sizes(service: Service) -> list[int]:
    """The size in bytes of each dead-letter stream entry's JSON, as Redis holds it."""
    store = service.store
    assert isinstance(store, RedisStore)
    entries = cast(
        "list[tuple[bytes, dict[bytes, bytes]]]", store.client.xrange(dead_letters_key(PREFIX))
    )
    return [len(fields[b"letter"]) for _, fields in entries]


def test_a_100_mb_poison_body_rejected_by_the_service_keeps_64_kib_in_redis(
    service: Service,
) -> None:
    """Service.handle rejects an oversize body; Redis keeps its first 64 KiB, digest, size."""
    body = b'{"case_id": "huge", "answer": "' + b"a" * HUNDRED_MB + b'"}'

    (result,) = service.handle([(body, Delivery(task_id="task-huge"))])

    assert result.record.reason == (
        f"message is {len(body)} bytes, over the {Settings().max_message_bytes}-byte limit"
    )
    (stored,) = service.store.dead_letters()
    assert (stored.body_bytes, stored.truncated, stored.task_id) == (len(body), True, "task-huge")
    assert stored.body_sha256 == hashlib.sha256(body).hexdigest()
    assert stored.body == body[:DEAD_LETTER_MAX_BYTES].decode()
    (size,) = stored_letter_sizes(service)
    assert DEAD_LETTER_MAX_BYTES < size < DEAD_LETTER_MAX_BYTES + 1024


def test_a_100_mb_transport_body_rejected_without_scoring_keeps_64_kib_in_redis(
    service: Service,
) -> None:
    """Service.reject (an oversize task envelope): the same bound, digest and size."""
    body = "b" * HUNDRED_MB

    service.reject([body], "task body over the limit", Delivery(task_id="t"), identify=False)

    (stored,) = service.store.dead_letters()
    assert (stored.body, stored.body_bytes, stored.truncated) == (
        "b" * DEAD_LETTER_MAX_BYTES,
        HUNDRED_MB,
        True,
    )
    assert stored.body_sha256 == sha256(body)
    (size,) = stored_letter_sizes(service)
    assert DEAD_LETTER_MAX_BYTES < size < DEAD_LETTER_MAX_BYTES + 1024
