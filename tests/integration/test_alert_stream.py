"""alerts(since=...) on every store: the alerts raised at or after a time, read back from
the newest, so `alerts --since` finds what the webhook logged as undelivered."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from contracts import Alert
from tests import factories
from tests.integration.store_factories import CLUSTER, REDIS, StoreFactory, store_factory
from worker.stores import ResultStore
from worker.stores.contract import ALERT_CLOCK_MARGIN
from worker.stores.redis import redis_store
from worker.stores.redis.keys import alerts_key
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite import sqlite_store

HOUR = timedelta(hours=1)


@pytest.fixture(params=["sqlite", "fakeredis", REDIS, CLUSTER])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ResultStore]:
    with store_factory(request.param, request, tmp_path) as make:
        yield make()


@pytest.fixture(params=["fakeredis", REDIS])
def redis_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisStore]:
    make: StoreFactory
    with store_factory(request.param, request, tmp_path) as make:
        opened = make()
        assert isinstance(opened, RedisStore)
        yield opened


@pytest.fixture
def now() -> datetime:
    """The real time, to the millisecond: a Redis stream ID is the server's clock."""
    current = datetime.now(UTC)
    return current.replace(microsecond=current.microsecond // 1000 * 1000)


def conflict(store: ResultStore, n: int, raised_at: datetime) -> Alert:
    """Record a conflict on a hash of its own at `raised_at`; return its alert."""
    input_hash = f"{n:064x}"
    first = factories.attempt(case_id=f"case-{n}", task_id=f"task-{n}")
    store.record(input_hash, first, now=raised_at)
    observed = factories.attempt(case_id=f"case-{n}-again", task_id=f"task-{n}-again", value=0.5)
    recorded = store.record(input_hash, observed, now=raised_at)
    assert recorded.alert is not None
    return recorded.alert


def test_since_lists_the_alerts_raised_at_or_after_it_oldest_first(
    store: ResultStore, now: datetime
) -> None:
    """Raised 3 h, 2 h and 1 h ago, since 2 h ago: the last two (the bound is inclusive)."""
    alerts = [conflict(store, n, now - hours * HOUR) for n, hours in [(1, 3), (2, 2), (3, 1)]]

    assert store.alerts(since=now - 2 * HOUR) == alerts[1:]


def test_since_with_a_limit_keeps_the_newest(store: ResultStore, now: datetime) -> None:
    """Five alerts since the time, limit 2: the newest two, oldest first."""
    alerts = [conflict(store, n, now - (10 - n) * timedelta(minutes=1)) for n in range(1, 7)]

    assert store.alerts(limit=2, since=now - 9 * timedelta(minutes=1)) == alerts[4:]


def test_since_after_every_alert_lists_none(store: ResultStore, now: datetime) -> None:
    """Nothing raised since: an empty list."""
    conflict(store, 1, now - HOUR)

    assert store.alerts(since=now) == []


def test_since_reads_every_page_back_to_the_time(
    store: ResultStore, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of 2 over seven alerts: all five since the time, none repeated or skipped."""
    monkeypatch.setattr(redis_store, "ALERT_PAGE", 2)
    monkeypatch.setattr(sqlite_store, "ALERT_PAGE", 2)
    alerts = [conflict(store, n, now - (8 - n) * timedelta(minutes=1)) for n in range(1, 8)]

    assert store.alerts(since=now - 5 * timedelta(minutes=1)) == alerts[2:]


def add_with_id(store: RedisStore, alert: Alert, at: datetime) -> None:
    """XADD the alert with a stream ID of `at`, as a server whose clock reads `at` would."""
    stream_id = f"{int(at.timestamp() * 1000)}-0"
    store.client.xadd(alerts_key(store.prefix), {"alert": alert.model_dump_json()}, id=stream_id)


def test_redis_lists_an_alert_whose_stream_id_is_earlier_than_its_raised_at(
    redis_kind: RedisStore, now: datetime
) -> None:
    """A worker clock ahead of Redis's: an ID up to the clock margin before `since` is read;
    one further back is below the ID bound, so it is not."""
    since = now - HOUR
    kept = factories.attempt()
    beyond = Alert(input_hash="1" * 64, first=kept, observed=kept, raised_at=since)
    within = Alert(input_hash="2" * 64, first=kept, observed=kept, raised_at=since)
    add_with_id(redis_kind, beyond, since - ALERT_CLOCK_MARGIN - timedelta(seconds=1))
    add_with_id(redis_kind, within, since - ALERT_CLOCK_MARGIN + timedelta(seconds=1))

    assert redis_kind.alerts(since=since) == [within]
