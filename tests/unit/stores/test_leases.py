"""Leases (Ledger's Leases protocol): one holder at a time, until given back or expired, on
SQLite and on Redis (fakeredis)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest

from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore
from worker.stores.sqlite.sqlite_transaction import immediate


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLiteStore | RedisStore]:
    opened: SQLiteStore | RedisStore
    if request.param == "sqlite":
        opened = SQLiteStore(tmp_path / "store.sqlite3")
    else:
        opened = RedisStore(fakeredis.FakeRedis(), prefix="unit")
    yield opened
    opened.close()


def expire(store: SQLiteStore | RedisStore, name: str) -> None:
    """As if the lease's time had run out by the store's clock."""
    if isinstance(store, SQLiteStore):
        with immediate(store._db) as db:
            db.execute("UPDATE leases SET until = until - 3600 WHERE name = ?", (name,))
    else:
        store.client.delete(store.keys.lease(name))


def test_a_lease_has_one_holder_until_it_is_given_back(store: SQLiteStore | RedisStore) -> None:
    assert store.take_lease("reconcile", "run-1", 300)
    assert not store.take_lease("reconcile", "run-2", 300)
    store.give_back_lease("reconcile", "run-2")  # not its lease: nothing
    assert not store.take_lease("reconcile", "run-2", 300)
    store.give_back_lease("reconcile", "run-1")
    assert store.take_lease("reconcile", "run-2", 300)


def test_an_expired_lease_goes_to_the_next_holder(store: SQLiteStore | RedisStore) -> None:
    """A run that died holding it does not stop the runs after it for ever."""
    assert store.take_lease("reconcile", "run-1", 300)
    expire(store, "reconcile")
    assert store.take_lease("reconcile", "run-2", 300)
    store.give_back_lease("reconcile", "run-1")  # the late one gives back nothing
    assert not store.take_lease("reconcile", "run-3", 300)
