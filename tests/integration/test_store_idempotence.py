"""A retried write is recognised by its write id: over every store kind, and over a real
connection that loses the script's reply (a TCP proxy that drops it)."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from contracts import Alert, Attempt, AttributionResult, ScoreRecord
from tests.conftest import FIXED_NOW
from tests.integration import store_factories as suite
from tests.integration.store_factories import (
    HASH,
    OTHER_HASH,
    LegacyFactory,
    StoreFactory,
    attempt,
)
from tests.integration.worker_harness import REDIS_PORT
from worker.errors import TransientError
from worker.pipeline.scoring import Delivery, process_many, write_ids
from worker.stores import Recorded, ResultStore
from worker.stores.redis.keys import alerts_key, outcome_key
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SCHEMA_VERSION, SQLiteStore

pytestmark = pytest.mark.integration

# The store suite's fixtures: every store kind (SQLite, fakeredis, real Redis) in turn.
make_store = suite.make_store
make_redis_store = suite.make_redis_store
make_legacy_store = suite.make_legacy_store
store = suite.store

THIRD_HASH = "c" * 64
LATER = FIXED_NOW + timedelta(minutes=5)


def batch() -> list[tuple[str, Attempt]]:
    """A miss, a hit, a conflict and another hash's miss, as one task's four messages."""
    return [
        (HASH, attempt(1)),
        (HASH, attempt(2)),
        (HASH, attempt(3, value=0.5)),
        (OTHER_HASH, attempt(4)),
    ]


def retried(items: Sequence[tuple[str, Attempt]]) -> list[tuple[str, Attempt]]:
    """The same messages scored again by a later try of the task: same lists, a new time."""
    return [
        (input_hash, each.model_copy(update={"recorded_at": LATER, "redelivered": True}))
        for input_hash, each in items
    ]


IDS = ["task-9:0", "task-9:1", "task-9:2", "task-9:3"]


def counts(store: ResultStore) -> tuple[list[int], list[int], int]:
    """Per hash (HASH, OTHER_HASH): total attempts and attempts kept; and the alerts kept."""
    histories = [store.history(h) for h in (HASH, OTHER_HASH)]
    return (
        [h.total_attempts if h else 0 for h in histories],
        [len(h.attempts) if h else 0 for h in histories],
        store.alert_count(),
    )


# --- every store -----------------------------------------------------------------------------


def test_same_batch_again_with_the_same_write_ids_returns_the_original_results(
    store: ResultStore,
) -> None:
    """A batch recorded twice under the same write ids: the same Recorded list, each marked
    replayed the second time, and nothing stored twice (attempts, totals, alerts)."""
    items = batch()
    original = store.record_many(items, now=FIXED_NOW, write_ids=IDS)
    stored = counts(store)

    again = store.record_many(items, now=FIXED_NOW, write_ids=IDS)

    assert [r.cache for r in original] == ["miss", "hit", "conflict", "miss"]
    assert again == original
    assert [r.replayed for r in original] == [False] * 4
    assert [r.replayed for r in again] == [True] * 4
    assert counts(store) == stored == ([3, 1], [3, 1], 1)
    assert store.alerts() == [original[2].alert]


def test_retry_at_a_later_time_returns_the_original_records_and_alert(store: ResultStore) -> None:
    """A later try of the task (new recorded_at, redelivered) gets what the first try found:
    the first writer still a miss with its own attempt as first, the conflict's alert with
    the original observed attempt and raised_at."""
    items = batch()
    original = store.record_many(items, now=FIXED_NOW, write_ids=IDS)

    again = store.record_many(retried(items), now=LATER, write_ids=IDS)

    assert again == original
    assert again[0] == Recorded(cache="miss", first=items[0][1])
    alert = Alert(input_hash=HASH, first=items[0][1], observed=items[2][1], raised_at=FIXED_NOW)
    assert again[2].alert == alert
    assert store.alerts() == [alert]
    assert store.history(HASH).attempts == [each for _, each in items[:3]]  # type: ignore[union-attr]


def test_replayed_first_write_is_a_miss_after_other_writers(store: ResultStore) -> None:
    """The first writer's retry, after others confirmed and contradicted it, is still a miss."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW, write_id="task-1:0")
    store.record(HASH, attempt(2), now=FIXED_NOW, write_id="task-2:0")
    store.record(HASH, attempt(3, value=0.5), now=FIXED_NOW, write_id="task-3:0")

    again = store.record(HASH, attempt(1, recorded_at=LATER), now=LATER, write_id="task-1:0")

    assert again == Recorded(cache="miss", first=first)
    assert again.replayed
    assert store.history(HASH).total_attempts == 3  # type: ignore[union-attr]


