"""Store connections reset again and again while a worker records: a write whose reply was
lost is retried, recognised by its write id and never counted twice. Exact accounting: every
case one record, every hash one miss and as many attempts as messages, one alert per
conflicting pair (not one per retry), every ledger entry closed.

The store is a redis-server of the test's own behind a TCP proxy that resets every connection
(RST, both sides) every few milliseconds; the broker is the shared Redis, untouched.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery

from contracts.record_models import NONDETERMINISM, SCORED
from tests.integration import worker_harness as harness
from tests.integration.fault_proxy import FaultProxy
from tests.integration.worker_harness import BROKER_URL, RedisServer, Worker, hash_of
from worker.settings import Settings
from worker.stores.redis.redis_store import RedisStore
from worker.upstream.publishing import publish_lines

pytestmark = pytest.mark.integration

start_worker = harness.start_worker
redis_server = harness.redis_server
publisher = harness.publisher
queue = harness.queue

MessageFactory = Callable[..., dict[str, Any]]
UNIQUE = 1_000
PAIRS = 40  # each a second message with the first's inputs and other supported IDs
RESET_EVERY_SECONDS = 0.2


@pytest.fixture
def resetting_proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    proxy = FaultProxy(target_port=redis_server.port).start()
    yield proxy
    proxy.stop()


def keep_resetting(proxy: FaultProxy, stop: threading.Event) -> int:
    resets = 0
    while not stop.wait(RESET_EVERY_SECONDS):
        if proxy.connections():
            proxy.reset_all()
            resets += 1
    return resets


@pytest.mark.timeout(300)
def test_store_connection_resets_lose_nothing_and_double_nothing(
    start_worker: Callable[..., Worker],
    redis_server: RedisServer,
    resetting_proxy: FaultProxy,
    publisher: Callable[..., Celery],
    queue: str,
    key_prefix: str,
    message_dict: MessageFactory,
) -> None:
    firsts = [
        message_dict(case_id=f"reset-{n:05d}", answer=f"Returns within 30 days. [reset {n}]")
        for n in range(UNIQUE)
    ]
    twins = [
        {**firsts[n], "case_id": f"twin-{n:05d}", "supported_claim_ids": ["return-window"]}
        for n in range(PAIRS)
    ]
    messages = firsts + twins
    direct = RedisStore.from_url(redis_server.url, prefix=key_prefix)  # beside the proxy
    worker = start_worker(queue, store_url=resetting_proxy.url())
    worker.wait_ready()
    settings = Settings()
    stop = threading.Event()
    resets: list[int] = []
    resetter = threading.Thread(target=lambda: resets.append(keep_resetting(resetting_proxy, stop)))
    resetter.start()
    try:
        published = publish_lines(
            ((n, json.dumps(m).encode()) for n, m in enumerate(messages, 1)),
            app=publisher(BROKER_URL),
            queue=queue,
            max_message_bytes=settings.max_message_bytes,
            max_batch_bytes=settings.max_batch_bytes,
            ledger=direct,
        )
        assert published.messages == len(messages)
        wanted = {m["case_id"] for m in messages}
        worker.wait_until(
            lambda lines: wanted <= {line.get("case_id") for line in lines},
            timeout=240,
            what="every message recorded",
        )
        time.sleep(1)  # a duplicate record would come right after
    finally:
        stop.set()
        resetter.join()

    records = worker.records()
    assert sorted(Counter(r["case_id"] for r in records).values()) == [1] * len(messages)
    assert {r["event"] for r in records} == {SCORED}
    misses = Counter(r["input_hash"] for r in records if r["cache"] == "miss")
    hashes = {hash_of(m) for m in firsts}
    assert misses == Counter(hashes)  # one first writer per hash, and its record says so
    totals = Counter(hash_of(m) for m in messages)
    for input_hash in hashes:
        history = direct.history(input_hash)
        assert history is not None
        assert history.total_attempts == totals[input_hash], input_hash
    assert direct.alert_count() == PAIRS
    assert len(worker.events(NONDETERMINISM)) == PAIRS
    later = datetime.now(UTC) + timedelta(hours=1)
    assert direct.count_unrecorded(published_before=later) == 0
    waits = worker.events("evidence_coverage.store_unavailable")
    print(f"{resets[0]} resets, {len(waits)} writes waited", file=sys.__stderr__)  # with -s
    assert waits, "no reset hit a write"
    assert resets[0] >= 3
    direct.close()
