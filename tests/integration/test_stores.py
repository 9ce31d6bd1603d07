"""One suite over every ResultStore: SQLite, Redis through fakeredis, and a real Redis server."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from contracts import Alert, Attempt
from tests import factories
from tests.conftest import FIXED_NOW
from worker.errors import ConfigurationError, TransientError
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.settings import DEAD_LETTER_MAX_BYTES, Settings
from worker.stores import DeadLetter, History, Recorded, ResultStore, open_store
from worker.stores.keys import attempts_key, outcome_key
from worker.stores.redis import RedisStore
from worker.stores.sqlite import SCHEMA_VERSION, SQLiteStore
from worker.stores.sqlite_transaction import immediate

HASH = "a" * 64
OTHER_HASH = "b" * 64
TWO_THIRDS = 2 / 3
TWO_THIRDS_REASON = "supported=2; required=3; missing=refund-method"
ONE_THIRD_REASON = "supported=1; required=3; missing=refund-method,support-channel"
UNKNOWN_REASON = (
    "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: old-c1"
)

StoreFactory = Callable[..., ResultStore]


def attempt(
    n: int = 1,
    *,
    value: float | None = TWO_THIRDS,
    reason: str = TWO_THIRDS_REASON,
    recorded_at: datetime = FIXED_NOW,
) -> Attempt:
    """Attempt number n: its own case and task IDs, the given outcome."""
    return factories.attempt(
        case_id=f"refund-{n:03d}",
        task_id=f"task-{n}",
        value=value,
        reason=reason,
        recorded_at=recorded_at,
        worker_version="0.1.0",
    )


def build_store(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, **options: Any
) -> ResultStore:
    """A fresh, empty store of one kind; Redis kinds get a prefix of their own."""
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "s.sqlite3", **options)
    if kind == "fakeredis":
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        return RedisStore(client, prefix="test-fake", **options)
    redis_url = request.getfixturevalue("redis_url")
    key_prefix = request.getfixturevalue("key_prefix")
    return RedisStore.from_url(redis_url, prefix=key_prefix, **options)


@contextlib.contextmanager
def store_factory(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[StoreFactory]:
    """Build stores of one kind with options; close every one of them afterwards."""
    opened: list[ResultStore] = []

    def make(**options: Any) -> ResultStore:
        store = build_store(kind, request, tmp_path, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture(params=["sqlite", "fakeredis", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Every store kind in turn, built with keyword options (max_attempts_per_hash, ttl...)."""
    with store_factory(request.param, request, tmp_path) as make:
        yield make


@pytest.fixture(params=["fakeredis", "redis"])
def make_redis_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """The Redis-backed store kinds only, for checks on Redis keys."""
    with store_factory(request.param, request, tmp_path) as make:
        yield make


@pytest.fixture
def store(make_store: StoreFactory) -> ResultStore:
    """A store of the current kind with default options."""
    return make_store()


# --- record: miss, hit, conflict -------------------------------------------------------------


def test_first_record_of_a_hash_is_a_miss_with_itself_as_first(store: ResultStore) -> None:
    """The first attempt under a hash is a miss and is the canonical first attempt."""
    first = attempt(1)

    assert store.record(HASH, first, now=FIXED_NOW) == Recorded(cache="miss", first=first)


def test_same_outcome_again_is_a_hit_returning_the_original_first(store: ResultStore) -> None:
    """A later attempt with the same (value, reason) is a hit whose first is the original."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)
    assert recorded.first.case_id == "refund-001"
    assert recorded.first.task_id == "task-1"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        pytest.param(0.5, TWO_THIRDS_REASON, id="value-only"),
        pytest.param(TWO_THIRDS, "supported=2; required=3; missing=other", id="reason-only"),
        pytest.param(1 / 3, ONE_THIRD_REASON, id="both"),
    ],
)
def test_different_outcome_is_a_conflict_with_a_kept_first_alert(
    store: ResultStore, value: float, reason: str
) -> None:
    """A different value or a different reason alone is a conflict naming both attempts."""
    first = attempt(1)
    observed = attempt(2, value=value, reason=reason)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, observed, now=FIXED_NOW + timedelta(seconds=5))

    alert = Alert(
        input_hash=HASH,
        decision="kept_first",
        first=first,
        observed=observed,
        raised_at=FIXED_NOW + timedelta(seconds=5),
    )
    assert recorded == Recorded(cache="conflict", first=first, alert=alert)


def test_conflict_alert_is_listed_by_alerts(store: ResultStore) -> None:
    """The alert a conflict returns is the one alerts() lists afterwards."""
    store.record(HASH, attempt(1), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=0.5), now=FIXED_NOW)

    assert store.alerts() == [recorded.alert]


def test_hit_raises_no_alert(store: ResultStore) -> None:
    """A confirmation carries no alert and adds none to the alert stream."""
    store.record(HASH, attempt(1), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2), now=FIXED_NOW)

    assert recorded.alert is None
    assert store.alerts() == []


def test_attempt_equal_to_first_after_a_conflict_is_a_hit(store: ResultStore) -> None:
    """A conflict never replaces the first: a third attempt equal to the first is a hit."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW)
    store.record(HASH, attempt(2, value=0.5), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(3), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)