def test_another_write_id_for_the_same_hash_is_a_hit(store: ResultStore) -> None:
    """A new write id under a known hash is a new attempt: a hit, counted and kept."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW, write_id="task-1:0")

    recorded = store.record(HASH, attempt(2), now=FIXED_NOW, write_id="task-2:0")

    assert recorded == Recorded(cache="hit", first=first)
    assert not recorded.replayed
    assert store.history(HASH).total_attempts == 2  # type: ignore[union-attr]


def test_the_same_write_id_under_another_hash_is_a_new_write(store: ResultStore) -> None:
    """Write ids are kept per hash: one under another hash is not this write."""
    store.record(HASH, attempt(1), now=FIXED_NOW, write_id="task-1:0")

    recorded = store.record(OTHER_HASH, attempt(2), now=FIXED_NOW, write_id="task-1:0")

    assert recorded == Recorded(cache="miss", first=attempt(2))
    assert not recorded.replayed


def test_writes_without_a_write_id_are_always_new(store: ResultStore) -> None:
    """Without write ids (None) the same attempt again is another hit, as before write ids."""
    items = [(HASH, attempt(1))]
    store.record_many(items, now=FIXED_NOW, write_ids=[None])

    again = store.record_many(items, now=FIXED_NOW)

    assert [(r.cache, r.replayed) for r in again] == [("hit", False)]
    assert store.history(HASH).total_attempts == 2  # type: ignore[union-attr]


def test_the_same_write_id_twice_in_one_batch_is_recorded_once(store: ResultStore) -> None:
    """Within one batch, a write id seen before is a replay of the earlier item."""
    first = attempt(1)

    results = store.record_many(
        [(HASH, first), (HASH, attempt(2, value=0.5))], now=FIXED_NOW, write_ids=["t:0", "t:0"]
    )

    assert results == [Recorded(cache="miss", first=first)] * 2
    assert [r.replayed for r in results] == [False, True]
    assert store.history(HASH).total_attempts == 1  # type: ignore[union-attr]
    assert store.alert_count() == 0


def test_retry_of_a_partly_recorded_batch_records_the_rest(store: ResultStore) -> None:
    """A batch of several script calls whose first 200 attempts landed before the failure:
    its retry replays those and records the rest, each result what one clean run gives."""
    hashes = [f"{n:064x}" for n in range(150)]
    items = [
        (hashes[(n * 7) % 150], attempt(n, value=0.5 if n % 11 == 0 else 2 / 3)) for n in range(450)
    ]
    firsts: dict[str, Attempt] = {}
    alerted: set[tuple[str, float | None]] = set()  # each conflict is alerted once
    expected = []
    for input_hash, item in items:
        first = firsts.setdefault(input_hash, item)
        if first is item:
            expected.append(Recorded(cache="miss", first=item))
        elif first.value == item.value:
            expected.append(Recorded(cache="hit", first=first))
        elif (input_hash, item.value) in alerted:
            expected.append(Recorded(cache="conflict", first=first))
        else:
            alerted.add((input_hash, item.value))
            alert = Alert(input_hash=input_hash, first=first, observed=item, raised_at=FIXED_NOW)
            expected.append(Recorded(cache="conflict", first=first, alert=alert))
    ids = [f"task-9:{n}" for n in range(450)]
    store.record_many(items[:200], now=FIXED_NOW, write_ids=ids[:200])

    results = store.record_many(items, now=FIXED_NOW, write_ids=ids)

    assert results == expected
    assert [r.replayed for r in results] == [True] * 200 + [False] * 250
    assert store.alerts(limit=1000) == [r.alert for r in expected if r.alert is not None]
    assert [store.history(h).attempts for h in hashes] == [  # type: ignore[union-attr]
        [each for input_hash, each in items if input_hash == h] for h in hashes
    ]


def test_write_ids_of_the_newest_attempts_are_kept_beyond_the_bound(
    make_store: StoreFactory,
) -> None:
    """With a bound of 3, after ten writes the newest three are still recognised and the
    oldest is forgotten, as its attempt is: its retry counts as a new hit."""
    store = make_store(max_attempts_per_hash=3)
    first = attempt(0)
    for n in range(10):
        store.record(HASH, attempt(n), now=FIXED_NOW, write_id=f"task-{n}:0")

    replays = [store.record(HASH, attempt(n), now=LATER, write_id=f"task-{n}:0") for n in (7, 8, 9)]
    forgotten = store.record(HASH, attempt(0), now=LATER, write_id="task-0:0")

    assert [(r.cache, r.replayed) for r in replays] == [("hit", True)] * 3
    assert forgotten == Recorded(cache="hit", first=first)
    assert not forgotten.replayed
    assert store.history(HASH).total_attempts == 11  # type: ignore[union-attr]


def test_recorded_writes_names_the_writes_a_retry_would_replay(store: ResultStore) -> None:
    """Each (hash, write id) the store holds is True, as record() would find it; another
    position, another task or another hash is False; asking writes nothing."""
    store.record_many(batch(), now=FIXED_NOW, write_ids=IDS)
    stored = counts(store)

    found = store.recorded_writes(
        [
            (HASH, "task-9:0"),
            (HASH, "task-9:2"),
            (OTHER_HASH, "task-9:3"),
            (HASH, "task-9:3"),
            (HASH, "task-8:0"),
            (THIRD_HASH, "task-9:0"),
        ]
    )

    assert found == [True, True, True, False, False, False]
    assert counts(store) == stored
    assert store.recorded_writes([]) == []


def test_recorded_writes_forgets_what_the_bound_forgot(make_store: StoreFactory) -> None:
    """Past the bound of 3 the oldest write id is no longer held: record() would count it
    new, so the question answers False too."""
    store = make_store(max_attempts_per_hash=3)
    for n in range(10):
        store.record(HASH, attempt(n), now=FIXED_NOW, write_id=f"task-{n}:0")

    assert store.recorded_writes([(HASH, "task-0:0"), (HASH, "task-9:0")]) == [False, True]


def test_previous_version_data_takes_write_ids(make_legacy_store: LegacyFactory) -> None:
    """A hash written before write ids were kept: a write with an id is a hit, and its retry
    is recognised."""
    first = attempt(1)
    store = make_legacy_store({HASH: [first, attempt(2)]})

    recorded = store.record(HASH, attempt(3), now=FIXED_NOW, write_id="task-3:0")
    again = store.record(HASH, attempt(3), now=LATER, write_id="task-3:0")

    assert recorded == again == Recorded(cache="hit", first=first)
    assert again.replayed
    assert store.history(HASH).total_attempts == 3  # type: ignore[union-attr]


def untimed(record: ScoreRecord) -> ScoreRecord:
    return record.model_copy(update={"recorded_at": None})


def test_process_many_again_for_the_same_task_gives_the_same_records(
    store: ResultStore, message: Callable[..., AttributionResult]
) -> None:
    """The worker's path: one task's messages processed twice (a retry) give identical
    records and alert, the first still a miss, marked replayed, with nothing recorded twice;
    only recorded_at is the retry's (the store returns no time of the original write)."""
    delivery = Delivery(task_id="task-9")
    items = [
        (message(case_id="refund-001"), delivery),
        (message(case_id="refund-002"), delivery),
        (message(case_id="refund-003", supported_claim_ids=["refund-window"]), delivery),
    ]

    first = process_many(items, store=store, policy=None, clock=lambda: FIXED_NOW)
    again = process_many(items, store=store, policy=None, clock=lambda: LATER)

    assert [(untimed(p.record), p.alert) for p in again] == [
        (untimed(p.record), p.alert) for p in first
    ]
    assert [p.record.recorded_at for p in first] == [FIXED_NOW] * 3
    assert [p.record.recorded_at for p in again] == [LATER] * 3
    assert [p.record.cache for p in again] == ["miss", "hit", "conflict"]
    assert [(p.replayed, q.replayed) for p, q in zip(first, again, strict=True)] == [
        (False, True)
    ] * 3
    assert store.history(first[0].record.input_hash or "").total_attempts == 3  # type: ignore[union-attr]
    assert store.alert_count() == 1


