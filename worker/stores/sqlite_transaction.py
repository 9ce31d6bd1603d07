"""The one way the SQLite store writes: a BEGIN IMMEDIATE transaction, committed or rolled back."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Take the write lock up front (two racing writers serialize instead of one failing on
    upgrade), commit when the block ends, roll back when it raises, whatever it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