def test_attempt_equal_to_the_conflicting_one_is_another_conflict(store: ResultStore) -> None:
    """Agreeing with an earlier conflicting attempt is still a conflict with the first, and
    the same conflict is not alerted twice."""
    first = attempt(1)
    store.record(HASH, first, now=FIXED_NOW)
    store.record(HASH, attempt(2, value=0.5), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(3, value=0.5), now=FIXED_NOW)

    assert recorded.cache == "conflict"
    assert recorded.first == first
    assert recorded.alert is None
    assert len(store.alerts()) == 1


def test_outcomes_of_different_hashes_are_independent(store: ResultStore) -> None:
    """A different outcome under another hash is a miss there, not a conflict."""
    store.record(HASH, attempt(1), now=FIXED_NOW)

    recorded = store.record(OTHER_HASH, attempt(2, value=0.5), now=FIXED_NOW)

    assert recorded.cache == "miss"
    assert store.alerts() == []


# --- outcomes compare exactly --------------------------------------------------------------


def test_invalid_outcomes_with_the_same_reason_are_a_hit(store: ResultStore) -> None:
    """Two invalid rows (value None) with the same reason agree like any outcome."""
    first = attempt(1, value=None, reason=UNKNOWN_REASON)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=None, reason=UNKNOWN_REASON), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)


@pytest.mark.parametrize(
    ("first_value", "later_value"),
    [pytest.param(None, 0.0, id="none-then-zero"), pytest.param(0.0, None, id="zero-then-none")],
)
def test_none_and_zero_are_never_equal(
    store: ResultStore, first_value: float | None, later_value: float | None
) -> None:
    """An invalid row (None) and a zero score with the same reason are a conflict."""
    store.record(HASH, attempt(1, value=first_value, reason="same"), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=later_value, reason="same"), now=FIXED_NOW)

    assert recorded.cache == "conflict"
    assert recorded.first.value == first_value


def test_invalid_outcomes_with_different_reasons_are_a_conflict(store: ResultStore) -> None:
    """Two invalid rows for different reasons disagree."""
    store.record(HASH, attempt(1, value=None, reason=UNKNOWN_REASON), now=FIXED_NOW)

    recorded = store.record(
        HASH, attempt(2, value=None, reason="required_claim_ids must not be empty"), now=FIXED_NOW
    )

    assert recorded.cache == "conflict"


def test_float_values_round_trip_exactly(store: ResultStore) -> None:
    """A value like 2/3 comes back bit-for-bit from history and the next attempt's first."""
    store.record(HASH, attempt(1, value=2 / 3), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=2 / 3), now=FIXED_NOW)
    history = store.history(HASH)

    assert recorded.cache == "hit"
    assert recorded.first.value == 2 / 3
    assert history is not None
    assert [a.value for a in history.attempts] == [2 / 3, 2 / 3]
    assert history.first.value == 2 / 3


def test_floats_one_bit_apart_are_a_conflict(store: ResultStore) -> None:
    """Outcomes compare exactly: the next float after 2/3 is a different value."""
    store.record(HASH, attempt(1, value=2 / 3), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=0.6666666666666667), now=FIXED_NOW)

    assert 0.6666666666666667 != 2 / 3
    assert recorded.cache == "conflict"


def test_non_ascii_reasons_compare_and_round_trip(store: ResultStore) -> None:
    """A reason with non-ASCII text is stored verbatim and confirms itself."""
    reason = "supported=1; required=2; missing=réf-ünïcode"
    first = attempt(1, value=0.5, reason=reason)
    store.record(HASH, first, now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=0.5, reason=reason), now=FIXED_NOW)

    assert recorded == Recorded(cache="hit", first=first)


# --- history ---------------------------------------------------------------------------------


def test_history_returns_first_attempts_in_order_and_total(store: ResultStore) -> None:
    """history() gives the first attempt, every attempt oldest first, and the count."""
    attempts = [attempt(1), attempt(2), attempt(3, value=0.5), attempt(4)]
    for each in attempts:
        store.record(HASH, each, now=FIXED_NOW)

    assert store.history(HASH) == History(
        input_hash=HASH, first=attempts[0], attempts=attempts, total_attempts=4, expires_at=None
    )


