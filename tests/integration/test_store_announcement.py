"""One queue, one store, with real workers: a worker whose store is not the one its queue's
workers announced on the broker (Redis or RabbitMQ) exits 2 with one line naming both stores,
no password in it; workers on one store all start; a new store may start once the last
worker of the old one has stopped and its announcement has expired."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from kombu import Connection

from tests.integration import worker_harness as harness
from tests.integration.worker_harness import (
    AMQP_URL,
    BROKER_URL,
    REDIS_PORT,
    RedisServer,
    Worker,
    free_port,
)
from worker.runtime.announcement import announcement_name, refusal

pytestmark = pytest.mark.integration
# The machine's RabbitMQ, one module at a time across processes (worker_harness.rabbitmq_turn).
rabbitmq_turn = harness.rabbitmq_turn

start_worker = harness.start_worker
queue = harness.queue
amqp_queue = harness.amqp_queue

TTL_SECONDS = 3  # short, so that expiry is seen within a test
ANNOUNCEMENT_READS = 40  # 2 s of reads: a claim is out of the queue for milliseconds at a time
ENV = {"EVIDENCE_STORE_ANNOUNCEMENT_TTL_SECONDS": str(TTL_SECONDS)}
EXIT_TIMEOUT_SECONDS = 90.0
PASSWORD = "s3cret-in-the-url"
STORE_A = f"redis://127.0.0.1:{REDIS_PORT}/14"
HOST = socket.gethostname()


def identity(port: int, db: int, key_prefix: str) -> str:
    return f"redis://localhost:{port}/{db} on {HOST} (key prefix {key_prefix})"


@pytest.fixture
def guarded_store(tmp_path: Path) -> Iterator[str]:
    """A second Redis store that wants a password: its URL carries one."""
    server = RedisServer(port=free_port(), directory=tmp_path)
    server.start()
    client = redis.Redis(port=server.port)
    client.config_set("requirepass", PASSWORD)
    client.close()
    yield f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    server.kill()


@pytest.fixture
def redis_announcements() -> Iterator[Callable[[str], str | None]]:
    """Read a queue's announcement on the Redis broker; every one read is deleted afterwards."""
    client = redis.Redis.from_url(BROKER_URL, decode_responses=True)
    read: list[str] = []

    def announced(queue: str) -> str | None:
        read.append(announcement_name(queue))
        value = client.get(announcement_name(queue))
        return None if value is None else str(value)

    yield announced
    if read:
        client.delete(*read)
    client.close()


@pytest.fixture
def amqp_announcement(amqp_queue: str) -> Iterator[str]:
    """The RabbitMQ queue that holds `amqp_queue`'s announcement; deleted afterwards."""
    name = announcement_name(amqp_queue)
    yield name
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        connection.default_channel.queue_delete(name)


