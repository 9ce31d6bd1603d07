"""Every ResultStore's reads: a hash's history (bounded to the newest attempts), the alerts
and the dead letters it keeps, oldest first, with their limits."""

from __future__ import annotations

from datetime import timedelta

import pytest

from contracts import Alert
from tests.conftest import FIXED_NOW
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, OTHER_HASH, StoreFactory, attempt
from worker.settings import DEAD_LETTER_MAX_BYTES
from worker.stores import DeadLetter, History, Recorded, ResultStore

# The store suite's fixtures: every store kind (SQLite, fakeredis, real Redis) in turn.
make_store = suite.make_store
store = suite.store


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


def test_histories_are_each_hash_s_history_in_order(store: ResultStore) -> None:
    """histories() gives what history() gives for each hash, in the order asked, None for one
    never recorded, a hash asked twice twice; on a cluster the hashes lie in several slots."""
    hashes = [(f"{n:x}" * 64)[:64] for n in range(1, 9)]
    for position, input_hash in enumerate(hashes):
        for n in range(1, position % 3 + 2):  # one, two or three attempts
            store.record(input_hash, attempt(n, value=0.5 if n == 3 else 1.0), now=FIXED_NOW)
    asked = [hashes[3], OTHER_HASH, *hashes, hashes[3]]

    histories = store.histories(asked)

    assert histories == [store.history(input_hash) for input_hash in asked]
    assert [None if h is None else h.total_attempts for h in histories] == [
        1, None, 1, 2, 3, 1, 2, 3, 1, 2, 1,
    ]  # fmt: skip
    assert store.histories([]) == []


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