def test_history_of_unknown_hash_is_none(store: ResultStore) -> None:
    """A hash never recorded has no history."""
    store.record(HASH, attempt(1), now=FIXED_NOW)

    assert store.history(OTHER_HASH) is None


def test_attempts_are_bounded_to_the_newest(make_store: StoreFactory) -> None:
    """With a bound of 3, five attempts keep the newest 3, count 5, and the original first."""
    store = make_store(max_attempts_per_hash=3)
    attempts = [attempt(n) for n in range(1, 6)]
    for each in attempts:
        store.record(HASH, each, now=FIXED_NOW)

    history = store.history(HASH)

    assert history is not None
    assert history.attempts == attempts[2:]
    assert history.total_attempts == 5
    assert history.first == attempts[0]


def test_bound_does_not_change_cache_outcomes(make_store: StoreFactory) -> None:
    """After the first attempt is trimmed from the list, a new attempt still compares to it."""
    store = make_store(max_attempts_per_hash=3)
    first = attempt(1)
    for n in range(1, 6):
        store.record(HASH, attempt(n, value=0.5) if n > 1 else first, now=FIXED_NOW)

    assert store.record(HASH, attempt(6), now=FIXED_NOW) == Recorded(cache="hit", first=first)


# --- alerts and dead letters -----------------------------------------------------------------


def conflict(store: ResultStore, n: int) -> Alert:
    """Record a conflict on a hash of its own and return its alert."""
    input_hash = f"{n:064x}"
    store.record(input_hash, attempt(n), now=FIXED_NOW)
    recorded = store.record(input_hash, attempt(n + 100, value=0.5), now=FIXED_NOW)
    assert recorded.alert is not None
    return recorded.alert


def test_alerts_are_listed_oldest_first(store: ResultStore) -> None:
    """alerts() lists every alert in the order the conflicts happened."""
    alerts = [conflict(store, n) for n in range(1, 5)]

    assert store.alerts() == alerts


def test_alerts_limit_keeps_the_newest(store: ResultStore) -> None:
    """alerts(limit=N) gives the newest N alerts, still oldest first."""
    alerts = [conflict(store, n) for n in range(1, 6)]

    assert store.alerts(limit=2) == alerts[3:]


def test_alert_count_counts_every_kept_alert(store: ResultStore) -> None:
    """alert_count() is how many alerts are kept, whatever limit alerts() is given."""
    assert store.alert_count() == 0
    for n in range(1, 4):
        conflict(store, n)

    assert store.alert_count() == 3


@pytest.mark.parametrize("limit", [0, -1])
def test_alerts_limit_below_one_is_empty(store: ResultStore, limit: int) -> None:
    """alerts(limit=0) or a negative limit lists nothing, on every store alike."""
    conflict(store, 1)

    assert store.alerts(limit=limit) == []


@pytest.mark.parametrize("limit", [0, -1])
def test_dead_letters_limit_below_one_is_empty(store: ResultStore, limit: int) -> None:
    """dead_letters(limit=0) or a negative limit lists nothing, on every store alike."""
    store.dead_letter(letter(1))

    assert store.dead_letters(limit=limit) == []


def test_no_alerts_is_an_empty_list(store: ResultStore) -> None:
    """A store without conflicts lists no alerts."""
    assert store.alerts() == []


def letter(n: int) -> DeadLetter:
    return DeadLetter(
        received_at=FIXED_NOW + timedelta(seconds=n),
        error="schema: bogus: Extra inputs are not permitted",
        body=f'{{"case_id": "junk-{n}", "bogus": "é"}}',
        task_id=f"task-{n}" if n % 2 else None,
    )


def test_dead_letters_round_trip(store: ResultStore) -> None:
    """dead_letters() returns every stored letter, with its body's digest and size, oldest
    first."""
    letters = [letter(n) for n in range(1, 4)]
    for each in letters:
        store.dead_letter(each)

    assert store.dead_letters() == [each.bounded(DEAD_LETTER_MAX_BYTES) for each in letters]


def test_dead_letters_given_at_once_are_kept_in_order_after_earlier_ones(
    store: ResultStore,
) -> None:
    """dead_letter(a, b, c) (one round trip for a batch's rejects) appends like three calls."""
    letters = [letter(n) for n in range(1, 5)]
    store.dead_letter(letters[0])
    store.dead_letter(*letters[1:])
    store.dead_letter()

    assert store.dead_letters() == [each.bounded(DEAD_LETTER_MAX_BYTES) for each in letters]


def test_dead_letters_limit_keeps_the_newest(store: ResultStore) -> None:
    """dead_letters(limit=N) gives the newest N letters, still oldest first."""
    letters = [letter(n) for n in range(1, 6)]
    for each in letters:
        store.dead_letter(each)

    assert store.dead_letters(limit=2) == [
        each.bounded(DEAD_LETTER_MAX_BYTES) for each in letters[3:]
    ]


