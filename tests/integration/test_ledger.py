"""The publish ledger over every store kind: noted entries stay open until the record (or
dead letter) of their write id closes them, in the same call; reconcile reads the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest

from tests.conftest import FIXED_NOW
from tests.factories import age_ledger, publisher_clock
from tests.factories import ledger_entry as entry
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, OTHER_HASH, StoreFactory, attempt
from worker.stores import DeadLetter, ResultStore
from worker.stores.redis.keys import ledger_key, ledger_task_key
from worker.stores.redis.redis_ledger import LEDGER_PAGE
from worker.stores.redis.redis_store import RedisStore

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

    read = list(store.unrecorded(published_before=FUTURE))
    assert [entry.model_copy(update={"noted_at": None}) for entry in read] == noted
    assert all(entry.noted_at is not None for entry in read)  # by the store's clock
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


def test_only_entries_noted_before_the_cutoff_are_unrecorded(store: ResultStore) -> None:
    """Ages are the store's: noted 20 and 1 minutes ago by its clock, whatever the entries'
    publish times say."""
    store.note_published([entry("old", age=timedelta(minutes=-30))])  # published "later"
    age_ledger(store, timedelta(minutes=19))
    store.note_published([entry("new", age=timedelta(hours=3))])  # published "earlier"
    age_ledger(store, timedelta(minutes=1))

    ten_minutes_ago = store.ledger_now() - timedelta(minutes=10)
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
    store.note_published([entry("expired")])
    age_ledger(store, timedelta(minutes=2))
    store.note_published([entry("live", age=timedelta(minutes=2))])  # its publish time: no matter

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

    # Each once; a cluster's shards are noted one after the other, so read in that order.
    assert sorted(seen) == [f"t{n:05d}:0" for n in range(count)]
    assert len(set(seen)) == len(seen)
    assert open_ids(store) == []


LOST = 500


def test_a_publisher_25_hours_ahead_makes_the_store_forget_no_entry(
    store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's repro: 500 lost messages open for 20 minutes, then a publisher whose clock
    ran 25 h ahead (past the 24 h time to live) notes 10. Trimmed by the publisher's clock,
    the 500 were forgotten and reconcile listed 0; by the store's, all 500 are still listed
    (the 10 are too new to count), and so by that publisher's own reconcile."""
    lost = [entry(f"lost-{n:03d}") for n in range(LOST)]
    store.note_published(lost)
    age_ledger(store, timedelta(minutes=20))

    ahead = publisher_clock(monkeypatch, timedelta(hours=25))
    store.note_published([entry(f"ahead-{n}", published_at=ahead) for n in range(10)])
    before = store.ledger_now() - timedelta(minutes=10)

    assert store.count_unrecorded(published_before=before) == LOST
    assert sorted(open_ids(store, before)) == [e.write_id for e in lost]
    assert store.count_unrecorded(published_before=store.ledger_now()) == LOST + 10


def test_a_publisher_2_hours_behind_makes_no_waiting_message_look_lost(
    store: ResultStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 messages from a publisher whose clock is 2 h behind, just noted: none is older
    than 10 minutes (the publish times said 2 h); 11 minutes on, by the store's clock, all are."""
    behind = publisher_clock(monkeypatch, timedelta(hours=-2))
    noted = [entry(f"behind-{n:03d}", published_at=behind) for n in range(100)]
    store.note_published(noted)

    assert store.count_unrecorded(published_before=store.ledger_now() - timedelta(minutes=10)) == 0
    age_ledger(store, timedelta(minutes=11))
    before = store.ledger_now() - timedelta(minutes=10)
    assert store.count_unrecorded(published_before=before) == 100
    assert sorted(open_ids(store, before)) == [e.write_id for e in noted]


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
