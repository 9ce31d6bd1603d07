"""`evidence-worker prune` on a SQLite store: drop what is older than a time, in short
transactions so that workers writing to the same file wait milliseconds, not minutes.

Redis expires keys itself (EVIDENCE_RESULT_TTL_SECONDS, EVIDENCE_ATTEMPTS_TTL_SECONDS); a SQLite
file only grows, and a first outcome past its TTL is replaced only when its inputs come again.
What goes, in this order:

1. every history past its expiry (outcomes.expires_at, set by EVIDENCE_RESULT_TTL_SECONDS), and
   each contracts row past its own, with what hangs on them;
2. with `outcomes`, every history whose first attempt was recorded before `before`: the same
   inputs then start a new history (as after a TTL), so nondeterminism against them is no
   longer seen;
3. every later attempt's entry recorded before `before`. The first outcome stays, whole: a
   conflicting attempt is still found and alerted.

Write ids stay with their outcome, so a retry of a write whose entry was pruned is still a
replay. The file keeps its size until `vacuum` (VACUUM rewrites it, and needs as much free disk).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from worker.stores.sqlite.sqlite_transaction import immediate

CHUNK = 5_000  # rows per transaction
# An entry's recorded_at: a JSON object is a whole attempt, an array an entry [case, task, time].
_ENTRY_TIME = (
    "julianday(CASE WHEN substr(attempt, 1, 1) = '{'"
    " THEN json_extract(attempt, '$.recorded_at') ELSE json_extract(attempt, '$[2]') END)"
)
_FIRST_TIME = "julianday(json_extract(first_attempt, '$.recorded_at'))"
# What hangs on an outcome row, by its id.
_OUTCOME_TABLES = ("attempts", "writes", "conflicts_alerted", "case_hashes")


@dataclass(frozen=True)
class Pruned:
    """What one prune removed: whole histories (expired, or recorded before), entries of
    later attempts, and contract-drift rows past their expiry."""

    expired_outcomes: int = 0
    old_outcomes: int = 0
    attempts: int = 0
    contracts: int = 0


def prune(
    db: sqlite3.Connection,
    *,
    before: datetime,
    now: datetime,
    outcomes: bool = False,
    progress: Callable[[Pruned], None] | None = None,
) -> Pruned:
    """Prune as the module says; `progress` hears the counts after each transaction."""
    done = Pruned()

    def report(**more: int) -> None:
        nonlocal done
        done = replace(done, **{name: getattr(done, name) + count for name, count in more.items()})
        if progress is not None:
            progress(done)

    expired = "expires_at IS NOT NULL AND julianday(expires_at) <= julianday(?)"
    while count := _drop_outcomes(db, expired, now.isoformat()):
        report(expired_outcomes=count)
    while count := _delete(
        db,
        "DELETE FROM contracts WHERE (contract_version, case_id) IN (SELECT"
        f" contract_version, case_id FROM contracts WHERE {expired} LIMIT {CHUNK})",
        now.isoformat(),
    ):
        report(contracts=count)
    _delete(
        db,
        "DELETE FROM drifts WHERE NOT EXISTS (SELECT 1 FROM contracts AS c"
        " WHERE c.contract_version = drifts.contract_version AND c.case_id = drifts.case_id)",
    )
    if outcomes:
        while count := _drop_outcomes(db, f"{_FIRST_TIME} < julianday(?)", before.isoformat()):
            report(old_outcomes=count)
    while count := _delete(
        db,
        f"DELETE FROM attempts WHERE id IN (SELECT id FROM attempts WHERE {_ENTRY_TIME}"
        f" < julianday(?) LIMIT {CHUNK})",
        before.isoformat(),
    ):
        report(attempts=count)
    return done


def _drop_outcomes(db: sqlite3.Connection, where: str, moment: str) -> int:
    """Delete up to CHUNK outcome rows matching `where` and every row hanging on them."""
    with immediate(db):
        ids = [
            row[0]
            for row in db.execute(f"SELECT id FROM outcomes WHERE {where} LIMIT {CHUNK}", (moment,))
        ]
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        for table in _OUTCOME_TABLES:
            db.execute(f"DELETE FROM {table} WHERE outcome_id IN ({marks})", ids)
        db.execute(f"DELETE FROM outcomes WHERE id IN ({marks})", ids)
    return len(ids)


def _delete(db: sqlite3.Connection, statement: str, *parameters: str) -> int:
    with immediate(db):
        return db.execute(statement, parameters).rowcount
