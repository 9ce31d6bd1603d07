"""A store that goes away, or fills up, never costs a message: every published case ends
recorded exactly once when the store is back, and the wait is visible meanwhile.

The store is a redis-server of the test's own (on a free port); the broker stays up on the
shared Redis, so what is exercised is the store's outage alone. Windows and timeouts are
short versions of the defaults (a 3 s wait inside the task instead of 240 s) that take the
same paths: the task waits, hands its message back unacknowledged, and scores it later.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from contracts.record_models import NONDETERMINISM, SCORED
from tests.integration import worker_harness
from tests.integration.worker_harness import (
    RedisServer,
    Worker,
    check_first_outcomes,
    free_port,
    hash_of,
    send_scores,
)
from worker.constants import TASK_FAILED, UNRECORDABLE
from worker.observability.metrics import MULTIPROC_ENV
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

start_worker = worker_harness.start_worker
redis_server = worker_harness.redis_server
publisher = worker_harness.publisher
queue = worker_harness.queue

MessageFactory = Callable[..., dict[str, Any]]
OUTAGE_ENV = {
    "EVIDENCE_VISIBILITY_TIMEOUT_SECONDS": "10",
    "EVIDENCE_STORE_RETRY_WINDOW_SECONDS": "3",
}
MESSAGES = 60
CONFLICTING_PAIRS = 10


def distinct(message_dict: MessageFactory, tag: str, count: int) -> list[dict[str, Any]]:
    return [
        message_dict(case_id=f"{tag}-{n:03d}", answer=f"Returns within 30 days. [{tag} {n}]")
        for n in range(count)
    ]


def scored_once_each(worker: Worker, messages: list[dict[str, Any]], timeout: float) -> None:
    wanted = {message["case_id"] for message in messages}
    worker.wait_until(
        lambda lines: (
            wanted <= {line.get("case_id") for line in lines if line.get("event") == SCORED}
        ),
        timeout=timeout,
        what=f"all {len(wanted)} messages scored",
    )


def account(
    worker: Worker, store_url: str, key_prefix: str, messages: list[dict[str, Any]]
) -> None:
    """Every published case: one scored record, a miss, the first outcome stored once; no
    rejection, no alert, no dead letter."""
    records = [line for line in worker.records() if line.get("case_id", "").startswith("outage")]
    by_case: dict[str, list[str]] = {}
    for record in records:
        by_case.setdefault(record["case_id"], []).append(f"{record['event']}/{record['cache']}")
    assert by_case == {message["case_id"]: [f"{SCORED}/miss"] for message in messages}
    store = RedisStore.from_url(store_url, prefix=key_prefix)
    try:
        histories = check_first_outcomes(store, messages, records)
        assert sorted(h.total_attempts for h in histories.values()) == [1] * len(messages)
        assert store.alerts() == []
        assert store.dead_letters() == []
    finally:
        store.close()


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_store_outage_longer_than_the_wait_loses_nothing(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    publisher: Callable[..., Celery],
    queue: str,
    key_prefix: str,
    message_dict: MessageFactory,
) -> None:
    """Store killed, messages published, store back after two wait windows: all recorded once,
    and the WARNING lines named the waiting cases meanwhile."""
    messages = distinct(message_dict, "outage", MESSAGES)
    worker = start_worker(queue, store_url=redis_server.url, env=OUTAGE_ENV)
    worker.wait_ready()

    redis_server.kill()
    send_scores(publisher(), queue, messages)
    worker.wait_until(
        lambda lines: any(line.get("event") == "evidence_coverage.requeued" for line in lines),
        timeout=60,
        what="a message handed back to the broker",
    )
    time.sleep(3)
    redis_server.start()
    scored_once_each(worker, messages, timeout=120)

    waiting = worker.events("evidence_coverage.store_unavailable")
    named = {case for line in waiting for case in line.get("case_ids") or []}
    assert waiting
    assert named <= {message["case_id"] for message in messages}
    assert all(line["level"] == "warning" for line in waiting)
    assert worker.alive()
    account(worker, redis_server.url, key_prefix, messages)


@pytest.fixture
def full_store(tmp_path: Path) -> Iterator[RedisServer]:
    """A store at maxmemory with noeviction: it refuses every write until memory is freed."""
    server = RedisServer(
        port=free_port(),
        directory=tmp_path,
        options=("--maxmemory", "4mb", "--maxmemory-policy", "noeviction"),
    )
    server.start()
    client = redis.Redis(port=server.port)
    try:
        with pytest.raises(redis.OutOfMemoryError):  # noqa: PT012 - fill until refused
            for n in range(10_000):
                client.set(f"ballast:{n}", b"x" * 4096)
    finally:
        client.close()
    yield server
    server.kill()


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_store_at_maxmemory_keeps_every_message_until_it_takes_writes(
    start_worker: Callable[..., Worker],
    full_store: RedisServer,
    publisher: Callable[..., Celery],
    queue: str,
    key_prefix: str,
    message_dict: MessageFactory,
) -> None:
    """OutOfMemoryError is waited out like an outage, never acked: once memory is freed,
    every message is recorded exactly once, and each conflicting pair raises exactly one
    alert (the alert is written in the script call that records the attempt, so a full
    store cannot keep one without the other)."""
    messages = distinct(message_dict, "outage-oom", MESSAGES)
    twins = [
        {**messages[n], "case_id": f"twin-oom-{n:03d}", "supported_claim_ids": ["return-window"]}
        for n in range(CONFLICTING_PAIRS)
    ]
    worker = start_worker(queue, store_url=full_store.url, env=OUTAGE_ENV)
    worker.wait_ready()

    send_scores(publisher(), queue, messages + twins)
    worker.wait_until(
        lambda lines: any(
            "refuses writes" in str(line.get("problem"))
            for line in lines
            if line.get("event") == "evidence_coverage.store_unavailable"
        ),
        timeout=60,
        what="the worker to wait for a full store",
    )
    assert worker.events(SCORED) == []
    client = redis.Redis(port=full_store.port)
    try:
        client.config_set("maxmemory", 0)
    finally:
        client.close()
    scored_once_each(worker, messages + twins, timeout=120)

    records = worker.records()
    assert sorted(Counter(r["case_id"] for r in records).values()) == [1] * (
        MESSAGES + CONFLICTING_PAIRS
    )
    misses = Counter(r["input_hash"] for r in records if r["cache"] == "miss")
    assert misses == Counter(hash_of(m) for m in messages)  # one first writer per hash
    assert len(worker.events(NONDETERMINISM)) == CONFLICTING_PAIRS
    store = RedisStore.from_url(full_store.url, prefix=key_prefix)
    try:
        assert store.alert_count() == CONFLICTING_PAIRS
        assert sorted(alert.input_hash for alert in store.alerts()) == sorted(
            hash_of(m) for m in twins
        )
        assert store.dead_letters() == []
    finally:
        store.close()


DISK_BYTES = 2 * 1024 * 1024
BALLAST_BYTES = 1_800_000  # leaves ~300 KB for the AOF: filled a hundred or so records in
AOF_MESSAGES = 300


@pytest.fixture
def aof_on_small_disk(tmp_path: Path) -> Iterator[tuple[RedisServer, Path]]:
    """A store with `--appendonly yes` (as deploy/ runs it) whose directory is a 2 MB tmpfs
    mounted in a mount namespace of the server's own, nearly filled by a ballast file; yields
    the server and the ballast's path as this process sees it (/proc/PID/root/...), whose
    removal frees the space. The mount goes with the server."""
    disk = tmp_path / "disk"
    disk.mkdir()
    port = free_port()
    process = subprocess.Popen(
        [
            "unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size="$1" tmpfs "$0" && head -c "$2" /dev/zero > "$0/ballast" '
            '&& exec redis-server --port "$3" --bind 127.0.0.1 --dir "$0" --save "" '
            "--appendonly yes --appendfsync everysec --auto-aof-rewrite-percentage 0 "
            '--logfile "$0/../redis.log"',
            str(disk), str(DISK_BYTES), str(BALLAST_BYTES), str(port),
        ],
    )  # fmt: skip
    server = RedisServer(port=port, directory=tmp_path, process=process)
    client = redis.Redis(port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + 15
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert process.poll() is None, (tmp_path / "redis.log").read_text("utf-8", "replace")
            assert time.monotonic() < deadline, "the AOF store did not start"
            time.sleep(0.05)
    client.close()
    yield server, Path(f"/proc/{process.pid}/root") / str(disk).lstrip("/") / "ballast"
    server.kill()


def store_unavailable_gauge(port: int) -> float | None:
    """The worker's evidence_coverage_store_unavailable, scraped (None: no answer yet)."""
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "evidence_coverage_store_unavailable":
                return float(sample.value)
    return None


