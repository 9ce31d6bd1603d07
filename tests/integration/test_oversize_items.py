"""An oversize queue item on a real Redis broker with a real worker: it is dead-lettered, and
kombu's unacked hash never holds it whole, only what its dead letter keeps, even when the
worker is killed before the letter is written.

Every value written into the unacked hash is read off Redis's MONITOR (the transaction kombu
files a copy in is shown command by command), so "never" covers the whole run, not samples.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import hashlib
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
import redis

from contracts.record_models import REJECTED
from tests.integration import worker_harness as harness
from tests.integration.fault_helpers import wait_for_value
from tests.integration.worker_harness import (
    BROKER_URL,
    RedisServer,
    Worker,
    queue_length,
)
from worker.runtime.consumer import NOT_AN_ENVELOPE, WHOLE_BYTES, WHOLE_SHA256, item_limit
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker
store = harness.store
redis_server = harness.redis_server

MAX_MESSAGE_BYTES = 4_000
MAX_BATCH_BYTES = 8_000
KEEP_BYTES = 2_048
LIMITS = {
    "EVIDENCE_MAX_MESSAGE_BYTES": str(MAX_MESSAGE_BYTES),
    "EVIDENCE_MAX_BATCH_BYTES": str(MAX_BATCH_BYTES),
    "EVIDENCE_DEAD_LETTER_MAX_BYTES": str(KEEP_BYTES),
}
ITEM_LIMIT = item_limit(MAX_MESSAGE_BYTES, MAX_BATCH_BYTES)  # 16,192 bytes
# About 1 MB, two-byte characters from byte 31 on: the 2,048-byte cut falls inside one.
ITEM = ('{"case_id": "huge", "answer": "' + "é" * 500_000 + '"}').encode()
KEPT = ITEM[:KEEP_BYTES].decode("utf-8", "ignore").encode()  # whole characters only: 2,047 bytes
OVERSIZE = f"not a message envelope: the queue item is {len(ITEM)} bytes, over the 16192-byte limit"
BROKER_DB = int(BROKER_URL.rsplit("/", 1)[1])
# One MONITOR line: "+<time> [<db> <client>] "<arg>" "<arg>" ...", each argument quoted with
# Redis's escapes (\\, \", \n, \r, \t, \a, \b, \xHH), which a Python bytes literal reads.
MONITOR_LINE = re.compile(rb"^\+[\d.]+ \[(\d+) [^\]]*\] (.*)$")
ARGUMENT = re.compile(rb'"((?:[^"\\]|\\.)*)"')


class UnackedWrites:
    """Every value an HSET writes into kombu's unacked hash on the broker's DB, as MONITOR
    shows it, from start until close()."""

    def __init__(self, broker_url: str) -> None:
        options = redis.Redis.from_url(broker_url).connection_pool.connection_kwargs
        self.sock = socket.create_connection((options["host"], options["port"]), timeout=10)
        self.sock.sendall(b"MONITOR\r\n")
        self.reader = self.sock.makefile("rb")
        assert self.reader.readline() == b"+OK\r\n"
        self.sock.settimeout(None)  # the reader waits until close() shuts the socket down
        self.values: list[bytes] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self.reader:
                if b'"unacked"' not in line[:200]:
                    continue  # the only key of interest, named in the first arguments
                match = MONITOR_LINE.match(line.rstrip(b"\r\n"))
                if match is None or int(match[1]) != BROKER_DB:
                    continue
                arguments = [
                    ast.literal_eval('b"' + raw.decode("ascii") + '"')
                    for raw in ARGUMENT.findall(match[2])
                ]
                if arguments[0].upper() == b"HSET" and arguments[1] == b"unacked":
                    self.values.extend(arguments[3::2])

    def close(self) -> list[bytes]:
        """Stop reading; every value written, in order."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(10)
        self.reader.close()
        self.sock.close()
        return self.values


@pytest.fixture
def unacked_writes() -> Iterator[Callable[[], UnackedWrites]]:
    """Factory: MONITOR the broker for writes into the unacked hash; closed at teardown."""
    opened: list[UnackedWrites] = []

    def start() -> UnackedWrites:
        opened.append(UnackedWrites(BROKER_URL))
        return opened[-1]

    yield start
    for writes in opened:
        writes.close()


