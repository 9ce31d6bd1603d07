"""SQLite writes that cannot land: a full disk or a lock held past the busy timeout refuse
writes for now (TransientError) with nothing half-written, and a failed transaction leaves
nothing behind."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXED_NOW
from tests.integration.store_factories import HASH, attempt
from worker.errors import TransientError
from worker.stores import DeadLetter
from worker.stores.sqlite.sqlite_store import SQLiteStore
from worker.stores.sqlite.sqlite_transaction import immediate


def fill(store: SQLiteStore) -> None:
    """SQLite's own SQLITE_FULL from now on: the file may not grow past its current pages."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_sqlite_store_refuses_writes_for_now_and_takes_them_once_there_is_room(
    tmp_path: Path,
) -> None:
    """A full disk is a TransientError (the worker waits it out with the message
    unacknowledged, as at Redis's maxmemory), not a bug that fails the task: nothing is
    half-written, and the same writes land once there is room."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.record(HASH, attempt(1), now=FIXED_NOW)
    fill(store)
    big = [(f"{n:064x}", attempt(n, reason="r" * 4000)) for n in range(2, 40)]
    letter = DeadLetter(received_at=FIXED_NOW, error="bad", body="x" * 20_000, task_id="t")
    writes: list[Callable[[], object]] = [
        lambda: store.record_many(big, now=FIXED_NOW),
        lambda: store.dead_letter(letter),
    ]

    for write in writes:
        with pytest.raises(TransientError) as refused:
            write()
        assert str(refused.value) == "SQLite refuses writes for now: database or disk is full"
    assert [store.history(input_hash) for input_hash, _ in big] == [None] * len(big)
    assert store.dead_letters() == []
    assert not store._db.in_transaction

    store._db.execute("PRAGMA max_page_count = 1073741823")
    assert [recorded.cache for recorded in store.record_many(big, now=FIXED_NOW)] == ["miss"] * len(
        big
    )
    store.dead_letter(letter)
    assert [kept.error for kept in store.dead_letters()] == ["bad"]
    store.close()


def test_a_sqlite_store_locked_past_its_busy_timeout_refuses_writes_for_now(
    tmp_path: Path,
) -> None:
    """Another process holding the write lock longer than the busy timeout: retry later."""
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path, busy_timeout_seconds=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(TransientError) as refused:
            store.count_delivery("task-1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(refused.value) == "SQLite refuses writes for now: database is locked"
    assert store.count_delivery("task-1") == 1
    store.close()


def test_a_sqlite_write_that_fails_is_rolled_back_and_the_next_one_lands(tmp_path: Path) -> None:
    """Every SQLite write goes through one transaction helper: a failure inside it leaves no
    half-written rows and no open transaction behind it."""
    store = SQLiteStore(tmp_path / "s.sqlite3")
    try:

        def half_written() -> None:
            with immediate(store._db) as db:
                db.execute("INSERT INTO alerts (alert) VALUES ('half')")
                raise ZeroDivisionError

        with pytest.raises(ZeroDivisionError):
            half_written()

        assert store.alert_count() == 0
        letter = DeadLetter(received_at=FIXED_NOW, error="e", body="{}")
        store.dead_letter(letter)
        assert store.dead_letters() == [letter.bounded(store.dead_letter_max_bytes)]
    finally:
        store.close()
