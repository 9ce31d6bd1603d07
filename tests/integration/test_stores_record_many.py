"""Every ResultStore's record_many: a batch gives what recording its attempts one by one
gives, in order, within one script call or across several, bounds included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from contracts import Alert, Attempt
from tests.conftest import FIXED_NOW
from tests.factories import ledger_entry
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, OTHER_HASH, TWO_THIRDS, StoreFactory, attempt
from worker.stores import DeadLetter, History, Recorded, ResultStore
from worker.stores.redis.redis_store import RedisStore

# The store suite's fixtures: every store kind (SQLite, fakeredis, real Redis) in turn.
make_store = suite.make_store
make_redis_store = suite.make_redis_store
store = suite.store


def test_record_many_same_new_hash_is_miss_then_hit(store: ResultStore) -> None:
    """Two equal attempts under one new hash in one batch: the first a miss, the second a hit."""
    first, second = attempt(1), attempt(2)

    results = store.record_many([(HASH, first), (HASH, second)], now=FIXED_NOW)

    assert results == [Recorded(cache="miss", first=first), Recorded(cache="hit", first=first)]


def test_record_many_same_new_hash_is_miss_then_conflict(store: ResultStore) -> None:
    """Two different attempts under one new hash in one batch: a miss, then a conflict."""
    first, second = attempt(1), attempt(2, value=0.5)

    results = store.record_many([(HASH, first), (HASH, second)], now=FIXED_NOW)

    alert = Alert(input_hash=HASH, first=first, observed=second, raised_at=FIXED_NOW)
    assert results == [
        Recorded(cache="miss", first=first),
        Recorded(cache="conflict", first=first, alert=alert),
    ]
    assert store.alerts() == [alert]


def test_record_many_beyond_one_script_call_is_one_by_one(store: ResultStore) -> None:
    """450 attempts over 150 hashes (more than one Redis script call holds), repeats and
    changed outcomes interleaved: each result is what recording it alone, in turn, gives."""
    hashes = [f"{n:064x}" for n in range(150)]
    items = [
        (hashes[(n * 7) % 150], attempt(n, value=0.5 if n % 11 == 0 else TWO_THIRDS))
        for n in range(450)
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

    assert store.record_many(items, now=FIXED_NOW) == expected
    assert [store.history(h).total_attempts for h in hashes] == [3] * 150  # type: ignore[union-attr]


def test_record_many_after_script_flush_records_each_attempt_once(
    make_redis_store: StoreFactory,
) -> None:
    """Redis forgot the script (SCRIPT FLUSH, a restart): it is loaded again and each attempt
    recorded exactly once; the batch's letter, which went in the first pipeline, does not go
    again."""
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    store.client.script_flush()

    results = store.record_many(
        [(HASH, attempt(1)), (OTHER_HASH, attempt(2))], now=FIXED_NOW, letters=[letter(1)]
    )

    assert [result.cache for result in results] == ["miss", "miss"]
    assert [store.history(h).total_attempts for h in (HASH, OTHER_HASH)] == [1, 1]  # type: ignore[union-attr]
    assert kept(store) == [("task-9", 1, letter(1).error)]


def test_record_many_keeps_each_message_in_order(store: ResultStore) -> None:
    """A batch over several hashes returns one result per item, in the items' order."""
    store.record(HASH, attempt(1), now=FIXED_NOW)
    items = [
        (OTHER_HASH, attempt(2)),
        (HASH, attempt(3, value=0.5)),
        (HASH, attempt(4)),
        (OTHER_HASH, attempt(5)),
    ]

    results = store.record_many(items, now=FIXED_NOW)

    assert [r.cache for r in results] == ["miss", "conflict", "hit", "hit"]
    assert [r.first.case_id for r in results] == [
        "refund-002",
        "refund-001",
        "refund-001",
        "refund-002",
    ]


def test_record_many_history_matches_sequential_records(store: ResultStore) -> None:
    """A batch stores every attempt in order, as the same records one by one would."""
    attempts = [attempt(1), attempt(2, value=0.5), attempt(3)]

    store.record_many([(HASH, each) for each in attempts], now=FIXED_NOW)

    assert store.history(HASH) == History(
        input_hash=HASH, first=attempts[0], attempts=attempts, total_attempts=3
    )


