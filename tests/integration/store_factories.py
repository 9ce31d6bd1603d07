"""The store suite's builders and fixtures: every ResultStore kind (SQLite, Redis through
fakeredis, a real Redis server), numbered attempts, and stores as the previous version
wrote them."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from contracts import Attempt
from tests import factories
from tests.conftest import FIXED_NOW
from tests.factories import TWO_THIRDS_REASON
from worker.stores import ResultStore
from worker.stores.redis.keys import attempts_key, outcome_key
from worker.stores.redis.redis_cluster import RedisClusterStore
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore

HASH = "a" * 64
OTHER_HASH = "b" * 64
TWO_THIRDS = 2 / 3
UNKNOWN_REASON = (
    "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: old-c1"
)

StoreFactory = Callable[..., ResultStore]

# The kinds on a real server carry the `integration` mark (`make check` runs the others).
REDIS = pytest.param("redis", marks=pytest.mark.integration)
CLUSTER = pytest.param("cluster", marks=pytest.mark.integration)


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
    if kind == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        prefix = request.getfixturevalue("cluster_prefix")
        return RedisClusterStore.from_url(cluster.url, prefix=prefix, **options)
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


@pytest.fixture(params=["sqlite", "fakeredis", REDIS, CLUSTER])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """Every store kind in turn, built with keyword options (max_attempts_per_hash, ttl...)."""
    with store_factory(request.param, request, tmp_path) as make:
        yield make


@pytest.fixture(params=["fakeredis", REDIS])
def make_redis_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """The Redis-backed store kinds only, for checks on Redis keys."""
    with store_factory(request.param, request, tmp_path) as make:
        yield make


@pytest.fixture
def store(make_store: StoreFactory) -> ResultStore:
    """A store of the current kind with default options."""
    return make_store()


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


@pytest.fixture(params=["sqlite", "fakeredis", REDIS])
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


@pytest.fixture(params=["sqlite", REDIS, CLUSTER])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ResultStore, str]]:
    """A fresh store of one kind and the URL the commands reach it by (a Redis store's key
    prefix set in the environment, as an operator would)."""
    store = build_store(request.param, request, tmp_path)
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 's.sqlite3'}"
    elif request.param == "cluster":
        url = request.getfixturevalue("redis_cluster").url
        monkeypatch.setenv("EVIDENCE_KEY_PREFIX", request.getfixturevalue("cluster_prefix"))
    else:
        url = request.getfixturevalue("redis_url")
        monkeypatch.setenv("EVIDENCE_KEY_PREFIX", request.getfixturevalue("key_prefix"))
    yield store, url
    store.close()