def push(item: bytes, queue: str) -> None:
    """Put a raw item on the queue's list, as a program other than kombu would."""
    client = redis.Redis.from_url(BROKER_URL)
    try:
        client.lpush(queue, item)
    finally:
        client.close()


def check_copy(value: bytes, queue: str) -> None:
    """A copy in the unacked hash: within the item limit, and the item's cut, not the item."""
    assert len(value) <= ITEM_LIMIT, len(value)
    message, exchange, routing_key = json.loads(value)
    assert (exchange, routing_key) == ("", queue)
    assert base64.b64decode(message["body"]) == KEPT
    assert {
        key: message["headers"][key] for key in (NOT_AN_ENVELOPE, WHOLE_SHA256, WHOLE_BYTES)
    } == {
        NOT_AN_ENVELOPE: OVERSIZE,
        WHOLE_SHA256: hashlib.sha256(ITEM).hexdigest(),
        WHOLE_BYTES: len(ITEM),
    }


def check_letter(store: RedisStore) -> None:
    """The one dead letter: the item's first whole characters within 2,048 bytes, with the
    whole item's SHA-256 and size, under the oversize reason."""
    (letter,) = store.dead_letters()
    assert (
        letter.error,
        letter.body.encode(),
        letter.body_sha256,
        letter.body_bytes,
        letter.truncated,
        letter.task_id,
    ) == (OVERSIZE, KEPT, hashlib.sha256(ITEM).hexdigest(), len(ITEM), True, None)


def unacked_of(queue: str) -> list[bytes]:
    """The copies of `queue`'s messages in the unacked hash now."""
    client = redis.Redis.from_url(BROKER_URL)
    try:
        return [
            bytes(value)
            for _, value in client.hscan_iter("unacked")
            if json.loads(value)[2] == queue
        ]
    finally:
        client.close()


@pytest.mark.timeout(120)
def test_an_oversize_item_is_dead_lettered_without_ever_being_copied_whole(
    start_worker: Callable[..., Worker],
    queue: str,
    store: RedisStore,
    unacked_writes: Callable[[], UnackedWrites],
) -> None:
    """A 1 MB item on a worker whose item limit is 16,192 bytes: one rejected record, one
    dead letter of its first 2,047 bytes, and the one copy kombu filed is that cut."""
    worker = start_worker(queue, env=LIMITS)
    worker.wait_ready()
    writes = unacked_writes()

    push(ITEM, queue)
    (record,) = worker.wait_for(1, events=[REJECTED], timeout=60)
    wait_for_value(lambda: len(unacked_of(queue)), 0, timeout=30)
    values = writes.close()

    assert record["reason"] == OVERSIZE
    assert len(values) == 1
    check_copy(values[0], queue)
    check_letter(store)
    assert queue_length(BROKER_URL, queue) == 0
    assert worker.alive()


@pytest.mark.timeout(180)
def test_an_oversize_item_outlives_a_worker_killed_before_its_dead_letter(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    queue: str,
    key_prefix: str,
    unacked_writes: Callable[[], UnackedWrites],
) -> None:
    """Store down, the item taken and held unacknowledged as its cut, the worker killed; a new
    worker with the store back restores the cut after the visibility timeout and writes the
    letter the whole item would have had. No copy written in the run was over the limit."""
    env = {
        **LIMITS,
        "EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": "10",
        "EVIDENCE_STORE_RETRY_WINDOW_SECONDS": "3",
    }
    first = start_worker(queue, store_url=redis_server.url, env=env)
    first.wait_ready()
    writes = unacked_writes()
    redis_server.kill()

    push(ITEM, queue)
    first.wait_for(1, events=["evidence_coverage.store_unavailable"], timeout=60)
    (held,) = unacked_of(queue)
    check_copy(held, queue)
    first.kill()
    assert first.records() == []

    redis_server.start()
    second = start_worker(queue, store_url=redis_server.url, env=env)
    (record,) = second.wait_for(1, events=[REJECTED], timeout=90)
    wait_for_value(lambda: len(unacked_of(queue)), 0, timeout=30)
    values = writes.close()

    assert record["reason"] == OVERSIZE
    # Filed by the first worker, then by the second from the restored copy.
    assert len(values) == 2
    for value in values:
        check_copy(value, queue)
    reader = RedisStore.from_url(redis_server.url, prefix=key_prefix)
    try:
        check_letter(reader)
    finally:
        reader.close()
    assert queue_length(BROKER_URL, queue) == 0
