"""The one way the SQLite store writes: a BEGIN IMMEDIATE transaction, committed or rolled back."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from worker.errors import TransientError

# Primary result codes of a write SQLite cannot take for now but may take later, as Redis at
# maxmemory: a full disk or quota, the lock held past the busy timeout, an I/O error.
CANNOT_WRITE_FOR_NOW = frozenset(
    {sqlite3.SQLITE_FULL, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR}
)


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Take the write lock up front (two racing writers serialize instead of one failing on
    upgrade), commit when the block ends, roll back when it raises, whatever it raises.

    A write SQLite cannot take for now is a TransientError: the worker waits it out with the
    message unacknowledged, as it does for Redis, instead of failing the task."""
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            # SQLite has already rolled back after some errors (SQLITE_FULL among them).
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode & 0xFF not in CANNOT_WRITE_FOR_NOW:
            raise
        if db.in_transaction:  # a COMMIT that failed leaves the transaction open
            db.execute("ROLLBACK")
        raise TransientError(f"SQLite refuses writes for now: {error}") from error
