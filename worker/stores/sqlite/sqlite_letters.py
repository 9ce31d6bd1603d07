"""Dead letters by id in the SQLite store (base.LetterBox): the id is the row's, which
AUTOINCREMENT never hands out twice."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence

from worker.stores.codec import read_letter
from worker.stores.contract import DeadLetter
from worker.stores.sqlite.sqlite_transaction import immediate

LETTER_PAGE = 200  # letters per SELECT: a page of bodies, each bounded (DeadLetter.bounded)
MAX_ROWID = 2**63 - 1
VARIABLES = 500  # ids per DELETE ... IN (...), well below SQLite's variable limit


def _row_id(letter_id: str) -> int | None:
    """The row id a letter id names; None for anything this store never wrote."""
    if not letter_id.isascii() or not letter_id.isdigit():
        return None
    row_id = int(letter_id)
    return row_id if 0 < row_id <= MAX_ROWID else None


class SQLiteLetters:
    """The LetterBox half of SQLiteStore (mixed in): needs its connection."""

    _db: sqlite3.Connection

    def letters_newest_first(self) -> Iterator[tuple[str, DeadLetter]]:
        up_to = MAX_ROWID
        while True:
            rows = self._db.execute(
                "SELECT id, letter FROM dead_letters WHERE id <= ? ORDER BY id DESC LIMIT ?",
                (up_to, LETTER_PAGE),
            ).fetchall()
            for row_id, text in rows:
                up_to = row_id - 1
                yield str(row_id), read_letter(text)
            if len(rows) < LETTER_PAGE:
                return

    def letter(self, letter_id: str) -> DeadLetter | None:
        row_id = _row_id(letter_id)
        if row_id is None:
            return None
        row = self._db.execute("SELECT letter FROM dead_letters WHERE id = ?", (row_id,)).fetchone()
        return None if row is None else read_letter(row[0])

    def remove_letters(self, letter_ids: Sequence[str]) -> int:
        row_ids = [row_id for each in letter_ids if (row_id := _row_id(each)) is not None]
        removed = 0
        with immediate(self._db) as db:
            for start in range(0, len(row_ids), VARIABLES):
                chunk = row_ids[start : start + VARIABLES]
                marks = ", ".join("?" * len(chunk))
                cursor = db.execute(f"DELETE FROM dead_letters WHERE id IN ({marks})", chunk)
                removed += cursor.rowcount
        return removed

    def still_open(self, write_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(write_ids), VARIABLES):
            chunk = list(write_ids[start : start + VARIABLES])
            marks = ", ".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT write_id FROM ledger WHERE write_id IN ({marks}) AND published_at >= 0",
                chunk,
            ).fetchall()
            found |= {write_id for (write_id,) in rows}
        return found