def test_write_ids_are_task_id_and_position_in_the_task() -> None:
    """Each message's write id is its task ID and its position in the task's body, as the
    task gives it, else counted among that task's messages here."""
    deliveries = [
        Delivery(task_id="a"),
        Delivery(task_id="b"),
        Delivery(task_id="a", redelivered=True),
        Delivery(line=4),
        Delivery(task_id="c", position=3),  # positions 0-2 were rejected before scoring
        Delivery(task_id="c"),
    ]

    assert write_ids(deliveries) == ["a:0", "b:0", "a:1", None, "c:3", "c:4"]


# --- SQLite ----------------------------------------------------------------------------------


def test_sqlite_expired_outcome_forgets_its_write_ids(tmp_path: Path) -> None:
    """After the TTL, a retry of the old first write starts a new history as a new miss."""
    store = SQLiteStore(tmp_path / "s.sqlite3", ttl_seconds=60)
    try:
        store.record(HASH, attempt(1), now=FIXED_NOW, write_id="task-1:0")
        later = FIXED_NOW + timedelta(seconds=61)
        retry = attempt(1, recorded_at=later)

        recorded = store.record(HASH, retry, now=later, write_id="task-1:0")
        again = store.record(HASH, retry, now=later, write_id="task-1:0")

        assert recorded == again == Recorded(cache="miss", first=retry)
        assert (recorded.replayed, again.replayed) == (False, True)
        assert store.history(HASH).total_attempts == 1  # type: ignore[union-attr]
    finally:
        store.close()


