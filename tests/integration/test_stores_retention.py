"""Retention (issue 24, item 5): the first outcome outlives the attempts behind it, so an input
judged differently after its attempts expired or were pruned is still a conflict and alerted;
at the outcome's own TTL the same inputs start a new history, with no alert."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from contracts import Attempt
from contracts.triage import findings_of
from tests import factories
from tests.conftest import FIXED_NOW, Run
from tests.integration import store_factories as suite
from tests.integration.store_factories import HASH, StoreFactory
from worker.stores import Recorded
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_prune import Pruned
from worker.stores.sqlite.sqlite_store import SQLiteStore

pytestmark = pytest.mark.integration

make_redis_store = suite.make_redis_store
REQUIRED = ["refund-window", "refund-method"]


def compact(n: int, supported: list[str] | None = None, **changes: Any) -> Attempt:
    """Attempt n as the pipeline makes it: with triage's inputs, so a store keeps it compact
    (its findings derived on read) and its first once."""
    kept = REQUIRED if supported is None else supported
    missing, findings = findings_of(
        REQUIRED, kept, [], retrieved_document_ids=[], expected_evidence={}, answer_length=40
    )
    value = len(set(kept) & set(REQUIRED)) / len(REQUIRED)
    fields: dict[str, Any] = {
        "required_claim_ids": REQUIRED,
        "supported_claim_ids": kept,
        "value": value,
        "reason": f"supported={len(kept)}; required=2",
        "citations": [],
        "retrieved_document_ids": [],
        "missing_claim_ids": missing,
        "findings": findings,
        "answer_length": 40,
        "case_id": f"refund-{n:03d}",
        "task_id": f"task-{n}",
        **changes,
    }
    return factories.attempt(**fields)


def expire(client: redis.Redis, key: str) -> None:
    """Let a key run out now, as its TTL would."""
    client.pexpire(key, 1)
    time.sleep(0.01)
    assert client.exists(key) == 0


# --- Redis: EVIDENCE_ATTEMPTS_TTL_SECONDS --------------------------------------------------


def test_a_compact_first_is_kept_once_and_its_later_attempts_expire_on_their_own(
    make_redis_store: StoreFactory,
) -> None:
    store = make_redis_store(ttl_seconds=600, attempts_ttl_seconds=60)
    assert isinstance(store, RedisStore)
    outcome, attempts = store.keys.outcome(HASH), store.keys.attempts(HASH)

    store.record(HASH, compact(1), now=FIXED_NOW)

    assert store.client.exists(attempts) == 0  # the first's own entry is not kept twice
    assert sorted(store.client.hkeys(outcome)) == [b"first", b"since", b"total"]
    assert 590 < store.client.ttl(outcome) <= 600

    store.record(HASH, compact(2), now=FIXED_NOW)

    assert 50 < store.client.ttl(attempts) <= 60
    assert 590 < store.client.ttl(outcome) <= 600


def test_without_an_attempts_ttl_later_attempts_expire_with_their_outcome(
    make_redis_store: StoreFactory,
) -> None:
    store = make_redis_store(ttl_seconds=600)
    assert isinstance(store, RedisStore)
    store.record(HASH, compact(1), now=FIXED_NOW)
    store.client.expire(store.keys.outcome(HASH), 300)  # five minutes later, say

    store.record(HASH, compact(2), now=FIXED_NOW)

    assert 290 < store.client.ttl(store.keys.attempts(HASH)) <= 300


def test_after_the_attempts_expire_a_conflict_is_still_alerted(
    make_redis_store: StoreFactory,
) -> None:
    store = make_redis_store(ttl_seconds=600, attempts_ttl_seconds=60)
    assert isinstance(store, RedisStore)
    first = compact(1)
    store.record_many([(HASH, first), (HASH, compact(2)), (HASH, compact(3))], now=FIXED_NOW)
    expire(store.client, store.keys.attempts(HASH))
    observed = compact(4, supported=REQUIRED[:1])

    recorded = store.record(HASH, observed, now=FIXED_NOW)

    assert (recorded.cache, recorded.first) == ("conflict", first)
    assert recorded.alert is not None
    assert (recorded.alert.first, recorded.alert.observed) == (first, observed)
    assert [alert.model_dump() for alert in store.alerts()] == [recorded.alert.model_dump()]
    history = store.history(HASH)
    assert history is not None
    assert (history.first, history.attempts, history.total_attempts) == (first, [observed], 4)


def test_at_the_outcome_ttl_the_same_inputs_start_a_new_history_without_alert(
    make_redis_store: StoreFactory,
) -> None:
    store = make_redis_store(ttl_seconds=600, attempts_ttl_seconds=60)
    assert isinstance(store, RedisStore)
    store.record_many([(HASH, compact(1)), (HASH, compact(2))], now=FIXED_NOW)
    expire(store.client, store.keys.outcome(HASH))
    later = compact(3, supported=REQUIRED[:1])

    recorded = store.record(HASH, later, now=FIXED_NOW)

    assert recorded == Recorded(cache="miss", first=later)
    assert store.alerts() == []
    history = store.history(HASH)
    assert history is not None
    assert (history.first, history.attempts, history.total_attempts) == (later, [later], 1)


# --- SQLite: prune ---------------------------------------------------------------------


def at(seconds: int) -> Any:
    return FIXED_NOW + timedelta(seconds=seconds)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "s.sqlite3", ttl_seconds=3600)
    first = compact(1, recorded_at=at(0), contract_version="support/1")
    store.record(HASH, first, now=at(0))
    for n in (2, 3, 4):
        store.record(HASH, compact(n, recorded_at=at(10 * n)), now=at(10 * n))
    return store


def test_prune_drops_the_attempts_before_and_keeps_the_first(sqlite_store: SQLiteStore) -> None:
    pruned = sqlite_store.prune(at(30), now=at(100))

    assert pruned == Pruned(attempts=1)  # attempt 2's entry; the first was never an entry
    history = sqlite_store.history(HASH)
    assert history is not None
    assert history.first == compact(1, recorded_at=at(0), contract_version="support/1")
    assert [a.task_id for a in history.attempts] == ["task-3", "task-4"]
    assert history.total_attempts == 4

    observed = compact(5, supported=REQUIRED[:1], recorded_at=at(50))
    recorded = sqlite_store.record(HASH, observed, now=at(50))

    assert recorded.cache == "conflict"
    assert recorded.alert is not None
    assert sqlite_store.alerts() == [recorded.alert]


def test_prune_outcomes_drops_whole_histories_first_recorded_before(
    sqlite_store: SQLiteStore,
) -> None:
    pruned = sqlite_store.prune(at(1), now=at(100), outcomes=True)

    assert pruned == Pruned(old_outcomes=1)
    assert sqlite_store.history(HASH) is None
    assert sqlite_store.hashes_for_case("refund-001") == []
    again = compact(6, supported=REQUIRED[:1], recorded_at=at(60))
    assert sqlite_store.record(HASH, again, now=at(60)) == Recorded(cache="miss", first=again)


def test_prune_drops_histories_past_their_ttl(sqlite_store: SQLiteStore) -> None:
    """A history past EVIDENCE_RESULT_TTL_SECONDS (3600 s here) goes whatever the time given."""
    assert sqlite_store.prune(at(0), now=at(3599)) == Pruned()
    assert sqlite_store.prune(at(0), now=at(3601)) == Pruned(expired_outcomes=1, contracts=1)
    assert sqlite_store.history(HASH) is None


# --- the command ---------------------------------------------------------------------------


def test_prune_command_says_what_it_dropped(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    store.record(HASH, compact(1, recorded_at=at(0)), now=at(0))
    store.record(HASH, compact(2, recorded_at=at(20)), now=at(20))
    store.close()
    url = f"sqlite:///{path}"

    run = cli("prune", "--before", at(30).isoformat(), "--store", url, "--vacuum")

    assert run.code == 0, run.err
    assert run.out == ""
    line = run.err.splitlines()[-1]
    assert line.startswith(
        "prune: 1 attempts, 0 old and 0 expired histories, 0 expired contract rows"
        f" (before {at(30).isoformat()}); file "
    )
    assert line.endswith(f" bytes (store {url})")
    assert " bytes" in line
    assert "--vacuum" not in line
    assert len(SQLiteStore(path).history(HASH).attempts) == 0  # type: ignore[union-attr]


def test_prune_needs_a_time(cli: Callable[..., Run], tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    SQLiteStore(path).close()

    run = cli("prune", "--store", f"sqlite:///{path}")

    assert (run.code, run.err) == (
        2,
        "evidence-worker: configuration error: prune: give --before ISO8601, or set"
        " EVIDENCE_ATTEMPTS_TTL_SECONDS\n",
    )


def test_prune_refuses_a_redis_store(
    cli: Callable[..., Run], redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVIDENCE_KEY_PREFIX", key_prefix)

    run = cli("prune", "--before", "2026-11-01", "--store", redis_url)

    assert (run.code, run.err) == (
        2,
        "evidence-worker: configuration error: prune works on a SQLite store: Redis expires"
        " keys itself (set EVIDENCE_RESULT_TTL_SECONDS and EVIDENCE_ATTEMPTS_TTL_SECONDS)\n",
    )


def test_prune_defaults_to_now_less_the_attempts_ttl(
    cli: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED_NOW is long past: with EVIDENCE_ATTEMPTS_TTL_SECONDS=60 every later attempt goes."""
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    store.record_many([(HASH, compact(n, recorded_at=at(n))) for n in (1, 2, 3)], now=at(3))
    store.close()
    monkeypatch.setenv("EVIDENCE_ATTEMPTS_TTL_SECONDS", "60")

    run = cli("prune", "--store", f"sqlite:///{path}")

    assert run.code == 0, run.err
    assert run.err.startswith("prune: 2 attempts, 0 old and 0 expired histories")
    history = SQLiteStore(path).history(HASH)
    assert history is not None
    assert (history.first.task_id, history.attempts, history.total_attempts) == ("task-1", [], 3)