def test_record_many_of_nothing_is_empty(store: ResultStore) -> None:
    """An empty batch records nothing and returns nothing."""
    assert store.record_many([], now=FIXED_NOW) == []


def test_record_many_trims_to_the_bound_within_and_across_batches(
    make_store: StoreFactory,
) -> None:
    """With a bound of 3, a batch of 5 attempts keeps the newest 3; another batch, its 3."""
    store = make_store(max_attempts_per_hash=3)
    attempts = [attempt(n) for n in range(1, 9)]

    store.record_many([(HASH, each) for each in attempts[:5]], now=FIXED_NOW)
    after_one = store.history(HASH)
    store.record_many([(HASH, each) for each in attempts[5:]], now=FIXED_NOW)

    assert after_one is not None
    assert (after_one.attempts, after_one.total_attempts) == (attempts[2:5], 5)
    assert store.history(HASH) == History(
        input_hash=HASH, first=attempts[0], attempts=attempts[5:], total_attempts=8
    )


# --- a batch's dead letters, in the same call ------------------------------------------------

NOW_LETTERS = datetime.now(UTC) + timedelta(hours=1)  # after every entry's noted_at


def letter(position: int, error: str = "schema: answer: Field required") -> DeadLetter:
    return DeadLetter(
        received_at=FIXED_NOW, error=error, body="{}", task_id="task-9", position=position
    )


def kept(store: ResultStore) -> list[tuple[str | None, int | None, str]]:
    """The letters a store keeps, as (task, position, error): it adds the body's digest."""
    return [(one.task_id, one.position, one.error) for one in store.dead_letters()]


def test_record_many_keeps_its_letters_and_closes_their_entries(store: ResultStore) -> None:
    """A task of four messages, two rejected: one call keeps both letters (oldest first) and
    closes all four ledger entries, and records the other two as it would without them."""
    store.note_published([ledger_entry("task-9", position) for position in range(4)])
    letters = [letter(1), letter(3, "message is 9 bytes, over the 8-byte limit")]

    results = store.record_many(
        [(HASH, attempt(1)), (OTHER_HASH, attempt(2))],
        now=FIXED_NOW,
        write_ids=["task-9:0", "task-9:2"],
        letters=letters,
    )

    assert [r.cache for r in results] == ["miss", "miss"]
    assert kept(store) == [(one.task_id, one.position, one.error) for one in letters]
    assert list(store.unrecorded(published_before=NOW_LETTERS)) == []


def test_record_many_of_letters_alone_keeps_them(store: ResultStore) -> None:
    """A task whose messages were all rejected: nothing to record, its letters still kept."""
    store.note_published([ledger_entry("task-9", 0)])

    assert store.record_many([], now=FIXED_NOW, letters=[letter(0)]) == []

    assert kept(store) == [("task-9", 0, letter(0).error)]
    assert list(store.unrecorded(published_before=NOW_LETTERS)) == []


def test_record_many_sends_its_letters_in_the_records_round_trip(
    make_redis_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On one Redis the letters and the scripts go in one pipeline: one execute in all."""
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    store.record(OTHER_HASH, attempt(2), now=FIXED_NOW)  # the script is loaded: no NOSCRIPT
    executed = []
    pipeline = store.client.pipeline

    def counting(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        execute = pipe.execute

        def run(*a: Any, **k: Any) -> Any:
            executed.append(len(pipe.command_stack))
            return execute(*a, **k)

        pipe.execute = run  # type: ignore[method-assign]
        return pipe

    monkeypatch.setattr(store.client, "pipeline", counting)

    store.record_many(
        [(HASH, attempt(1))], now=FIXED_NOW, write_ids=["task-9:0"], letters=[letter(1)]
    )

    # the letter's XADD and its entry's close, then the record script
    assert executed == [3]
    assert kept(store) == [("task-9", 1, letter(1).error)]