def test_no_dead_letters_is_an_empty_list(store: ResultStore) -> None:
    """A store without rejected messages lists no dead letters."""
    assert store.dead_letters() == []


# --- record_many -----------------------------------------------------------------------------


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
    recorded exactly once."""
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    store.client.script_flush()

    results = store.record_many([(HASH, attempt(1)), (OTHER_HASH, attempt(2))], now=FIXED_NOW)

    assert [result.cache for result in results] == ["miss", "miss"]
    assert [store.history(h).total_attempts for h in (HASH, OTHER_HASH)] == [1, 1]  # type: ignore[union-attr]


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


# --- "same outcome": one definition, every store alike ------------------------------------


@pytest.mark.parametrize(
    ("first", "later", "cache"),
    [
        pytest.param((0.5, "r"), (0.5, "r"), "hit", id="equal"),
        pytest.param((0.5, "r"), (0.50000000001, "r"), "conflict", id="0.5-vs-0.50000000001"),
        pytest.param((0.0, "r"), (-0.0, "r"), "conflict", id="zero-then-negative-zero"),
        pytest.param((-0.0, "r"), (-0.0, "r"), "hit", id="negative-zero-twice"),
        pytest.param((0.5, "a b"), (0.5, "a  b"), "conflict", id="reason-inner-whitespace"),
        pytest.param((0.5, "r"), (0.5, "r "), "conflict", id="reason-trailing-space"),
        pytest.param((0.5, "r"), (0.5, "r\n"), "conflict", id="reason-trailing-newline"),
        pytest.param((float("nan"), "r"), (None, "r"), "hit", id="nan-is-kept-as-null"),
    ],
)
def test_every_store_decides_same_outcome_alike(
    store: ResultStore,
    first: tuple[float | None, str],
    later: tuple[float | None, str],
    cache: str,
) -> None:
    """Each store compares outcome_json() strings: the same hit or conflict on edge cases."""
    store.record(HASH, attempt(1, value=first[0], reason=first[1]), now=FIXED_NOW)

    recorded = store.record(HASH, attempt(2, value=later[0], reason=later[1]), now=FIXED_NOW)

    assert recorded.cache == cache


# --- entries: each attempt's identity, the first's lists when they are the same ---------------


def stored_entries(store: ResultStore, input_hash: str) -> list[str]:
    """The attempt entries as the store holds them, oldest first."""
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            rows = db.execute(
                "SELECT a.attempt FROM attempts AS a JOIN outcomes AS o ON o.id = a.outcome_id"
                " WHERE o.input_hash = ? ORDER BY a.id",
                (input_hash,),
            ).fetchall()
        return [text for (text,) in rows]
    assert isinstance(store, RedisStore)
    entries = store.client.lrange(attempts_key(store.prefix, input_hash), 0, -1)
    assert isinstance(entries, list)
    return [entry.decode() if isinstance(entry, bytes) else entry for entry in entries]


def stored_first(store: ResultStore, input_hash: str) -> str:
    """The first attempt's JSON as the store holds it."""
    if isinstance(store, SQLiteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            (text,) = db.execute(
                "SELECT first_attempt FROM outcomes WHERE input_hash = ?", (input_hash,)
            ).fetchone()
        return str(text)
    assert isinstance(store, RedisStore)
    first = store.client.hget(outcome_key(store.prefix, input_hash), "first")
    assert isinstance(first, bytes)
    return first.decode()


def test_hit_keeps_its_identity_and_reads_back_with_the_first_lists(store: ResultStore) -> None:
    """A hit is stored as [case, task, time] and read back whole: its own identity, the lists."""
    first = attempt(1)
    hit = attempt(2, recorded_at=FIXED_NOW + timedelta(seconds=7))
    store.record(HASH, first, now=FIXED_NOW)

    store.record(HASH, hit, now=FIXED_NOW + timedelta(seconds=7))
    history = store.history(HASH)

    assert stored_entries(store, HASH) == [
        '["refund-001","task-1","2026-12-01T12:00:00Z"]',
        '["refund-002","task-2","2026-12-01T12:00:07Z"]',
    ]
    assert history is not None
    read = history.attempts[1]
    assert (read.case_id, read.task_id, read.recorded_at) == (
        "refund-002",
        "task-2",
        FIXED_NOW + timedelta(seconds=7),
    )
    assert read.required_claim_ids == ["refund-window", "refund-method", "support-channel"]
    assert read.supported_claim_ids == ["refund-window", "support-channel"]
    assert (
        history.model_dump_json()
        == History(
            input_hash=HASH, first=first, attempts=[first, hit], total_attempts=2
        ).model_dump_json()
    )


def test_conflict_with_other_supported_ids_keeps_its_own_lists(store: ResultStore) -> None:
    """A conflicting attempt with different supported IDs is stored with its own lists."""
    first = attempt(1)
    observed = attempt(2, value=1 / 3, reason=ONE_THIRD_REASON).model_copy(
        update={"supported_claim_ids": ["refund-window"]}
    )
    store.record(HASH, first, now=FIXED_NOW)

    store.record(HASH, observed, now=FIXED_NOW)
    history = store.history(HASH)

    assert history is not None
    assert history.attempts == [first, observed]
    assert history.attempts[1].supported_claim_ids == ["refund-window"]
    assert json.loads(stored_entries(store, HASH)[1])[3]["supported_claim_ids"] == ["refund-window"]


@pytest.mark.parametrize(
    "update",
    [
        pytest.param({"worker_version": "0.2.0"}, id="other-worker-version"),
        pytest.param({"ragas_version": "0.4.4"}, id="other-ragas-version"),
        pytest.param({"redelivered": True}, id="redelivered"),
        pytest.param(
            {"required_claim_ids": ["support-channel", "refund-window", "refund-method"]},
            id="lists-in-another-order",
        ),
        pytest.param({"case_id": None, "task_id": None}, id="no-case-or-task-id"),
    ],
)
def test_hit_differing_from_the_first_elsewhere_keeps_its_own_fields(
    store: ResultStore, update: dict[str, Any]
) -> None:
    """A hit whose versions, lists or redelivery differ from the first's reads back as given."""
    first = attempt(1)
    hit = attempt(2).model_copy(update=update)
    store.record(HASH, first, now=FIXED_NOW)

    assert store.record(HASH, hit, now=FIXED_NOW).cache == "hit"
    assert store.history(HASH) == History(
        input_hash=HASH, first=first, attempts=[first, hit], total_attempts=2
    )


def test_sqlite_and_redis_store_the_same_strings(tmp_path: Path) -> None:
    """The Redis script and the Python code build the same first and entries, byte for byte."""
    sqlite_store = SQLiteStore(tmp_path / "s.sqlite3")
    redis_store = RedisStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="same")
    attempts = [
        attempt(1, reason='supported=2; "quoted" réf'),
        attempt(2, reason='supported=2; "quoted" réf'),
        attempt(3, value=0.5),
        attempt(4).model_copy(update={"supported_claim_ids": ["refund-window"]}),
        attempt(5, value=None).model_copy(update={"redelivered": True, "case_id": None}),
    ]
    try:
        for store in (sqlite_store, redis_store):
            store.record_many([(HASH, each) for each in attempts], now=FIXED_NOW)

        assert stored_first(sqlite_store, HASH) == stored_first(redis_store, HASH)
        assert stored_entries(sqlite_store, HASH) == stored_entries(redis_store, HASH)
        assert sqlite_store.history(HASH) == redis_store.history(HASH)
    finally:
        sqlite_store.close()
        redis_store.close()


