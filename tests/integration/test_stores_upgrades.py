"""What earlier versions stored reads back the same on every store kind, a version 0 SQLite
file is migrated on open, and a file of a newer schema is refused."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import FIXED_NOW
from tests.factories import ONE_THIRD_REASON
from tests.integration import store_factories as suite
from tests.integration.store_factories import (
    HASH,
    OTHER_HASH,
    LegacyFactory,
    attempt,
    write_version_0_sqlite,
)
from worker.errors import ConfigurationError
from worker.stores import History
from worker.stores.sqlite.sqlite_store import SCHEMA_VERSION, SQLiteStore

# The store suite's fixtures: every store kind (SQLite, fakeredis, real Redis) in turn.
make_legacy_store = suite.make_legacy_store


# --- what earlier versions stored reads back the same ------------------------------------------


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


# --- the SQLite file's schema version ----------------------------------------------------------


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