def test_sqlite_expired_outcome_holds_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outcome past its TTL holds no write: its retry would start a new history."""
    store = SQLiteStore(tmp_path / "s.sqlite3", ttl_seconds=60)
    try:
        store.record(
            HASH, attempt(1), now=datetime.now(UTC) - timedelta(seconds=61), write_id="task-1:0"
        )

        assert store.recorded_writes([(HASH, "task-1:0")]) == [False]
    finally:
        store.close()


DRIFT_TABLES = ["contracts", "drifts", "conflicts_alerted", "case_hashes"]


@pytest.mark.parametrize(
    ("version", "tables"),
    [
        (1, ["writes", "ledger", *DRIFT_TABLES]),
        (2, ["ledger", *DRIFT_TABLES]),
        (3, DRIFT_TABLES),
        (4, ["case_hashes"]),
    ],
)
def test_sqlite_file_of_an_earlier_version_gains_the_tables_it_lacks(
    tmp_path: Path, version: int, tables: list[str]
) -> None:
    """A file of schema version 1 (no write ids), 2 (no publish ledger), 3 (no contract
    drift, no writes.drift) or 4 (no case index) is brought up to date on open; its outcomes
    take write ids from then on, their writes close entries, and its cases are indexed."""
    path = tmp_path / "s.sqlite3"
    first = attempt(1)
    SQLiteStore(path).record(HASH, first, now=FIXED_NOW)
    with sqlite3.connect(path) as db:
        for table in tables:
            db.execute(f"DROP TABLE {table}")
        if "writes" not in tables and version < 4:
            db.execute("ALTER TABLE writes DROP COLUMN drift")
        db.execute(f"PRAGMA user_version = {version}")

    store = SQLiteStore(path)
    try:
        recorded = store.record(HASH, attempt(2), now=FIXED_NOW, write_id="task-2:0")
        again = store.record(HASH, attempt(2), now=LATER, write_id="task-2:0")

        assert recorded == again == Recorded(cache="hit", first=first)
        assert again.replayed
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
            assert db.execute("SELECT COUNT(*) FROM ledger").fetchone() == (0,)
        assert store.hashes_for_case(first.case_id or "") == [HASH]
    finally:
        store.close()


# --- Redis -----------------------------------------------------------------------------------


class OneRoundTrip:
    """A Redis client that allows one pipeline of EVALSHA calls and nothing after it."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.commands: list[str] = []

    def pipeline(self, **options: Any) -> Any:
        if self.commands:
            raise AssertionError("a second round trip")
        pipe = self._client.pipeline(**options)
        execute = pipe.execute

        def counted(**arguments: Any) -> Any:
            self.commands += [str(command[0][0]) for command in pipe.command_stack]
            return execute(**arguments)

        pipe.execute = counted  # type: ignore[method-assign, assignment]
        return pipe

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a second round trip: {name}")


def test_redis_conflict_alert_is_written_by_the_script_call(make_redis_store: StoreFactory) -> None:
    """A batch with a conflict is one pipeline of one EVALSHA, and the alert is then in the
    stream, readable as the same Alert."""
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    store.record(HASH, attempt(1), now=FIXED_NOW)  # loads the script
    client = store.client
    counting = OneRoundTrip(client)
    store.client = counting  # type: ignore[assignment]

    (recorded,) = store.record_many([(HASH, attempt(2, value=0.5))], now=FIXED_NOW)

    store.client = client
    assert counting.commands == ["EVALSHA"]
    assert store.client.xlen(alerts_key(store.prefix)) == 1
    assert recorded.alert is not None
    assert store.alerts() == [recorded.alert]