# --- what earlier versions stored reads back the same ------------------------------------------

# The SQLite schema before attempts were keyed by outcome id (schema version 0).
SCHEMA_V0 = """
CREATE TABLE outcomes (
    input_hash TEXT PRIMARY KEY,
    first_attempt TEXT NOT NULL,
    total_attempts INTEGER NOT NULL,
    expires_at TEXT
);
CREATE TABLE attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    input_hash TEXT NOT NULL,
    attempt TEXT NOT NULL
);
CREATE INDEX attempts_by_hash ON attempts (input_hash, id);
CREATE TABLE alerts (id INTEGER PRIMARY KEY AUTOINCREMENT, alert TEXT NOT NULL);
CREATE TABLE deliveries (task_id TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE dead_letters (id INTEGER PRIMARY KEY AUTOINCREMENT, letter TEXT NOT NULL);
"""
Histories = dict[str, list[Attempt]]


def write_version_0_sqlite(path: Path, histories: Histories, expires_at: str | None) -> None:
    """Rows as the previous SQLiteStore wrote them: every attempt whole, keyed by hash."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA_V0)
        for input_hash, attempts in histories.items():
            db.execute(
                "INSERT INTO outcomes VALUES (?, ?, ?, ?)",
                (input_hash, attempts[0].model_dump_json(), len(attempts), expires_at),
            )
            db.executemany(
                "INSERT INTO attempts (input_hash, attempt) VALUES (?, ?)",
                [(input_hash, each.model_dump_json()) for each in attempts],
            )
        db.commit()


def write_version_0_redis(store: RedisStore, histories: Histories) -> None:
    """Keys as the previous RECORD_LUA wrote them: no `shared` field, every attempt whole."""
    for input_hash, attempts in histories.items():
        first = attempts[0]
        store.client.hset(
            outcome_key(store.prefix, input_hash),
            mapping={
                "outcome": json.dumps([first.value, first.reason], ensure_ascii=False),
                "first": first.model_dump_json(),
                "total": len(attempts),
            },
        )
        store.client.rpush(
            attempts_key(store.prefix, input_hash), *(each.model_dump_json() for each in attempts)
        )


LegacyFactory = Callable[[Histories], ResultStore]


@pytest.fixture(params=["sqlite", "fakeredis", "redis"])
def make_legacy_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LegacyFactory]:
    """Every store kind in turn, opened on histories the previous version wrote."""
    with store_factory(request.param, request, tmp_path) as make:

        def legacy(histories: Histories) -> ResultStore:
            if request.param == "sqlite":
                write_version_0_sqlite(tmp_path / "s.sqlite3", histories, expires_at=None)
                return make()
            store = make()
            assert isinstance(store, RedisStore)
            write_version_0_redis(store, histories)
            return store

        yield legacy


def test_whole_attempts_of_the_previous_version_read_back_the_same(
    make_legacy_store: LegacyFactory,
) -> None:
    """Histories stored with full lists in every attempt come back exactly as recorded."""
    attempts = [
        attempt(1),
        attempt(2, value=1 / 3, reason=ONE_THIRD_REASON).model_copy(
            update={"supported_claim_ids": ["refund-window"]}
        ),
        attempt(3),
    ]
    store = make_legacy_store({HASH: attempts, OTHER_HASH: [attempt(4)]})

    assert store.history(HASH) == History(
        input_hash=HASH, first=attempts[0], attempts=attempts, total_attempts=3
    )
    assert sorted(store.first_outcomes(), key=lambda pair: pair[0]) == [
        (HASH, attempts[0]),
        (OTHER_HASH, attempt(4)),
    ]


def test_new_attempts_beside_a_previous_version_first_compare_and_read_back(
    make_legacy_store: LegacyFactory,
) -> None:
    """A hash recorded by the previous version: a new hit, a new conflict, all read back whole."""
    first = attempt(1)
    store = make_legacy_store({HASH: [first]})
    hit, observed = attempt(2), attempt(3, value=0.5)

    results = store.record_many([(HASH, hit), (HASH, observed)], now=FIXED_NOW)

    assert [result.cache for result in results] == ["hit", "conflict"]
    assert [result.first for result in results] == [first, first]
    assert store.history(HASH) == History(
        input_hash=HASH, first=first, attempts=[first, hit, observed], total_attempts=3
    )


def fill(store: SQLiteStore) -> None:
    """SQLite's own SQLITE_FULL from now on: the file may not grow past its current pages."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_sqlite_store_refuses_writes_for_now_and_takes_them_once_there_is_room(
    tmp_path: Path,
) -> None:
    """A full disk is a TransientError (the worker waits it out with the message
    unacknowledged, as at Redis's maxmemory), not a bug that fails the task: nothing is
    half-written, and the same writes land once there is room."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.record(HASH, attempt(1), now=FIXED_NOW)
    fill(store)
    big = [(f"{n:064x}", attempt(n, reason="r" * 4000)) for n in range(2, 40)]
    letter = DeadLetter(received_at=FIXED_NOW, error="bad", body="x" * 20_000, task_id="t")
    writes: list[Callable[[], object]] = [
        lambda: store.record_many(big, now=FIXED_NOW),
        lambda: store.dead_letter(letter),
    ]

    for write in writes:
        with pytest.raises(TransientError) as refused:
            write()
        assert str(refused.value) == "SQLite refuses writes for now: database or disk is full"
    assert [store.history(input_hash) for input_hash, _ in big] == [None] * len(big)
    assert store.dead_letters() == []
    assert not store._db.in_transaction

    store._db.execute("PRAGMA max_page_count = 1073741823")
    assert [recorded.cache for recorded in store.record_many(big, now=FIXED_NOW)] == ["miss"] * len(
        big
    )
    store.dead_letter(letter)
    assert [kept.error for kept in store.dead_letters()] == ["bad"]
    store.close()


def test_a_sqlite_store_locked_past_its_busy_timeout_refuses_writes_for_now(
    tmp_path: Path,
) -> None:
    """Another process holding the write lock longer than the busy timeout: retry later."""
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path, busy_timeout_seconds=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(TransientError) as refused:
            store.count_delivery("task-1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(refused.value) == "SQLite refuses writes for now: database is locked"
    assert store.count_delivery("task-1") == 1
    store.close()


def test_sqlite_version_0_file_is_migrated_on_open(tmp_path: Path) -> None:
    """A file of the previous layout is re-keyed once, keeping its rows and expiry."""
    path = tmp_path / "s.sqlite3"
    attempts = [attempt(1), attempt(2)]
    expires_at = FIXED_NOW + timedelta(hours=1)
    write_version_0_sqlite(path, {HASH: attempts}, expires_at=expires_at.isoformat())

    SQLiteStore(path).close()
    store = SQLiteStore(path)
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        assert version == SCHEMA_VERSION
        assert "attempts_by_hash" not in tables
        assert not {"outcomes_v0", "attempts_v0"} & tables
        assert store.history(HASH) == History(
            input_hash=HASH,
            first=attempts[0],
            attempts=attempts,
            total_attempts=2,
            expires_at=expires_at,
        )
    finally:
        store.close()


def test_sqlite_file_of_a_newer_schema_is_a_configuration_error(tmp_path: Path) -> None:
    """A file written by a newer worker is refused, not misread."""
    path = tmp_path / "s.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")

    with pytest.raises(ConfigurationError) as raised:
        SQLiteStore(path)

    assert str(raised.value) == (
        f"SQLite store {path} has schema version {SCHEMA_VERSION + 1}, written by a newer"
        f" worker (this one reads up to {SCHEMA_VERSION})"
    )


# --- TTL -------------------------------------------------------------------------------------


def test_sqlite_outcome_expires_after_ttl(tmp_path: Path) -> None:
    """With a 60 s TTL, an attempt 61 s after the first is a miss and becomes the new first."""
    store = SQLiteStore(tmp_path / "s.sqlite3", ttl_seconds=60)
    try:
        store.record(HASH, attempt(1), now=FIXED_NOW)
        later = attempt(2, value=0.5, recorded_at=FIXED_NOW + timedelta(seconds=61))

        recorded = store.record(HASH, later, now=FIXED_NOW + timedelta(seconds=61))

        assert recorded == Recorded(cache="miss", first=later)
        assert store.history(HASH) == History(
            input_hash=HASH,
            first=later,
            attempts=[later],
            total_attempts=1,
            expires_at=FIXED_NOW + timedelta(seconds=121),
        )
        assert store.alerts() == []
    finally:
        store.close()


def test_sqlite_expired_outcome_restarts_within_a_batch(tmp_path: Path) -> None:
    """After the TTL, a batch of two equal attempts is a miss (the new first), then a hit."""
    store = SQLiteStore(tmp_path / "s.sqlite3", ttl_seconds=60, max_attempts_per_hash=3)
    try:
        for n in range(1, 5):
            store.record(HASH, attempt(n), now=FIXED_NOW)
        later = FIXED_NOW + timedelta(seconds=61)
        new_first, again = attempt(5, value=0.5), attempt(6, value=0.5)

        results = store.record_many([(HASH, new_first), (HASH, again)], now=later)

        assert results == [
            Recorded(cache="miss", first=new_first),
            Recorded(cache="hit", first=new_first),
        ]
        assert store.history(HASH) == History(
            input_hash=HASH,
            first=new_first,
            attempts=[new_first, again],
            total_attempts=2,
            expires_at=later + timedelta(seconds=60),
        )
    finally:
        store.close()


def test_sqlite_outcome_is_kept_until_ttl(tmp_path: Path) -> None:
    """With a 60 s TTL, an attempt 59 s after the first still compares to the first."""
    store = SQLiteStore(tmp_path / "s.sqlite3", ttl_seconds=60)
    try:
        first = attempt(1)
        store.record(HASH, first, now=FIXED_NOW)

        recorded = store.record(HASH, attempt(2), now=FIXED_NOW + timedelta(seconds=59))

        assert recorded == Recorded(cache="hit", first=first)
    finally:
        store.close()


def test_redis_outcome_keys_get_the_ttl(make_redis_store: StoreFactory) -> None:
    """With ttl_seconds, the outcome and attempts keys expire within that many seconds."""
    store = make_redis_store(ttl_seconds=60)
    assert isinstance(store, RedisStore)

    store.record(HASH, attempt(1), now=FIXED_NOW)

    assert 0 < store.client.ttl(outcome_key(store.prefix, HASH)) <= 60
    assert 0 < store.client.ttl(attempts_key(store.prefix, HASH)) <= 60


def test_redis_outcome_keys_are_kept_forever_without_ttl(make_redis_store: StoreFactory) -> None:
    """Without ttl_seconds, the outcome key has no expiry (TTL -1)."""
    store = make_redis_store()
    assert isinstance(store, RedisStore)

    store.record(HASH, attempt(1), now=FIXED_NOW)

    assert store.client.ttl(outcome_key(store.prefix, HASH)) == -1
    assert store.client.ttl(attempts_key(store.prefix, HASH)) == -1


def test_redis_history_reports_expiry(make_redis_store: StoreFactory) -> None:
    """With ttl_seconds, history().expires_at is about ttl seconds from now, like SQLite's."""
    store = make_redis_store(ttl_seconds=60)
    before = datetime.now(UTC)

    store.record(HASH, attempt(1), now=before)
    history = store.history(HASH)

    assert history is not None
    assert history.expires_at is not None
    assert before + timedelta(seconds=55) <= history.expires_at
    assert history.expires_at <= datetime.now(UTC) + timedelta(seconds=60)