def exited(worker: Worker) -> int:
    """The exit code of a worker that is expected to stop on its own."""
    try:
        return worker.process.wait(EXIT_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not exit\n{worker}")


def problem_lines(worker: Worker) -> list[str]:
    stderr = worker.stderr_path.read_text("utf-8", "replace")
    return [line for line in stderr.splitlines() if line.startswith("evidence-worker:")]


def never_ready(worker: Worker) -> bool:
    return not any(str(line.get("event", "")).endswith(" ready.") for line in worker.lines())


def wait_gone(announced: Callable[[], object], timeout: float) -> float:
    """Seconds until `announced()` is falsy; fails at `timeout`."""
    started = time.monotonic()
    while announced():
        if time.monotonic() - started > timeout:
            pytest.fail(f"the announcement outlived its workers by {timeout:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - started


def test_redis_a_worker_on_another_store_exits_2_with_one_line(
    start_worker: Callable[..., Worker],
    queue: str,
    key_prefix: str,
    guarded_store: str,
    redis_announcements: Callable[[str], str | None],
) -> None:
    """The line names both stores, without the password, and what to do; the worker never
    reports ready, and the first worker goes on."""
    first = start_worker(queue, store_url=STORE_A, pool="solo", env=ENV)
    first.wait_ready()
    port = int(guarded_store.rsplit(":", 1)[1].split("/", maxsplit=1)[0])

    second = start_worker(queue, store_url=guarded_store, pool="solo", env=ENV)

    assert exited(second) == 2, str(second)
    theirs, mine = identity(REDIS_PORT, 14, key_prefix), identity(port, 0, key_prefix)
    assert problem_lines(second) == [
        "evidence-worker: configuration error: "
        + refusal(queue, theirs, mine, ttl_seconds=TTL_SECONDS)
    ]
    assert problem_lines(second)[0] == (
        f"evidence-worker: configuration error: workers on queue {queue} write to store "
        f"redis://localhost:{REDIS_PORT}/14 on {HOST} (key prefix {key_prefix}), but this worker's "
        f"store is redis://localhost:{port}/0 on {HOST} (key prefix {key_prefix}): give every "
        "worker on a queue the same EVIDENCE_STORE_URL and EVIDENCE_KEY_PREFIX, or this one "
        "another queue; once the other workers have stopped, their announcement expires "
        "within 3 s (EVIDENCE_STORE_ANNOUNCEMENT_TTL_SECONDS)"
    )
    assert PASSWORD not in second.output() + first.output()
    assert never_ready(second)
    assert "Traceback" not in second.output()
    assert first.alive()
    assert redis_announcements(queue) == theirs


def test_redis_workers_on_one_store_all_start(
    start_worker: Callable[..., Worker],
    queue: str,
    key_prefix: str,
    redis_announcements: Callable[[str], str | None],
) -> None:
    """The same store written two ways (127.0.0.1 and localhost) is one store."""
    first = start_worker(queue, store_url=STORE_A, pool="solo", env=ENV)
    second = start_worker(
        queue, store_url=f"redis://localhost:{REDIS_PORT}/14", pool="solo", env=ENV
    )

    first.wait_ready()
    second.wait_ready()
    time.sleep(TTL_SECONDS * 2)  # renewals of one claim by both: neither complains

    assert first.alive()
    assert second.alive()
    assert redis_announcements(queue) == identity(REDIS_PORT, 14, key_prefix)
    assert first.events("evidence_coverage.store_conflict") == []
    assert second.events("evidence_coverage.store_conflict") == []


def test_redis_a_new_store_starts_once_the_old_ones_announcement_expired(
    start_worker: Callable[..., Worker],
    queue: str,
    redis_announcements: Callable[[str], str | None],
) -> None:
    first = start_worker(queue, store_url=STORE_A, pool="solo", env=ENV)
    first.wait_ready()
    time.sleep(TTL_SECONDS)  # renewed meanwhile: still there a TTL after it was first set
    assert redis_announcements(queue) is not None

    first.stop()
    waited = wait_gone(lambda: redis_announcements(queue), timeout=TTL_SECONDS + 2)
    second = start_worker(
        queue, store_url=f"redis://127.0.0.1:{REDIS_PORT}/13", pool="solo", env=ENV
    )

    second.wait_ready()
    assert waited <= TTL_SECONDS + 0.5
    assert redis_announcements(queue) == identity(REDIS_PORT, 13, second.env["EVIDENCE_KEY_PREFIX"])


def test_redis_of_two_workers_started_together_on_two_stores_one_refuses(
    start_worker: Callable[..., Worker],
    queue: str,
    redis_announcements: Callable[[str], str | None],
) -> None:
    """SET NX: one of them holds the queue, the other exits 2; which one is the race's."""
    workers = [
        start_worker(queue, store_url=STORE_A, pool="solo", env=ENV),
        start_worker(queue, store_url=f"redis://127.0.0.1:{REDIS_PORT}/13", pool="solo", env=ENV),
    ]

    deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
    while all(worker.alive() for worker in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    (refused,) = [worker for worker in workers if not worker.alive()]
    (winner,) = [worker for worker in workers if worker.alive()]
    winner.wait_ready()

    assert refused.process.returncode == 2
    assert len(problem_lines(refused)) == 1
    winning_db = winner.env["EVIDENCE_STORE_URL"].rsplit("/", 1)[1]
    assert redis_announcements(queue) == identity(
        REDIS_PORT, int(winning_db), winner.env["EVIDENCE_KEY_PREFIX"]
    )


def test_rabbitmq_a_worker_on_another_store_exits_2_with_one_line(
    start_worker: Callable[..., Worker],
    amqp_queue: str,
    amqp_announcement: str,
    key_prefix: str,
    guarded_store: str,
) -> None:
    first = start_worker(amqp_queue, broker_url=AMQP_URL, store_url=STORE_A, pool="solo", env=ENV)
    first.wait_ready()
    port = int(guarded_store.rsplit(":", 1)[1].split("/", maxsplit=1)[0])

    second = start_worker(
        amqp_queue, broker_url=AMQP_URL, store_url=guarded_store, pool="solo", env=ENV
    )

    assert exited(second) == 2, str(second)
    assert problem_lines(second) == [
        "evidence-worker: configuration error: "
        + refusal(
            amqp_queue,
            identity(REDIS_PORT, 14, key_prefix),
            identity(port, 0, key_prefix),
            ttl_seconds=TTL_SECONDS,
        )
    ]
    assert PASSWORD not in second.output() + first.output()
    assert never_ready(second)
    assert first.alive()


def test_rabbitmq_workers_on_one_store_all_start(
    start_worker: Callable[..., Worker], amqp_queue: str, amqp_announcement: str
) -> None:
    first = start_worker(amqp_queue, broker_url=AMQP_URL, store_url=STORE_A, pool="solo", env=ENV)
    second = start_worker(amqp_queue, broker_url=AMQP_URL, store_url=STORE_A, pool="solo", env=ENV)

    first.wait_ready()
    second.wait_ready()
    time.sleep(TTL_SECONDS * 2)

    assert first.alive()
    assert second.alive()
    # One claim, read and put back by both: while a worker holds it between basic_get and its
    # requeue the queue counts 0 ready messages, so it is read until seen; never two.
    counts = []
    with Connection(AMQP_URL, connect_timeout=3) as connection:
        for _ in range(ANNOUNCEMENT_READS):
            _, messages, _ = connection.default_channel.queue_declare(
                amqp_announcement, passive=True
            )
            counts.append(messages)
            if messages:
                break
            time.sleep(0.05)
    assert counts[-1] == 1, counts


def test_rabbitmq_a_new_store_starts_once_the_old_ones_announcement_expired(
    start_worker: Callable[..., Worker], amqp_queue: str, amqp_announcement: str
) -> None:
    first = start_worker(amqp_queue, broker_url=AMQP_URL, store_url=STORE_A, pool="solo", env=ENV)
    first.wait_ready()
    first.stop()
    # Not polled: declaring the queue, even passively, renews its x-expires lease.
    time.sleep(TTL_SECONDS + 2)

    second = start_worker(
        amqp_queue, broker_url=AMQP_URL, store_url=f"redis://127.0.0.1:{REDIS_PORT}/13", env=ENV
    )

    second.wait_ready()
    assert second.alive()
