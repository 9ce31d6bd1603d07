"""What every ResultStore writes for an attempt: its own identity, and the first attempt's
lists when they are the same; SQLite and Redis store the same strings byte for byte."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from tests.conftest import FIXED_NOW
from tests.factories import ONE_THIRD_REASON
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, attempt
from worker.stores import History, ResultStore
from worker.stores.redis.keys import outcome_key
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore

# The store suite's fixtures: every store kind (SQLite, fakeredis, real Redis) in turn.
make_store = suite.make_store
store = suite.store


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
    entries = store.client.lrange(store.keys.attempts(input_hash), 0, -1)
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