# --- open_store ------------------------------------------------------------------------------


def test_open_store_sqlite_url_gives_sqlite_store(tmp_path: Path) -> None:
    """sqlite:///path opens the embedded store on that file."""
    path = tmp_path / "opened.sqlite3"

    store = open_store(f"sqlite:///{path}", Settings())
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == path
        assert path.exists()
    finally:
        store.close()


def test_open_store_passes_bound_and_ttl_from_settings(tmp_path: Path) -> None:
    """The store gets max_attempts_per_hash and result_ttl_seconds from the settings."""
    settings = Settings(max_attempts_per_hash=7, result_ttl_seconds=90)

    store = open_store(f"sqlite:///{tmp_path / 's.sqlite3'}", settings)
    try:
        assert isinstance(store, SQLiteStore)
        assert store.max_attempts_per_hash == 7
        assert store.ttl == timedelta(seconds=90)
    finally:
        store.close()


def test_open_store_redis_url_gives_redis_store(redis_url: str) -> None:
    """redis://... opens the shared store with the settings' key prefix."""
    store = open_store(redis_url, Settings(key_prefix="test-open"))
    try:
        assert isinstance(store, RedisStore)
        assert store.prefix == "test-open"
        assert store.history(HASH) is None
    finally:
        store.close()


def test_open_store_unknown_scheme_is_a_configuration_error() -> None:
    """An unknown scheme is named in the error, which says which URLs to use."""
    with pytest.raises(ConfigurationError) as raised:
        open_store("postgres://x", Settings())

    message = str(raised.value)
    assert message.startswith("unknown store scheme 'postgres' in ")
    assert "EVIDENCE_STORE_URL" in message
    assert message.endswith(": use sqlite:///path/to.db or redis://host:port/db")


