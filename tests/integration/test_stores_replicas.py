"""The Redis store on a real master with one replica: a write returns only once the replica
has it; with the replica paused (it never acknowledges), each write is a TransientError and
its retry, once the replica is back, a replay.

The servers are the module's own (tests/integration/redis_servers.py); each test writes under
a key prefix of its own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXED_NOW
from tests.factories import ledger_entry
from tests.integration import redis_servers, worker_harness
from tests.integration.redis_servers import ReplicatedRedis
from tests.integration.store_factories import HASH, OTHER_HASH, attempt
from tests.integration.worker_harness import BROKER_URL, queue_length
from worker.cli import main
from worker.cli.exit_codes import INVALID, OK
from worker.errors import TransientError
from worker.settings import Settings
from worker.stores import DeadLetter, Recorded, open_store
from worker.stores.redis.keys import dead_letters_key, lease_key, ledger_task_key, outcome_key
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

replicated_redis = redis_servers.replicated_redis
queue = worker_harness.queue

TIMEOUT_MS = 200
FUTURE = datetime.now(UTC) + timedelta(hours=1)
MessageFactory = Callable[..., dict[str, Any]]


def short_of_replicas(url: str) -> str:
    """The TransientError of a write the paused replica never acknowledged."""
    return (
        f"store {url}: the write reached 0 of 1 replica in {TIMEOUT_MS} ms "
        "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"
    )


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(replicated_redis: ReplicatedRedis, prefix: str) -> Iterator[RedisStore]:
    """The store as the worker opens it (open_store, the settings' automatic default)."""
    settings = Settings(key_prefix=prefix, store_replica_timeout_ms=TIMEOUT_MS)
    opened = open_store(replicated_redis.url, settings)
    assert isinstance(opened, RedisStore)
    yield opened
    opened.close()


def on_replica(servers: ReplicatedRedis, key: str) -> bool:
    client = servers.replica_client()
    try:
        return bool(client.exists(key))
    finally:
        client.close()


def test_the_automatic_default_waits_for_one_replica_where_the_master_has_one(
    store: RedisStore, prefix: str
) -> None:
    """Unset EVIDENCE_STORE_MIN_REPLICAS: 1 on a master with a replica, 0 on the shared Redis
    (which has none), where nothing changes."""
    plain = open_store(worker_harness.STORE_URL, Settings(key_prefix=prefix))
    try:
        assert isinstance(plain, RedisStore)
        assert (store.replicas.wanted(), plain.replicas.wanted()) == (1, 0)
    finally:
        plain.close()


def test_record_many_returns_once_the_replica_holds_the_outcome(
    store: RedisStore, replicated_redis: ReplicatedRedis, prefix: str
) -> None:
    """Read on the replica itself, right after the call: both outcomes are there."""
    first, second = attempt(1), attempt(2)

    results = store.record_many(
        [(HASH, first), (OTHER_HASH, second)], now=FIXED_NOW, write_ids=["t1:0", "t1:1"]
    )

    assert results == [Recorded("miss", first), Recorded("miss", second)]
    assert on_replica(replicated_redis, outcome_key(prefix, HASH))
    assert on_replica(replicated_redis, outcome_key(prefix, OTHER_HASH))


def test_a_replica_that_never_acknowledges_fails_the_record_and_the_retry_replays(
    store: RedisStore, replicated_redis: ReplicatedRedis, prefix: str
) -> None:
    """Replica stopped: record_many raises the TransientError (the task would hand its
    message back unacknowledged). Replica back: the same write ids are a replay, found as
    the first write found them, and nothing is recorded twice."""
    first, second = attempt(1), attempt(2)
    items = [(HASH, first), (OTHER_HASH, second)]

    with replicated_redis.paused(), pytest.raises(TransientError) as raised:
        store.record_many(items, now=FIXED_NOW, write_ids=["t1:0", "t1:1"])
    again = store.record_many(items, now=FIXED_NOW, write_ids=["t1:0", "t1:1"])

    assert str(raised.value) == short_of_replicas(replicated_redis.url)
    assert again == [Recorded("miss", first), Recorded("miss", second)]
    assert [result.replayed for result in again] == [True, True]
    histories = [store.history(HASH), store.history(OTHER_HASH)]
    assert [(h.total_attempts, h.attempts) for h in histories if h is not None] == [
        (1, [first]),
        (1, [second]),
    ]
    assert on_replica(replicated_redis, outcome_key(prefix, HASH))


def test_without_a_replica_count_a_paused_replica_does_not_hold_a_write(
    replicated_redis: ReplicatedRedis, prefix: str
) -> None:
    """EVIDENCE_STORE_MIN_REPLICAS=0: no WAIT, the write returns as before."""
    settings = Settings(key_prefix=prefix, store_min_replicas=0)
    store = open_store(replicated_redis.url, settings)
    try:
        with replicated_redis.paused():
            result = store.record(HASH, attempt(1), now=FIXED_NOW, write_id="t1:0")
    finally:
        store.close()

    assert result == Recorded("miss", attempt(1))


def test_more_replicas_than_the_master_has_is_never_enough(
    replicated_redis: ReplicatedRedis, prefix: str
) -> None:
    """EVIDENCE_STORE_MIN_REPLICAS=2 on a master with one: every write waits, and says so."""
    settings = Settings(
        key_prefix=prefix, store_min_replicas=2, store_replica_timeout_ms=TIMEOUT_MS
    )
    store = open_store(replicated_redis.url, settings)
    try:
        with pytest.raises(TransientError) as raised:
            store.record(HASH, attempt(1), now=FIXED_NOW, write_id="t1:0")
    finally:
        store.close()

    assert str(raised.value) == (
        f"store {replicated_redis.url}: the write reached 1 of 2 replicas in {TIMEOUT_MS} ms "
        "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"
    )


def test_a_dead_letter_waits_for_the_replica_too(
    store: RedisStore, replicated_redis: ReplicatedRedis, prefix: str
) -> None:
    """Replica stopped: the dead letter raises; back, the retry returns once the replica has
    the stream. A dead letter is appended again by its retry, as after any lost reply."""
    letter = DeadLetter(received_at=FIXED_NOW, error="schema", body="{}", task_id="t9")
    store.note_published([ledger_entry("t9", 0)])

    with replicated_redis.paused(), pytest.raises(TransientError) as raised:
        store.dead_letter(letter)
    store.dead_letter(letter)

    assert str(raised.value) == short_of_replicas(replicated_redis.url)
    kept = letter.bounded(store.dead_letter_max_bytes)
    assert store.dead_letters() == [kept, kept]
    assert on_replica(replicated_redis, dead_letters_key(prefix))
    assert store.count_unrecorded(published_before=FUTURE) == 0


def test_a_ledger_note_and_a_close_wait_for_the_replica(
    store: RedisStore, replicated_redis: ReplicatedRedis, prefix: str
) -> None:
    """Replica stopped: noting and closing raise (a publisher sends nothing it has not
    noted on the replicas); back, both return once the replica has them."""
    entries = [ledger_entry("t1", 0), ledger_entry("t1", 1)]

    with replicated_redis.paused():
        with pytest.raises(TransientError) as note:
            store.note_published(entries)
        with pytest.raises(TransientError) as close:
            store.close_entries(["t1:0"])
    store.note_published(entries)
    assert on_replica(replicated_redis, ledger_task_key(prefix, "t1"))
    store.close_entries(["t1:0", "t1:1"])

    assert str(note.value) == str(close.value) == short_of_replicas(replicated_redis.url)
    assert not on_replica(replicated_redis, ledger_task_key(prefix, "t1"))
    assert store.count_unrecorded(published_before=FUTURE) == 0


def test_the_reconcile_lease_waits_for_the_replica(
    store: RedisStore, replicated_redis: ReplicatedRedis, prefix: str
) -> None:
    """Replica stopped: taking the lease raises (the beat's run republishes nothing on a
    lease a failover could lose); back, the replica has it, and no other run takes it."""
    with replicated_redis.paused(), pytest.raises(TransientError) as raised:
        store.take_lease("reconcile", "run-1", 300)

    assert str(raised.value) == short_of_replicas(replicated_redis.url)
    assert on_replica(replicated_redis, lease_key(prefix, "reconcile"))
    assert store.take_lease("reconcile", "run-2", 300) is False


def test_publish_sends_nothing_while_the_replica_lags_then_everything(
    replicated_redis: ReplicatedRedis,
    prefix: str,
    queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    message_dict: MessageFactory,
) -> None:
    """`evidence-worker publish` with its ledger on the master: the note not confirmed, the
    run stops with one line and exit 2 before any send; run again once the replica is back,
    every message is sent, its note on the replica."""
    lines = tmp_path / "messages.jsonl"
    messages = [message_dict(case_id=f"lagging-{n}", answer=f"Returns. [{n}]") for n in range(3)]
    lines.write_text("".join(json.dumps(message) + "\n" for message in messages), "utf-8")
    for name, value in {
        "EVIDENCE_BROKER_URL": BROKER_URL,
        "EVIDENCE_STORE_URL": replicated_redis.url,
        "EVIDENCE_KEY_PREFIX": prefix,
        "EVIDENCE_QUEUE": queue,
        "EVIDENCE_STORE_REPLICA_TIMEOUT_MS": str(TIMEOUT_MS),
    }.items():
        monkeypatch.setenv(name, value)

    with replicated_redis.paused():
        lagging = main(["publish", str(lines)])
        lagging_err = capsys.readouterr().err
        sent_while_lagging = queue_length(BROKER_URL, queue)
    back = main(["publish", str(lines)])
    back_err = capsys.readouterr().err

    assert (lagging, sent_while_lagging) == (INVALID, 0)
    assert lagging_err == (
        f"evidence-worker: store unavailable: {short_of_replicas(replicated_redis.url)}; "
        "run again once it takes writes\n"
    )
    assert (back, queue_length(BROKER_URL, queue)) == (OK, 3)
    assert back_err.splitlines()[-1] == (
        f"publish: sent 3 messages in 3 tasks to queue {queue}; 0 lines rejected"
        f" (store {replicated_redis.url}, broker {BROKER_URL})"
    )
    client = replicated_redis.replica_client()
    try:
        noted = {key.decode() for key in client.scan_iter(f"{prefix}:ledger:task:*")}
    finally:
        client.close()
    # Both runs' notes, one task each message: the stopped run's stay open (reconcile finds
    # them, and a republished copy lands as a hit, as for a publisher that died).
    assert len(noted) == 6
