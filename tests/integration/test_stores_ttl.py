"""Outcomes expire after the store's TTL (SQLite by its clock, Redis by key expiry), and are
kept forever without one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.conftest import FIXED_NOW
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, StoreFactory, attempt
from worker.stores import History, Recorded
from worker.stores.redis.keys import attempts_key, outcome_key
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore

# The store suite's fixtures: every store kind (SQLite, fakeredis, real Redis) in turn.
make_redis_store = suite.make_redis_store


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
