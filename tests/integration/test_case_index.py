"""The case index behind `show --case` (SPEC §9, looking a row up), on every store: SQLite,
fakeredis and a real Redis. It is written in the call that records the outcome, so a hash is
listed for a case exactly when an attempt of that case is kept under it."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import Attempt
from tests import factories
from tests.conftest import FIXED_NOW
from tests.integration.store_factories import StoreFactory, make_redis_store, make_store, store
from worker.stores import ResultStore
from worker.stores.contract import recorded_ms
from worker.stores.redis.keys import case_key, outcome_key
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SCHEMA_VERSION, SQLiteStore

__all__ = ["make_redis_store", "make_store", "store"]  # the fixtures, shared with test_stores

OLD_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "store-28e2bf7"
H1, H2, H3, H4 = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)


def at(seconds: float, case_id: str | None = "refund-001", **fields: Any) -> Attempt:
    """An attempt of `case_id` recorded `seconds` after FIXED_NOW."""
    return factories.attempt(
        case_id=case_id, recorded_at=FIXED_NOW + timedelta(seconds=seconds), **fields
    )


def test_hashes_are_listed_newest_first(store: ResultStore) -> None:
    """Each hash once, by when the case first recorded it; other cases are apart."""
    store.record(H2, at(1), now=FIXED_NOW)
    store.record(H1, at(2), now=FIXED_NOW)
    store.record(H3, at(3), now=FIXED_NOW)
    store.record(H4, at(4, case_id="refund-002"), now=FIXED_NOW)

    assert store.hashes_for_case("refund-001") == [H3, H1, H2]
    assert store.hashes_for_case("refund-002") == [H4]


def test_a_hash_recorded_again_keeps_its_first_time(store: ResultStore) -> None:
    """A hit or a conflict later does not move the hash to the front."""
    store.record(H1, at(1), now=FIXED_NOW)
    store.record(H2, at(2), now=FIXED_NOW)

    store.record(H1, at(3), now=FIXED_NOW)  # a hit
    store.record(H1, at(4, value=0.5), now=FIXED_NOW)  # a conflict

    assert store.hashes_for_case("refund-001") == [H2, H1]


def test_a_hash_is_listed_under_every_case_that_recorded_it(store: ResultStore) -> None:
    """The same inputs under two case IDs: each case lists the hash, at its own time."""
    store.record(H1, at(1, case_id="refund-002"), now=FIXED_NOW)
    store.record(H2, at(2), now=FIXED_NOW)
    store.record(H1, at(3), now=FIXED_NOW)

    assert store.hashes_for_case("refund-001") == [H1, H2]
    assert store.hashes_for_case("refund-002") == [H1]


def test_limit_keeps_the_newest(store: ResultStore) -> None:
    for n, input_hash in enumerate((H1, H2, H3, H4)):
        store.record(input_hash, at(n), now=FIXED_NOW)

    assert store.hashes_for_case("refund-001", 2) == [H4, H3]
    assert store.hashes_for_case("refund-001", 10) == [H4, H3, H2, H1]
    assert store.hashes_for_case("refund-001") == [H4, H3, H2, H1]


def test_a_case_with_nothing_recorded_has_no_hashes(store: ResultStore) -> None:
    store.record(H1, at(1), now=FIXED_NOW)

    assert store.hashes_for_case("refund-404") == []
    assert store.hashes_for_case("Refund-001") == []  # case IDs are compared exactly


def test_attempts_without_a_case_are_not_indexed(store: ResultStore) -> None:
    """An attempt without a case ID is recorded, and no case lists it."""
    store.record(H1, at(1, case_id=None), now=FIXED_NOW)

    assert store.history(H1) is not None
    assert store.hashes_for_case("") == []
    assert store.hashes_for_case("None") == []


@pytest.mark.parametrize(
    "case_id", ["refund 001", "", 'q"uote\\', "ünï/cödé:{x}*", "a" * 5000, "\n\t"]
)
def test_any_case_id_is_its_own_index(store: ResultStore, case_id: str) -> None:
    """Case IDs are free text: spaces, quotes, braces, Redis glob characters, long ones."""
    store.record(H1, at(1, case_id=case_id), now=FIXED_NOW)
    store.record(H2, at(2, case_id=case_id + "x"), now=FIXED_NOW)

    assert store.hashes_for_case(case_id) == [H1]


def test_a_batch_indexes_every_attempt_in_one_call(store: ResultStore) -> None:
    """A batch of one time: equal times list the greater hash first, on every store."""
    store.record_many(
        [(H1, at(0)), (H3, at(0)), (H2, at(0)), (H4, at(0, case_id="refund-002"))],
        now=FIXED_NOW,
    )

    assert store.hashes_for_case("refund-001") == [H3, H2, H1]
    assert store.hashes_for_case("refund-002") == [H4]


def test_a_replayed_write_indexes_nothing_new(store: ResultStore) -> None:
    """A retry under the same write id writes nothing, the index included."""
    store.record(H1, at(1), now=FIXED_NOW, write_id="task-1:0")
    replayed = store.record(H1, at(5, case_id="refund-002"), now=FIXED_NOW, write_id="task-1:0")

    assert replayed.replayed
    assert store.hashes_for_case("refund-002") == []
    assert store.hashes_for_case("refund-001") == [H1]


def test_the_index_lists_a_hash_exactly_when_an_attempt_of_the_case_is_kept(
    store: ResultStore,
) -> None:
    """After a mixed batch, the hashes each case lists are the hashes whose kept attempts
    name that case."""
    items = [
        (H1, at(1, case_id="a")),
        (H2, at(2, case_id="b")),
        (H1, at(3, case_id="b")),
        (H3, at(4, case_id=None)),
        (H4, at(5, case_id="a", value=None, reason="invalid")),
        (H2, at(6, case_id="b", value=0.5)),
    ]
    store.record_many(items, now=FIXED_NOW)

    for case_id in ("a", "b"):
        kept = set()
        for input_hash in (H1, H2, H3, H4):
            history = store.history(input_hash)
            assert history is not None
            if any(attempt.case_id == case_id for attempt in history.attempts):
                kept.add(input_hash)
        assert set(store.hashes_for_case(case_id)) == kept
    assert store.hashes_for_case("a") == [H4, H1]
    assert store.hashes_for_case("b") == [H1, H2]


def test_a_sqlite_record_that_fails_indexes_nothing(tmp_path: Path) -> None:
    """One transaction: a failure after the outcome's rows leaves neither outcome nor index."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    try:
        store._db.execute(
            "CREATE TRIGGER no_entries BEFORE INSERT ON attempts"
            " BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
        with pytest.raises(sqlite3.IntegrityError):
            store.record(H1, at(1), now=FIXED_NOW)
        store._db.execute("DROP TRIGGER no_entries")

        assert store.history(H1) is None
        assert store.hashes_for_case("refund-001") == []
        store.record(H1, at(1), now=FIXED_NOW)
        assert store.hashes_for_case("refund-001") == [H1]
    finally:
        store.close()


# --- TTL -------------------------------------------------------------------------------------


def test_redis_case_index_gets_the_ttl(make_redis_store: StoreFactory) -> None:
    """With ttl_seconds, the case index expires with its newest outcome."""
    store = make_redis_store(ttl_seconds=60)
    assert isinstance(store, RedisStore)

    store.record(H1, at(1), now=FIXED_NOW)

    assert 0 < store.client.ttl(case_key(store.prefix, "refund-001")) <= 60


def test_redis_case_index_is_kept_forever_without_ttl(make_redis_store: StoreFactory) -> None:
    store = make_redis_store()
    assert isinstance(store, RedisStore)

    store.record(H1, at(1), now=FIXED_NOW)

    assert store.client.ttl(case_key(store.prefix, "refund-001")) == -1
    assert store.client.zscore(case_key(store.prefix, "refund-001"), H1) == recorded_ms(at(1))


def test_redis_case_index_drops_expired_outcomes(make_redis_store: StoreFactory) -> None:
    """An outcome gone (expired) drops out of its case's list; a score older than the TTL is
    removed as the case takes a new hash."""
    store = make_redis_store(ttl_seconds=60)
    assert isinstance(store, RedisStore)
    store.record(H1, at(0), now=FIXED_NOW)
    store.record(H2, at(1), now=FIXED_NOW)
    store.client.delete(outcome_key(store.prefix, H2))  # as Redis expires it

    assert store.hashes_for_case("refund-001") == [H1]

    store.record(H3, at(61), now=FIXED_NOW + timedelta(seconds=61))
    members = store.client.zrange(case_key(store.prefix, "refund-001"), 0, -1)
    assert members == [H2.encode(), H3.encode()]  # H1's score is older than the TTL


def test_redis_case_index_restarts_with_a_new_history(make_redis_store: StoreFactory) -> None:
    """A hash whose outcome expired and was recorded again by another case is not listed
    under the case of the old history; recorded by that case again, it is, at its new time."""
    store = make_redis_store(ttl_seconds=60)
    assert isinstance(store, RedisStore)
    store.record(H1, at(0, case_id="other"), now=FIXED_NOW)
    store.record(H1, at(30), now=FIXED_NOW + timedelta(seconds=30))  # a hit
    store.client.delete(outcome_key(store.prefix, H1))  # expired at 60 s
    store.record(H1, at(70, case_id="other"), now=FIXED_NOW + timedelta(seconds=70))  # a miss

    assert store.hashes_for_case("refund-001") == []
    assert store.hashes_for_case("other") == [H1]

    store.record(H1, at(80), now=FIXED_NOW + timedelta(seconds=80))
    assert store.hashes_for_case("refund-001") == [H1]
    assert store.client.zscore(case_key(store.prefix, "refund-001"), H1) == recorded_ms(at(80))


def test_sqlite_new_history_drops_the_old_histories_cases(tmp_path: Path) -> None:
    """After the TTL a new first outcome starts a new history: cases of the old one no
    longer list the hash."""
    store = SQLiteStore(tmp_path / "s.sqlite3", ttl_seconds=60)
    try:
        store.record(H1, at(0, case_id="old"), now=FIXED_NOW)
        store.record(H1, at(61), now=FIXED_NOW + timedelta(seconds=61))

        assert store.hashes_for_case("old") == []
        assert store.hashes_for_case("refund-001") == [H1]
    finally:
        store.close()


# --- SQLite files written before the case index -----------------------------------------------


def old_sqlite_store(tmp_path: Path) -> Path:
    """The SQLite file main at 28e2bf7 wrote (schema version 3), loaded as it was."""
    path = tmp_path / "old.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript((OLD_FIXTURE / "store.sql").read_text())
    return path


def test_an_old_sqlite_file_is_migrated_and_its_cases_found(tmp_path: Path) -> None:
    """Every case ID kept in an old file's attempts is indexed as the file is migrated, at
    the time that case first recorded each hash."""
    path = old_sqlite_store(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3

    store = SQLiteStore(path)
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        expected: dict[str, dict[str, int]] = {}
        for input_hash, _ in store.first_outcomes():
            history = store.history(input_hash)
            assert history is not None
            for attempt in [history.first, *history.attempts]:
                assert attempt.case_id is not None
                times = expected.setdefault(attempt.case_id, {})
                times[input_hash] = min(times.get(input_hash, 2**63), recorded_ms(attempt))
        assert len(expected) >= 5
        for case_id, times in expected.items():
            newest_first = sorted(times, key=lambda h: (times[h], h), reverse=True)
            assert store.hashes_for_case(case_id) == newest_first
        assert store.hashes_for_case("refund-002-retry") == [
            "f4a60bffff38ff313c11ab8913e01295481e46a154e779215d15bb8a87825a44"
        ]
    finally:
        store.close()


def test_a_version_4_sqlite_file_is_migrated_and_goes_on_indexing(tmp_path: Path) -> None:
    """A file of version 4 (this layout without the case index) gets its cases from its
    attempts, and new attempts are indexed beside them."""
    path = tmp_path / "v4.sqlite3"
    store = SQLiteStore(path)
    store.record(H1, at(1), now=FIXED_NOW)
    store.record(H1, at(2, case_id="refund-002", value=0.5), now=FIXED_NOW)  # an entry
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("DROP TABLE case_hashes")
        db.execute("PRAGMA user_version = 4")
        db.commit()

    store = SQLiteStore(path)
    try:
        assert store.hashes_for_case("refund-001") == [H1]
        assert store.hashes_for_case("refund-002") == [H1]
        store.record(H2, at(3), now=FIXED_NOW)
        assert store.hashes_for_case("refund-001") == [H2, H1]
    finally:
        store.close()
