"""The embedded store: one SQLite file, safe for several processes (BEGIN IMMEDIATE + WAL)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from contracts import Alert, Attempt
from worker.errors import ConfigurationError
from worker.stores.attempts import Expander, entry, same_shared_fields, shared_json, whole
from worker.stores.base import DeadLetter, History, Recorded, classify, outcome_json

# Version 0 (never set) kept attempts by input hash, every entry a whole attempt; version 1
# keys them by the outcome's integer id: 64 hex digits fewer per row and per index entry.
SCHEMA_VERSION = 1
SCHEMA = (
    # outcome, shared: the first attempt's outcome_json() and shared_json(), so a later attempt
    # is compared without parsing the first; NULL in rows migrated from version 0.
    """CREATE TABLE IF NOT EXISTS outcomes (
        id INTEGER PRIMARY KEY,
        input_hash TEXT NOT NULL UNIQUE,
        first_attempt TEXT NOT NULL,
        total_attempts INTEGER NOT NULL,
        expires_at TEXT,
        outcome TEXT,
        shared TEXT
    )""",
    # attempt: an entry as worker.stores.attempts writes it (or a whole attempt, before).
    """CREATE TABLE IF NOT EXISTS attempts (
        id INTEGER PRIMARY KEY,
        outcome_id INTEGER NOT NULL,
        attempt TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS attempts_by_outcome ON attempts (outcome_id, id)",
    "CREATE TABLE IF NOT EXISTS alerts (id INTEGER PRIMARY KEY AUTOINCREMENT, alert TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS deliveries (task_id TEXT PRIMARY KEY, count INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS dead_letters (
        id INTEGER PRIMARY KEY AUTOINCREMENT, letter TEXT NOT NULL
    )""",
)
# From version 0: the same rows, attempts re-keyed; their whole-attempt entries read as before.
MIGRATE_FROM_0 = (
    "ALTER TABLE outcomes RENAME TO outcomes_v0",
    "ALTER TABLE attempts RENAME TO attempts_v0",
    *SCHEMA[:3],
    "INSERT INTO outcomes (input_hash, first_attempt, total_attempts, expires_at)"
    " SELECT input_hash, first_attempt, total_attempts, expires_at FROM outcomes_v0"
    " ORDER BY rowid",
    "INSERT INTO attempts (id, outcome_id, attempt)"
    " SELECT a.id, o.id, a.attempt FROM attempts_v0 AS a"
    " JOIN outcomes AS o ON o.input_hash = a.input_hash ORDER BY a.id",
    "DROP TABLE attempts_v0",
    "DROP TABLE outcomes_v0",
)

MAX_ALERTS = 10_000
OUTCOMES_PER_READ = 500  # hashes per SELECT ... IN (...), well below SQLite's variable limit
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


@dataclass(slots=True)
class _Outcome:
    """One hash's row while a batch is recorded: its count so far and its first attempt."""

    id: int
    total: int
    first: str | Attempt  # as stored, parsed when first needed
    expires_at: str | None
    outcome: str | None  # the first's outcome_json(), None when not stored (version 0 rows)
    shared: str | None  # the first's shared_json(), likewise

    @classmethod
    def new(cls, outcome_id: int, attempt: Attempt, expires_at: str | None) -> _Outcome:
        return cls(outcome_id, 1, attempt, expires_at, outcome_json(attempt), shared_json(attempt))

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and datetime.fromisoformat(self.expires_at) <= now

    def first_attempt(self) -> Attempt:
        if isinstance(self.first, str):
            self.first = Attempt.model_validate_json(self.first)
        return self.first


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
            self._create_schema()
        except sqlite3.Error as error:
            raise ConfigurationError(f"cannot open SQLite store {self.path}: {error}") from None

    def _schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _create_schema(self) -> None:
        """Create the tables, or bring a file of an earlier version up to this one, once: the
        first process to take the write lock does it, the others then find it done."""
        if self._schema_version() == SCHEMA_VERSION:
            return
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            version = self._schema_version()
            if version > SCHEMA_VERSION:
                raise ConfigurationError(
                    f"SQLite store {self.path} has schema version {version}, written by a newer"
                    f" worker (this one reads up to {SCHEMA_VERSION})"
                )
            if version == 0 and self._has_version_0_tables():
                for statement in MIGRATE_FROM_0:
                    db.execute(statement)
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _has_version_0_tables(self) -> bool:
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(attempts)")}
        return "input_hash" in columns

    def record(self, input_hash: str, attempt: Attempt, *, now: datetime) -> Recorded:
        return self.record_many([(input_hash, attempt)], now=now)[0]

    def record_many(self, items: Sequence[tuple[str, Attempt]], *, now: datetime) -> list[Recorded]:
        """Record in order, in one transaction: a repeated hash sees the earlier item as first.

        The batch's outcomes are read in a few statements and their counts, entries and alerts
        written in a few more after the loop: the same rows as one by one, in fewer statements.
        """
        expires_at = (now + self.ttl).isoformat() if self.ttl else None
        results: list[Recorded] = []
        entries: list[tuple[int, str]] = []
        counted: set[int] = set()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            outcomes = self._outcomes({input_hash for input_hash, _ in items})
            for input_hash, attempt in items:
                outcome = outcomes.get(input_hash)
                if outcome is not None and outcome.expired(now):
                    # A new first outcome starts a new history. No entry of the old one is
                    # pending: an earlier item under this hash would have restarted it already.
                    db.execute("DELETE FROM attempts WHERE outcome_id = ?", (outcome.id,))
                    outcome = outcomes[input_hash] = _Outcome.new(outcome.id, attempt, expires_at)
                    db.execute(
                        "UPDATE outcomes SET first_attempt = ?, total_attempts = 1,"
                        " expires_at = ?, outcome = ?, shared = ? WHERE id = ?",
                        (whole(attempt), expires_at, outcome.outcome, outcome.shared, outcome.id),
                    )
                    counted.discard(outcome.id)
                elif outcome is None:
                    (outcome_id,) = db.execute(
                        "INSERT INTO outcomes (input_hash, first_attempt, total_attempts,"
                        " expires_at, outcome, shared) VALUES (?, ?, 1, ?, ?, ?) RETURNING id",
                        (
                            input_hash,
                            whole(attempt),
                            expires_at,
                            outcome_json(attempt),
                            shared_json(attempt),
                        ),
                    ).fetchone()
                    outcome = outcomes[input_hash] = _Outcome.new(outcome_id, attempt, expires_at)
                else:
                    outcome.total += 1
                    counted.add(outcome.id)
                    results.append(self._compare(input_hash, outcome, attempt, entries, now))
                    continue
                results.append(Recorded(cache="miss", first=attempt))
                entries.append((outcome.id, entry(attempt, same_outcome=True, same_shared=True)))
            self._store(
                entries,
                [(o.total, o.id) for o in outcomes.values() if o.id in counted],
                [r.alert for r in results if r.alert is not None],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return results

    def _outcomes(self, hashes: set[str]) -> dict[str, _Outcome]:
        """The stored outcomes of these hashes, by hash, read a few hundred at a time."""
        found: dict[str, _Outcome] = {}
        ordered = sorted(hashes)
        for start in range(0, len(ordered), OUTCOMES_PER_READ):
            chunk = ordered[start : start + OUTCOMES_PER_READ]
            rows = self._db.execute(
                "SELECT input_hash, id, total_attempts, first_attempt, expires_at, outcome, shared"
                f" FROM outcomes WHERE input_hash IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for input_hash, *fields in rows:
                found[input_hash] = _Outcome(*fields)
        return found

    @staticmethod
    def _compare(
        input_hash: str,
        outcome: _Outcome,
        attempt: Attempt,
        entries: list[tuple[int, str]],
        now: datetime,
    ) -> Recorded:
        """A later attempt: hit or conflict with the first, and its entry."""
        if outcome.outcome is not None and outcome.shared is not None:
            same_outcome = outcome.outcome == outcome_json(attempt)
            same_shared = outcome.shared == shared_json(attempt)
        else:
            first = outcome.first_attempt()
            same_outcome = classify(first, attempt) == "hit"
            same_shared = same_shared_fields(first, attempt)
        entries.append(
            (outcome.id, entry(attempt, same_outcome=same_outcome, same_shared=same_shared))
        )
        if same_outcome:
            return Recorded(cache="hit", first=outcome.first)
        first = outcome.first_attempt()
        alert = Alert(input_hash=input_hash, first=first, observed=attempt, raised_at=now)
        return Recorded(cache="conflict", first=first, alert=alert)

    def _store(
        self, entries: list[tuple[int, str]], totals: list[tuple[int, int]], alerts: list[Alert]
    ) -> None:
        db = self._db
        db.executemany("UPDATE outcomes SET total_attempts = ? WHERE id = ?", totals)
        db.executemany("INSERT INTO attempts (outcome_id, attempt) VALUES (?, ?)", entries)
        # Bounded per hash: the newest attempts stay; the first is also kept in `outcomes`.
        # A hash never recorded more often than the bound has nothing to trim.
        db.executemany(
            "DELETE FROM attempts WHERE outcome_id = ? AND id <= (SELECT id FROM attempts"
            " WHERE outcome_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            [
                (outcome_id, outcome_id, self.max_attempts_per_hash)
                for total, outcome_id in totals
                if total > self.max_attempts_per_hash
            ],
        )
        if alerts:
            db.executemany(
                "INSERT INTO alerts (alert) VALUES (?)", [(a.model_dump_json(),) for a in alerts]
            )
            db.execute(
                "DELETE FROM alerts WHERE id <= (SELECT MAX(id) FROM alerts) - ?", (MAX_ALERTS,)
            )

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        rows = self._db.execute("SELECT input_hash, first_attempt FROM outcomes").fetchall()
        for input_hash, first in rows:
            yield input_hash, Attempt.model_validate_json(first)

    def history(self, input_hash: str) -> History | None:
        row = self._db.execute(
            "SELECT id, first_attempt, total_attempts, expires_at FROM outcomes"
            " WHERE input_hash = ?",
            (input_hash,),
        ).fetchone()
        if row is None:
            return None
        first = Attempt.model_validate_json(row[1])
        entries = self._db.execute(
            "SELECT attempt FROM attempts WHERE outcome_id = ? ORDER BY id", (row[0],)
        )
        return History(
            input_hash=input_hash,
            first=first,
            attempts=Expander(first).attempts(text for (text,) in entries),
            total_attempts=row[2],
            expires_at=datetime.fromisoformat(row[3]) if row[3] else None,
        )

    def alerts(self, limit: int = 100) -> list[Alert]:
        rows = self._db.execute(
            "SELECT alert FROM (SELECT id, alert FROM alerts ORDER BY id DESC LIMIT ?) ORDER BY id",
            (max(limit, 0),),  # SQLite reads a negative LIMIT as "no limit"
        )
        return [Alert.model_validate_json(text) for (text,) in rows]

    def alert_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM alerts").fetchone()[0])

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
