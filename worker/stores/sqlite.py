"""The embedded store: one SQLite file, safe for several processes (BEGIN IMMEDIATE + WAL)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from contracts import Alert, Attempt
from worker.errors import ConfigurationError
from worker.stores.base import DeadLetter, History, Recorded, classify

SCHEMA = """
CREATE TABLE IF NOT EXISTS outcomes (
    input_hash TEXT PRIMARY KEY,
    first_attempt TEXT NOT NULL,
    total_attempts INTEGER NOT NULL,
    expires_at TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    input_hash TEXT NOT NULL,
    attempt TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_by_hash ON attempts (input_hash, id);
CREATE TABLE IF NOT EXISTS alerts (id INTEGER PRIMARY KEY AUTOINCREMENT, alert TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (task_id TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY AUTOINCREMENT, letter TEXT NOT NULL
);
"""

MAX_ALERTS = 10_000
MAX_DEAD_LETTERS = 10_000


def _enable_wal(db: sqlite3.Connection, timeout_seconds: float) -> None:
    """Switch to WAL, retrying while locked: when several processes open a new file at once,
    SQLite fails this pragma with "database is locked" without calling the busy handler."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class SQLiteStore:
    """ResultStore over one SQLite file; every record() is one IMMEDIATE transaction."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_attempts_per_hash: int = 100,
        ttl_seconds: int | None = None,
        busy_timeout_seconds: float = 30.0,
    ) -> None:
        self.path = Path(path)
        self.max_attempts_per_hash = max_attempts_per_hash
        self.ttl = timedelta(seconds=ttl_seconds) if ttl_seconds else None
        try:
            # Autocommit mode: transactions are opened explicitly with BEGIN IMMEDIATE,
            # which takes the write lock up front so two racing writers serialize.
            self._db = sqlite3.connect(
                self.path,
                timeout=busy_timeout_seconds,
                isolation_level=None,
                check_same_thread=False,
            )
            _enable_wal(self._db, busy_timeout_seconds)
            self._db.executescript(SCHEMA)
        except sqlite3.Error as error:
            raise ConfigurationError(f"cannot open SQLite store {self.path}: {error}") from None

    def record(self, input_hash: str, attempt: Attempt, *, now: datetime) -> Recorded:
        return self.record_many([(input_hash, attempt)], now=now)[0]

    def record_many(self, items: Sequence[tuple[str, Attempt]], *, now: datetime) -> list[Recorded]:
        """Record in order, in one transaction: a repeated hash sees the earlier item as first."""
        results: list[Recorded] = []
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for input_hash, attempt in items:
                results.append(self._record_one(input_hash, attempt, now))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return results

    def _record_one(self, input_hash: str, attempt: Attempt, now: datetime) -> Recorded:
        db = self._db
        row = db.execute(
            "SELECT first_attempt, expires_at FROM outcomes WHERE input_hash = ?", (input_hash,)
        ).fetchone()
        attempt_json = attempt.model_dump_json()
        if row is not None and row[1] is not None and datetime.fromisoformat(row[1]) <= now:
            db.execute("DELETE FROM attempts WHERE input_hash = ?", (input_hash,))
            db.execute("DELETE FROM outcomes WHERE input_hash = ?", (input_hash,))
            row = None
        if row is None:
            expires_at = (now + self.ttl).isoformat() if self.ttl else None
            db.execute(
                "INSERT INTO outcomes (input_hash, first_attempt, total_attempts, expires_at)"
                " VALUES (?, ?, 1, ?)",
                (input_hash, attempt_json, expires_at),
            )
            self._append_attempt(input_hash, attempt_json)
            return Recorded(cache="miss", first=attempt)
        first = Attempt.model_validate_json(row[0])
        db.execute(
            "UPDATE outcomes SET total_attempts = total_attempts + 1 WHERE input_hash = ?",
            (input_hash,),
        )
        self._append_attempt(input_hash, attempt_json)
        cache = classify(first, attempt)
        if cache == "hit":
            return Recorded(cache="hit", first=first)
        alert = Alert(input_hash=input_hash, first=first, observed=attempt, raised_at=now)
        db.execute("INSERT INTO alerts (alert) VALUES (?)", (alert.model_dump_json(),))
        db.execute("DELETE FROM alerts WHERE id <= (SELECT MAX(id) FROM alerts) - ?", (MAX_ALERTS,))
        return Recorded(cache="conflict", first=first, alert=alert)

    def _append_attempt(self, input_hash: str, attempt_json: str) -> None:
        # Bounded per hash: the newest attempts stay; the first is also kept in `outcomes`.
        self._db.execute(
            "INSERT INTO attempts (input_hash, attempt) VALUES (?, ?)", (input_hash, attempt_json)
        )
        self._db.execute(
            "DELETE FROM attempts WHERE input_hash = ? AND id NOT IN"
            " (SELECT id FROM attempts WHERE input_hash = ? ORDER BY id DESC LIMIT ?)",
            (input_hash, input_hash, self.max_attempts_per_hash),
        )

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        rows = self._db.execute("SELECT input_hash, first_attempt FROM outcomes").fetchall()
        for input_hash, first in rows:
            yield input_hash, Attempt.model_validate_json(first)

    def history(self, input_hash: str) -> History | None:
        row = self._db.execute(
            "SELECT first_attempt, total_attempts, expires_at FROM outcomes WHERE input_hash = ?",
            (input_hash,),
        ).fetchone()
        if row is None:
            return None
        attempts = [
            Attempt.model_validate_json(text)
            for (text,) in self._db.execute(
                "SELECT attempt FROM attempts WHERE input_hash = ? ORDER BY id", (input_hash,)
            )
        ]
        return History(
            input_hash=input_hash,
            first=Attempt.model_validate_json(row[0]),
            attempts=attempts,
            total_attempts=row[1],
            expires_at=datetime.fromisoformat(row[2]) if row[2] else None,
        )

    def alerts(self, limit: int = 100) -> list[Alert]:
        rows = self._db.execute(
            "SELECT alert FROM (SELECT id, alert FROM alerts ORDER BY id DESC LIMIT ?) ORDER BY id",
            (max(limit, 0),),  # SQLite reads a negative LIMIT as "no limit"
        )
        return [Alert.model_validate_json(text) for (text,) in rows]

    def dead_letter(self, *letters: DeadLetter) -> None:
        if not letters:
            return
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany(
            "INSERT INTO dead_letters (letter) VALUES (?)",
            [(letter.model_dump_json(),) for letter in letters],
        )
        self._db.execute(
            "DELETE FROM dead_letters WHERE id <= (SELECT MAX(id) FROM dead_letters) - ?",
            (MAX_DEAD_LETTERS,),
        )
        self._db.execute("COMMIT")

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self._db.execute(
            "SELECT letter FROM (SELECT id, letter FROM dead_letters ORDER BY id DESC LIMIT ?)"
            " ORDER BY id",
            (max(limit, 0),),
        )
        return [DeadLetter.model_validate_json(text) for (text,) in rows]

    def count_delivery(self, task_id: str) -> int:
        row = self._db.execute(
            "INSERT INTO deliveries (task_id, count) VALUES (?, 1)"
            " ON CONFLICT (task_id) DO UPDATE SET count = count + 1 RETURNING count",
            (task_id,),
        ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self._db.close()