def test_open_store_sqlite_without_path_is_a_configuration_error() -> None:
    """sqlite:/// with no file is a configuration error, not a store in the working directory."""
    with pytest.raises(ConfigurationError) as raised:
        open_store("sqlite:///", Settings())

    assert str(raised.value) == "store URL 'sqlite:///' names no file: use sqlite:///path/to.db"


def test_open_store_unopenable_sqlite_file_is_a_configuration_error(tmp_path: Path) -> None:
    """A SQLite path in a missing directory is a configuration error naming the file."""
    path = tmp_path / "missing" / "s.sqlite3"

    with pytest.raises(ConfigurationError) as raised:
        open_store(f"sqlite:///{path}", Settings())

    assert str(raised.value) == (
        f"cannot open SQLite store {path}: directory {path.parent} does not exist (create it first)"
    )


def test_a_store_from_a_url_bounds_its_waits_and_keeps_its_connections_probed(
    redis_url: str, key_prefix: str
) -> None:
    """As the broker's: a reply or connect that never comes fails in seconds, and a peer that
    vanished (NAT, dead host) is noticed in about a minute instead of hours."""
    store = RedisStore.from_url(redis_url, prefix=key_prefix)
    try:
        options = store.client.connection_pool.connection_kwargs
        assert (options["socket_timeout"], options["socket_connect_timeout"]) == (10, 5)
        assert options["socket_keepalive"] is True
        assert options["socket_keepalive_options"] == TCP_KEEPALIVE_OPTIONS
        assert options["health_check_interval"] == 30
        store.alert_count()  # a connection made with them
    finally:
        store.close()


def test_a_sqlite_write_that_fails_is_rolled_back_and_the_next_one_lands(tmp_path: Path) -> None:
    """Every SQLite write goes through one transaction helper: a failure inside it leaves no
    half-written rows and no open transaction behind it."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    try:

        def half_written() -> None:
            with immediate(store._db) as db:
                db.execute("INSERT INTO alerts (alert) VALUES ('half')")
                raise ZeroDivisionError

        with pytest.raises(ZeroDivisionError):
            half_written()

        assert store.alert_count() == 0
        letter = DeadLetter(received_at=FIXED_NOW, error="e", body="{}")
        store.dead_letter(letter)
        assert store.dead_letters() == [letter.bounded(store.dead_letter_max_bytes)]
    finally:
        store.close()