def wait_for_gauge(port: int, value: float, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while store_unavailable_gauge(port) != value:
        assert time.monotonic() < deadline, f"the gauge never read {value}"
        time.sleep(0.2)


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_full_disk_under_the_aof_is_an_outage_not_a_bug(
    start_worker: Callable[..., Worker],
    aof_on_small_disk: tuple[RedisServer, Path],
    publisher: Callable[..., Celery],
    queue: str,
    key_prefix: str,
    message_dict: MessageFactory,
    tmp_path: Path,
) -> None:
    """The AOF's disk fills mid-stream and Redis answers MISCONF: the worker waits with the
    store_unavailable WARNING naming MISCONF and its gauge at 1, no task_failed or
    unrecordable line; once the ballast is removed every message is recorded exactly once
    and the gauge is back at 0."""
    server, ballast = aof_on_small_disk
    messages = distinct(message_dict, "outage-aof", AOF_MESSAGES)
    metrics_port = free_port()
    env = {
        **OUTAGE_ENV,
        "EVIDENCE_METRICS_PORT": str(metrics_port),
        MULTIPROC_ENV: str(tmp_path / "metrics"),
    }
    worker = start_worker(queue, store_url=server.url, env=env)
    worker.wait_ready()

    send_scores(publisher(), queue, messages)
    worker.wait_until(
        lambda lines: any(
            str(line.get("problem", "")).startswith(
                "Redis refuses writes for now: MISCONF Errors writing to the AOF file: "
                "No space left on device"
            )
            for line in lines
            if line.get("event") == "evidence_coverage.store_unavailable"
        ),
        timeout=90,
        what="the worker to wait for a store that cannot persist",
    )
    wait_for_gauge(metrics_port, 1.0, timeout=30)
    scored_while_full = len(worker.events(SCORED))
    os.remove(ballast)
    scored_once_each(worker, messages, timeout=120)
    wait_for_gauge(metrics_port, 0.0, timeout=30)

    assert 0 < scored_while_full < AOF_MESSAGES
    assert worker.events(TASK_FAILED, UNRECORDABLE) == []
    waiting = worker.events("evidence_coverage.store_unavailable")
    assert {line["level"] for line in waiting} == {"warning"}
    records = [line for line in worker.records() if line["case_id"].startswith("outage-aof")]
    assert sorted(Counter(r["case_id"] for r in records).values()) == [1] * AOF_MESSAGES
    store = RedisStore.from_url(server.url, prefix=key_prefix)
    try:
        histories = check_first_outcomes(store, messages, records)
        assert sorted(h.total_attempts for h in histories.values()) == [1] * AOF_MESSAGES
        assert (store.alerts(), store.dead_letters()) == ([], [])
    finally:
        store.close()
    print(  # the counts, for the report
        f"published {AOF_MESSAGES}, recorded {len(records)}, lost {AOF_MESSAGES - len(records)}, "
        f"scored before the disk filled {scored_while_full}, waits {len(waiting)}"
    )
