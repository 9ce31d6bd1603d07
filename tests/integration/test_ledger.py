"""The publish ledger over every store kind: noted entries stay open until the record (or
dead letter) of their write id closes them, in the same call; reconcile reads the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest

from tests.conftest import FIXED_NOW
from tests.factories import ledger_entry as entry
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, OTHER_HASH, StoreFactory, attempt
from worker.stores import DeadLetter, ResultStore
from worker.stores.keys import ledger_key, ledger_task_key
from worker.stores.redis import RedisStore
from worker.stores.redis_ledger import LEDGER_PAGE

make_store = suite.make_store
make_redis_store = suite.make_redis_store
store = suite.store

NOW = datetime.now(UTC)
FUTURE = NOW + timedelta(hours=1)


def open_ids(store: ResultStore, before: datetime = FUTURE) -> list[str]:
    return [e.write_id for e in store.unrecorded(published_before=before)]


def test_entries_stay_open_until_their_write_ids_are_recorded(store: ResultStore) -> None:
    noted = [entry("t1", 0), entry("t1", 1), entry("t2", 0), entry("t3", 0)]
    store.note_published(noted)

    assert list(store.unrecorded(published_before=FUTURE)) == noted
    store.record(HASH, attempt(1), now=FIXED_NOW, write_id="t1:1")
    store.record_many(
        [(HASH, attempt(2)), (OTHER_HASH, attempt(3))],
        now=FIXED_NOW,
        write_ids=["t3:0", None],  # no write id closes nothing
    )

    assert open_ids(store) == ["t1:0", "t2:0"]
    assert store.count_unrecorded(published_before=FUTURE) == 2


def test_a_replayed_write_closes_its_entry_too(store: ResultStore) -> None:
    """A write recorded before its entry was (re)noted, say by a republish racing a slow
    original: the replay under the same id closes what is open."""
    store.record(HASH, attempt(1), now=FIXED_NOW, write_id="t1:0")
    store.note_published([entry("t1", 0)])

    replay = store.record(HASH, attempt(1), now=FIXED_NOW, write_id="t1:0")

    assert replay.replayed
    assert open_ids(store) == []


def test_only_entries_published_before_the_cutoff_are_unrecorded(store: ResultStore) -> None:
    store.note_published(
        [entry("old", age=timedelta(minutes=20)), entry("new", age=timedelta(minutes=1))]
    )

    ten_minutes_ago = NOW - timedelta(minutes=10)
    assert open_ids(store, ten_minutes_ago) == ["old:0"]
    assert store.count_unrecorded(published_before=ten_minutes_ago) == 1
    assert open_ids(store) == ["old:0", "new:0"]  # oldest first


def test_a_dead_letter_closes_its_message_s_entry_or_its_whole_task_s(
    store: ResultStore,
) -> None:
    store.note_published([entry("batch", 0), entry("batch", 1), entry("blob", 0), entry("blob", 1)])

    store.dead_letter(
        DeadLetter(received_at=FIXED_NOW, error="schema", body="{}", task_id="batch", position=1),
        # a transport body the consumer refused: it stands for its whole task
        DeadLetter(received_at=FIXED_NOW, error="oversize", body="...", task_id="blob"),
        DeadLetter(received_at=FIXED_NOW, error="foreign", body="x"),  # no task: closes nothing
    )

    assert open_ids(store) == ["batch:0"]


def test_close_entries_closes_exactly_those(store: ResultStore) -> None:
    store.note_published([entry("a"), entry("b"), entry("c")])

    store.close_entries(["a:0", "c:0", "never-noted:0"])

    assert open_ids(store) == ["b:0"]


def test_entries_past_the_time_to_live_are_forgotten(make_store: StoreFactory) -> None:
    store = make_store(ledger_ttl_seconds=60)
    store.note_published([entry("expired", age=timedelta(minutes=2)), entry("live")])

    assert open_ids(store) == ["live:0"]
    assert store.count_unrecorded(published_before=FUTURE) == 1


def test_a_time_to_live_of_zero_keeps_no_ledger(make_store: StoreFactory) -> None:
    store = make_store(ledger_ttl_seconds=0)
    store.note_published([entry("a")])

    assert open_ids(store) == []


def test_pages_of_entries_published_in_one_millisecond_are_each_read_once(
    store: ResultStore,
) -> None:
    """More entries than a page share one publish time: paging by time must neither repeat
    nor skip any."""
    count = LEDGER_PAGE * 2 + 345
    store.note_published([entry(f"t{n:05d}") for n in range(count)])

    ids = open_ids(store)

    assert sorted(ids) == [f"t{n:05d}:0" for n in range(count)]


def test_entries_closed_while_they_are_read_do_not_shift_the_rest(store: ResultStore) -> None:
    """reconcile --republish closes each page's entries as it goes."""
    count = LEDGER_PAGE + 500
    store.note_published(
        [entry(f"t{n:05d}", age=timedelta(milliseconds=count - n)) for n in range(count)]
    )
    seen = []
    entries = store.unrecorded(published_before=FUTURE)
    while page := list(islice(entries, 300)):
        seen += [e.write_id for e in page]
        store.close_entries([e.write_id for e in page])

    assert seen == [f"t{n:05d}:0" for n in range(count)]
    assert open_ids(store) == []


def test_redis_entry_and_its_index_go_in_the_record_call(make_redis_store: StoreFactory) -> None:
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    store.note_published([entry("t1", 0), entry("t1", 1)])
    task_key = ledger_task_key(store.prefix, "t1")
    assert sorted(store.client.hkeys(task_key)) == [b"0", b"1"]  # a hash has no order
    assert 0 < store.client.ttl(task_key) <= 86_400

    store.record(HASH, attempt(1), now=FIXED_NOW, write_id="t1:0")
    assert store.client.hkeys(task_key) == [b"1"]
    store.record(HASH, attempt(1), now=FIXED_NOW, write_id="t1:1")

    assert store.client.exists(task_key) == 0  # Redis drops an empty hash
    assert store.client.zcard(ledger_key(store.prefix)) == 0


def test_redis_entry_whose_task_hash_expired_is_forgotten_when_read(
    make_redis_store: StoreFactory,
) -> None:
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    store.note_published([entry("gone"), entry("kept")])
    store.client.delete(ledger_task_key(store.prefix, "gone"))

    assert open_ids(store) == ["kept:0"]
    assert store.client.zrange(ledger_key(store.prefix), 0, -1) == [b"kept:0"]


@pytest.mark.parametrize("position", [0, 7])
def test_redis_dead_letter_of_one_message_leaves_its_task_s_others(
    make_redis_store: StoreFactory, position: int
) -> None:
    store = make_redis_store()
    store.note_published([entry("t", n) for n in range(8)])

    store.dead_letter(
        DeadLetter(received_at=FIXED_NOW, error="e", body="{}", task_id="t", position=position)
    )

    assert open_ids(store) == [f"t:{n}" for n in range(8) if n != position]
