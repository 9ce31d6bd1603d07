"""first_outcomes_by_time(), what `records` and `report --store` read, on every store: SQLite,
fakeredis, a real Redis and the Redis Cluster. One row per input hash, oldest first (ties by
hash), within [since, until); the Redis stores sort through time_order's bounded chunks."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from contracts import Attempt
from tests import factories
from tests.conftest import FIXED_NOW
from tests.integration.store_factories import StoreFactory, make_redis_store, make_store, store
from worker.stores import ResultStore, time_order
from worker.stores.redis.redis_store import RedisStore

__all__ = ["make_redis_store", "make_store", "store"]  # the fixtures, shared with test_stores

H1, H2, H3, H4 = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)


def at(seconds: float, case_id: str = "refund-001", **fields: Any) -> Attempt:
    """An attempt of `case_id` recorded `seconds` after FIXED_NOW."""
    return factories.attempt(
        case_id=case_id, recorded_at=FIXED_NOW + timedelta(seconds=seconds), **fields
    )


def listed(store: ResultStore, **bounds: Any) -> list[tuple[str, str | None]]:
    return [(h, first.case_id) for h, first in store.first_outcomes_by_time(**bounds)]


def test_first_outcomes_come_oldest_first_ties_by_hash(store: ResultStore) -> None:
    """Recorded out of order; two at the same millisecond are ordered by hash."""
    store.record(H3, at(2, "c"), now=FIXED_NOW)
    store.record(H2, at(1, "b"), now=FIXED_NOW)
    store.record(H4, at(0.0005, "d"), now=FIXED_NOW)  # same millisecond as H1's
    store.record(H1, at(0, "a"), now=FIXED_NOW)

    assert listed(store) == [(H1, "a"), (H4, "d"), (H2, "b"), (H3, "c")]


def test_later_attempts_add_no_row_and_the_first_stands(store: ResultStore) -> None:
    """A hit and a conflict under H1 later: still one row, the first attempt's."""
    store.record(H1, at(0, "a"), now=FIXED_NOW)
    store.record(H2, at(1, "b"), now=FIXED_NOW)
    store.record(H1, at(2, "later-hit"), now=FIXED_NOW)
    store.record(H1, at(3, "later-conflict", value=0.5), now=FIXED_NOW)

    outcomes = list(store.first_outcomes_by_time())
    assert [(h, first.case_id, first.value) for h, first in outcomes] == [
        (H1, "a", 2 / 3),
        (H2, "b", 2 / 3),
    ]


def test_since_is_in_and_until_is_out(store: ResultStore) -> None:
    """[since, until) to the millisecond; either bound alone."""
    for n, input_hash in enumerate((H1, H2, H3, H4)):
        store.record(input_hash, at(n, f"case-{n}"), now=FIXED_NOW)
    one, three = FIXED_NOW + timedelta(seconds=1), FIXED_NOW + timedelta(seconds=3)

    assert listed(store, since=one, until=three) == [(H2, "case-1"), (H3, "case-2")]
    assert listed(store, since=three) == [(H4, "case-3")]
    assert listed(store, until=one) == [(H1, "case-0")]
    assert listed(store, since=FIXED_NOW + timedelta(hours=1)) == []


def test_an_empty_store_lists_nothing(store: ResultStore) -> None:
    assert listed(store) == []


def spy_spills(monkeypatch: pytest.MonkeyPatch, chunk_keys: int) -> list[int]:
    """time_order's chunk made small; the size of every chunk spilled, appended as it is."""
    spills: list[int] = []
    real: Callable[..., Any] = time_order._spill

    def spill(chunk: list[time_order.SortKey], files: Any) -> Any:
        spills.append(len(chunk))
        return real(chunk, files)

    monkeypatch.setattr(time_order, "_spill", spill)
    monkeypatch.setattr(time_order, "CHUNK_KEYS", chunk_keys)
    return spills


def test_many_outcomes_come_in_order_through_bounded_chunks(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 outcomes recorded in a shuffled order of time, read 7 keys a chunk: every one,
    once, oldest first. A Redis store spills 43 chunks (no time index: the external sort);
    SQLite sorts in SQLite and spills none here."""
    store = make_store()
    spills = spy_spills(monkeypatch, 7)
    times = list(range(300))
    random.Random(3).shuffle(times)
    items = [(f"{n:064x}", at(t, f"case-{t:03d}")) for n, t in enumerate(times)]
    for start in range(0, len(items), 50):
        store.record_many(items[start : start + 50], now=FIXED_NOW)

    cases = [first.case_id for _, first in store.first_outcomes_by_time()]

    assert cases == [f"case-{t:03d}" for t in range(300)]
    if isinstance(store, RedisStore):
        assert spills == [7] * 42 + [6]
    else:
        assert spills == []


def test_an_outcome_without_its_time_field_is_placed_by_its_first(
    make_redis_store: StoreFactory,
) -> None:
    """An outcome an earlier version wrote has no `since`: its first attempt's time is read."""
    store = make_redis_store()
    assert isinstance(store, RedisStore)
    store.record(H1, at(2, "a"), now=FIXED_NOW)
    store.record(H2, at(1, "b"), now=FIXED_NOW)
    store.client.hdel(store.keys.outcome(H1), "since")

    assert listed(store) == [(H2, "b"), (H1, "a")]
    assert listed(store, until=FIXED_NOW + timedelta(seconds=2)) == [(H2, "b")]