def test_redis_alert_entries_of_the_previous_version_still_read(
    make_redis_store: StoreFactory,
) -> None:
    """An alert appended by the client as before (the same `alert` field) lists beside one
    the script wrote, oldest first."""
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    old = Alert(
        input_hash=THIRD_HASH, first=attempt(1), observed=attempt(2, value=0.1), raised_at=FIXED_NOW
    )
    store.client.xadd(alerts_key(store.prefix), {"alert": old.model_dump_json()})
    store.record(HASH, attempt(1), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=0.5), now=LATER)

    assert store.alerts() == [old, recorded.alert]


def test_redis_write_ids_stay_within_two_bounds_per_hash(make_redis_store: StoreFactory) -> None:
    """Hash fields for write ids never exceed two generations of the attempt bound."""
    store = make_redis_store(max_attempts_per_hash=3)
    assert isinstance(store, RedisStore)

    for n in range(20):
        store.record(HASH, attempt(n), now=FIXED_NOW, write_id=f"task-{n}:0")

    keys = cast("list[bytes]", store.client.hkeys(outcome_key(store.prefix, HASH)))
    fields = {key.decode() for key in keys}
    writes = sorted(field for field in fields if field.startswith(("w0:", "w1:")))
    assert fields - set(writes) == {"outcome", "first", "shared", "total", "since"}
    assert writes == [
        "w0:task-18:0",
        "w0:task-19:0",
        "w1:task-15:0",
        "w1:task-16:0",
        "w1:task-17:0",
    ]


class ReplyDroppingProxy:
    """A TCP proxy to Redis that, once armed, forwards each script call but closes the client's
    connection when the reply comes back, instead of relaying it: the call ran, and the
    client never hears so."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.armed = threading.Event()
        self.dropped = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += (client, server)
            awaiting: list[bool] = [False]  # a script call was forwarded on this connection
            threading.Thread(
                target=self._pump, args=(client, server, awaiting, True), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, awaiting, False), daemon=True
            ).start()

    def _pump(
        self, source: socket.socket, target: socket.socket, awaiting: list[bool], upward: bool
    ) -> None:
        try:
            while data := source.recv(65536):
                if upward and self.armed.is_set() and b"EVALSHA" in data.upper():
                    awaiting[0] = True
                elif not upward and awaiting[0]:
                    self.dropped += 1
                    break
                target.sendall(data)
        except OSError:
            pass
        for each in (source, target):
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()

    def close(self) -> None:
        self._listener.close()
        for each in self._sockets:
            with contextlib.suppress(OSError):
                each.close()


@pytest.fixture
def proxy(redis_url: str) -> Iterator[ReplyDroppingProxy]:
    opened = ReplyDroppingProxy(("127.0.0.1", REDIS_PORT))
    yield opened
    opened.close()


def test_redis_retry_after_a_lost_reply_returns_the_original_results(
    proxy: ReplyDroppingProxy, redis_url: str, key_prefix: str
) -> None:
    """The script ran but its reply was lost (the connection dropped): the store raises
    TransientError; the retry, over a fresh connection, gets the original results, and the
    store holds each attempt and the alert once, however often the call was re-sent."""
    db = redis_url.rsplit("/", 1)[1]
    items = batch()
    direct = RedisStore.from_url(redis_url, prefix=key_prefix)
    lossy = RedisStore.from_url(f"redis://127.0.0.1:{proxy.port}/{db}", prefix=key_prefix)
    try:
        lossy.record(THIRD_HASH, attempt(9), now=FIXED_NOW)  # connected, the script loaded
        expected = [
            Recorded(cache="miss", first=items[0][1]),
            Recorded(cache="hit", first=items[0][1]),
            Recorded(
                cache="conflict",
                first=items[0][1],
                alert=Alert(
                    input_hash=HASH, first=items[0][1], observed=items[2][1], raised_at=FIXED_NOW
                ),
            ),
            Recorded(cache="miss", first=items[3][1]),
        ]
        proxy.armed.set()

        with pytest.raises(TransientError):
            lossy.record_many(items, now=FIXED_NOW, write_ids=IDS)

        assert proxy.dropped >= 1
        assert counts(direct) == ([3, 1], [3, 1], 1)  # the script ran
        proxy.armed.clear()
        fresh = RedisStore.from_url(f"redis://127.0.0.1:{proxy.port}/{db}", prefix=key_prefix)
        try:
            again = fresh.record_many(retried(items), now=LATER, write_ids=IDS)
        finally:
            fresh.close()
        assert again == expected
        assert [r.replayed for r in again] == [True] * 4
        assert counts(direct) == ([3, 1], [3, 1], 1)
        assert direct.alerts() == [expected[2].alert]
    finally:
        lossy.close()
        direct.close()
