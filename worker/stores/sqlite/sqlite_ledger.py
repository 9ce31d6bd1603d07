"""The publish ledger in the SQLite store (worker/stores/contract.py): one row per open entry;
the record transaction deletes the rows of the write ids it records."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

from worker.stores.contract import DeadLetter, LedgerEntry
from worker.stores.sqlite.sqlite_transaction import immediate

# published_at: when the store noted the entry (not the publisher's publish time, which is in
# `entry`), in seconds since the epoch, for the range scans by age. The column kept its name
# from schema version 3; rows noted before this change hold the publisher's time. Negated
# (below 0) while the message is not sent yet (note_published(sent=False), before a publisher
# sends): every read by age starts at a time after 0, so nothing lists such a row until
# confirm_sent() sets its time; the record and dead-letter transactions close it as any row.
LEDGER_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ledger (
        write_id TEXT PRIMARY KEY,
        task_id TEXT NOT NULL,
        published_at REAL NOT NULL,
        entry TEXT NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS ledger_by_age ON ledger (published_at, write_id)",
    "CREATE INDEX IF NOT EXISTS ledger_by_task ON ledger (task_id)",
)
# Leases (Ledger.take_lease): who holds one, until when (seconds since the epoch). Made by the
# first lease, not with the schema: a table more needs no new schema version, which workers
# of the version before would refuse.
LEASES_TABLE = """CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until REAL NOT NULL
) WITHOUT ROWID"""
LEDGER_PAGE = 1000


class SQLiteLedger:
    """The Ledger half of SQLiteStore (mixed in): needs its connection and the time to live."""

    _db: sqlite3.Connection
    ledger_ttl_seconds: int

    def ledger_now(self) -> datetime:
        """The store's clock. A SQLite store is a file on this machine, so this machine's
        clock is the store's; an entry's publish time is the publisher's and never compared."""
        return datetime.fromtimestamp(time.time(), UTC)

    def _forget_before(self) -> float:
        return self.ledger_now().timestamp() - self.ledger_ttl_seconds

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        if not entries or self.ledger_ttl_seconds <= 0:
            return
        with immediate(self._db) as db:
            noted_at = self.ledger_now().timestamp()
            db.executemany(
                "INSERT OR REPLACE INTO ledger (write_id, task_id, published_at, entry)"
                " VALUES (?, ?, ?, ?)",
                [
                    (e.write_id, e.task_id, noted_at if sent else -noted_at, e.model_dump_json())
                    for e in entries
                ],
            )
            # Past the time to live, sent or not (a note not sent holds its time negated).
            forget = self._forget_before()
            db.execute(
                "DELETE FROM ledger WHERE published_at > ? AND published_at < ?", (-forget, forget)
            )

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        if not write_ids or self.ledger_ttl_seconds <= 0:
            return
        with immediate(self._db) as db:
            now = self.ledger_now().timestamp()
            db.executemany(
                "UPDATE ledger SET published_at = ? WHERE write_id = ? AND published_at < 0",
                [(now, write_id) for write_id in write_ids],
            )

    def _close(self, write_ids: Iterable[str | None]) -> None:
        """Within the caller's transaction."""
        self._db.executemany(
            "DELETE FROM ledger WHERE write_id = ?", [(w,) for w in write_ids if w]
        )

    def _close_letters(self, letters: Sequence[DeadLetter]) -> None:
        """Within the caller's transaction: each letter's entry, or its whole task's."""
        self._close(
            f"{letter.task_id}:{letter.position}"
            for letter in letters
            if letter.task_id and letter.position is not None
        )
        self._db.executemany(
            "DELETE FROM ledger WHERE task_id = ?",
            [(letter.task_id,) for letter in letters if letter.task_id and letter.position is None],
        )

    def close_entries(self, write_ids: Sequence[str]) -> None:
        with immediate(self._db):
            self._close(write_ids)

    def take_lease(self, name: str, holder: str, seconds: int) -> bool:
        with immediate(self._db) as db:
            db.execute(LEASES_TABLE)
            now = self.ledger_now().timestamp()
            taken = db.execute(
                "INSERT INTO leases (name, holder, until) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,"
                " until = excluded.until WHERE leases.until <= ? OR leases.holder = ?",
                (name, holder, now + seconds, now, holder),
            ).rowcount
        return bool(taken)

    def give_back_lease(self, name: str, holder: str) -> None:
        with immediate(self._db) as db:
            db.execute(LEASES_TABLE)
            db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    def count_unrecorded(self, *, published_before: datetime) -> int:
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM ledger WHERE published_at >= ? AND published_at < ?",
            (self._forget_before(), published_before.timestamp()),
        ).fetchone()
        return int(count)

    def unrecorded(self, *, published_before: datetime) -> Iterator[LedgerEntry]:
        after: tuple[float, str] = (self._forget_before(), "")
        while True:
            rows = self._db.execute(
                "SELECT published_at, write_id, entry FROM ledger"
                " WHERE (published_at, write_id) > (?, ?) AND published_at < ?"
                " ORDER BY published_at, write_id LIMIT ?",
                (*after, published_before.timestamp(), LEDGER_PAGE),
            ).fetchall()
            for noted_at, write_id, text in rows:
                after = (noted_at, write_id)
                entry = LedgerEntry.model_validate_json(text)
                yield entry.model_copy(update={"noted_at": datetime.fromtimestamp(noted_at, UTC)})
            if len(rows) < LEDGER_PAGE:
                return
