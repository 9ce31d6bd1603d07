"""The embedded store: one SQLite file, safe for several processes (BEGIN IMMEDIATE + WAL)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

from contracts import Alert, Attempt
from contracts.outcomes import CacheOutcome
from contracts.record_models import AlertKind, AnyAlert, ContractDriftAlert, parse_alert
from worker.errors import ConfigurationError
from worker.settings import DEAD_LETTER_MAX_BYTES, LEDGER_TTL_SECONDS
from worker.stores.codec import (
    Expander,
    alert_json,
    drifted,
    entry,
    first_rows,
    keeps_own_entry,
    kept_comparands,
    letter_json,
    read_letter,
    required_set_json,
    same_shared_fields,
    shared_json,
    with_first,
)
from worker.stores.contract import (
    DeadLetter,
    FirstRequired,
    History,
    Recorded,
    RecordOne,
    classify,
    newest_since,
    outcome_json,
    recorded_ms,
    utc_ms,
)
from worker.stores.sqlite.sqlite_ledger import LEDGER_SCHEMA, SQLiteLedger
from worker.stores.sqlite.sqlite_letters import SQLiteLetters
from worker.stores.sqlite.sqlite_prune import Pruned, prune
from worker.stores.sqlite.sqlite_transaction import immediate
from worker.stores.time_order import ms_bounds

# Version 0 (never set) kept attempts by input hash, every entry a whole attempt; version 1
# keys them by the outcome's integer id: 64 hex digits fewer per row and per index entry;
# version 2 adds `writes` (an empty table for a file of version 1: every write to it is new);
# version 3 adds `ledger` (worker/stores/sqlite/sqlite_ledger.py), empty as a file is migrated;
# version 4 adds `contracts`, `drifts`, `conflicts_alerted` (empty as a file is migrated: every
# conflict alerted before is alerted once more) and writes.drift (NULL in rows from before);
# version 5 adds `case_hashes`, filled as a file is migrated from the case IDs its attempts
# keep (CASES_FROM_ATTEMPTS); version 6 changes no table: its rows may hold compact firsts
# (worker/stores/codec.py), which a version-5 reader cannot read, so it must refuse the file.
SCHEMA_VERSION = 6
SCHEMA = (
    # outcome, shared: the first attempt's outcome_json() and shared_json(), so a later attempt
    # is compared without parsing the first; NULL in rows migrated from version 0, and where
    # the first is compact (it holds both: attempts.kept_comparands()).
    """CREATE TABLE IF NOT EXISTS outcomes (
        id INTEGER PRIMARY KEY,
        input_hash TEXT NOT NULL UNIQUE,
        first_attempt TEXT NOT NULL,
        total_attempts INTEGER NOT NULL,
        expires_at TEXT,
        outcome TEXT,
        shared TEXT
    )""",
    # attempt: an entry as worker.stores.codec writes it (or a whole attempt, before).
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
    # The write ids of an outcome's newest attempts (OutcomeStore): number is the attempt's
    # (its total_attempts then), found what that write found: miss, hit, conflict (alerted
    # before) or its alert's JSON; drift, when it found contract drift: 1, or the drift
    # alert's JSON when it raised it.
    """CREATE TABLE IF NOT EXISTS writes (
        outcome_id INTEGER NOT NULL,
        write_id TEXT NOT NULL,
        number INTEGER NOT NULL,
        found TEXT NOT NULL,
        drift TEXT,
        PRIMARY KEY (outcome_id, write_id)
    ) WITHOUT ROWID""",
    # Contract drift (SPEC §9): the first valid row's sorted required set (required_set_json())
    # per (contract version, case ID), with its hash and task ID; each drift alerted, by the
    # other set; each conflict alerted, by its observed outcome_json().
    """CREATE TABLE IF NOT EXISTS contracts (
        contract_version TEXT NOT NULL,
        case_id TEXT NOT NULL,
        required TEXT NOT NULL,
        input_hash TEXT NOT NULL,
        task_id TEXT,
        expires_at TEXT,
        PRIMARY KEY (contract_version, case_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS drifts (
        contract_version TEXT NOT NULL,
        case_id TEXT NOT NULL,
        required TEXT NOT NULL,
        alert TEXT NOT NULL,
        PRIMARY KEY (contract_version, case_id, required)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS conflicts_alerted (
        outcome_id INTEGER NOT NULL,
        observed TEXT NOT NULL,
        PRIMARY KEY (outcome_id, observed)
    ) WITHOUT ROWID""",
    # The case index (`show --case`): each case's hashes, with when the case first recorded
    # each (base.recorded_ms()), written in the transaction that records the attempt.
    """CREATE TABLE IF NOT EXISTS case_hashes (
        case_id TEXT NOT NULL,
        outcome_id INTEGER NOT NULL,
        recorded_ms INTEGER NOT NULL,
        PRIMARY KEY (outcome_id, case_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS case_hashes_newest ON case_hashes (case_id, recorded_ms)",
    *LEDGER_SCHEMA,
)
# A recorded_at as attempts spell it (ISO 8601) in milliseconds since the epoch, rounded to the
# millisecond where recorded_ms() truncates: only ties between migrated rows could tell.
_MS = (
    "CAST(strftime('%s', {0}) AS INTEGER) * 1000 + CAST(substr(strftime('%f', {0}), 4) AS INTEGER)"
)
# From version 4 or earlier: every case ID kept in a first attempt or an entry (a JSON object
# is a whole attempt, a JSON array an entry: [case ID, task ID, time, ...]). A case whose
# attempts were all trimmed past the bound (and not the first) is not found.
CASES_FROM_ATTEMPTS = f"""INSERT OR IGNORE INTO case_hashes (case_id, outcome_id, recorded_ms)
    SELECT case_id, outcome_id, MIN({_MS.format("recorded_at")}) FROM (
        SELECT id AS outcome_id, json_extract(first_attempt, '$.case_id') AS case_id,
            json_extract(first_attempt, '$.recorded_at') AS recorded_at FROM outcomes
        UNION ALL
        SELECT outcome_id,
            json_extract(attempt, CASE WHEN substr(attempt, 1, 1) = '{{' THEN '$.case_id'
                ELSE '$[0]' END),
            json_extract(attempt, CASE WHEN substr(attempt, 1, 1) = '{{' THEN '$.recorded_at'
                ELSE '$[2]' END)
        FROM attempts
    ) WHERE case_id IS NOT NULL AND recorded_at IS NOT NULL GROUP BY case_id, outcome_id"""
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
WRITES_PER_READ = 250  # (outcome, write id) pairs per SELECT: two variables each
MAX_DEAD_LETTERS = 10_000
ALERT_PAGE = 500  # alerts per SELECT while `alerts --since` reads back in time
MAX_ROWID = 2**63 - 1


def _recorded_ms(recorded_at: str) -> int:
    """base.recorded_ms() of a kept first attempt, from its recorded_at (ISO 8601 text)."""
    return utc_ms(datetime.fromisoformat(recorded_at))


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

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and datetime.fromisoformat(self.expires_at) <= now

    def first_attempt(self) -> Attempt:
        if isinstance(self.first, str):
            self.first = Attempt.model_validate_json(self.first)
        return self.first


@dataclass(slots=True)
class _Contract:
    """A (contract version, case ID)'s first required set while a batch is recorded."""

    required: str  # required_set_json() of its first valid attempt
    input_hash: str
    task_id: str | None
    expires_at: str | None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and datetime.fromisoformat(self.expires_at) <= now


def _marked(recorded: Recorded, drift: str | None) -> Recorded:
    """`recorded` with what the drift check found: "" or None (none), "1" (a drift alerted
    before) or the JSON of the drift alert this write raised."""
    recorded.contract_drift = bool(drift)
    if drift and drift != "1":
        recorded.drift = cast("ContractDriftAlert", parse_alert(drift))
    return recorded


def _replayed(outcome: _Outcome, found: str, drift: str | None) -> Recorded:
    """The Recorded of a write kept under `outcome` that found `found` and `drift` (a write
    id's row)."""
    if found in ("miss", "hit", "conflict"):
        recorded = Recorded(cast("CacheOutcome", found), outcome.first, replayed=True)
    else:
        alert = Alert.model_validate_json(found)
        recorded = Recorded("conflict", alert.first, alert, replayed=True)
    return _marked(recorded, drift)


class SQLiteStore(RecordOne, SQLiteLedger, SQLiteLetters):
    """ResultStore over one SQLite file; every record() is one IMMEDIATE transaction."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_attempts_per_hash: int = 100,
        ttl_seconds: int | None = None,
        busy_timeout_seconds: float = 30.0,
        dead_letter_max_bytes: int = DEAD_LETTER_MAX_BYTES,
        ledger_ttl_seconds: int = LEDGER_TTL_SECONDS,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.ledger_ttl_seconds = ledger_ttl_seconds
        self.dead_letter_max_bytes = dead_letter_max_bytes
        self.max_attempts_per_hash = max_attempts_per_hash
        self.ttl = timedelta(seconds=ttl_seconds) if ttl_seconds else None
        if read_only and self._open_read_only(busy_timeout_seconds):
            return
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

    def _open_read_only(self, busy_timeout_seconds: float) -> bool:
        """Open the file for reading only (the read commands: a file on a read-only mount, or
        that only its writer may change, can still be read); False when its schema is older
        than this version's, which the read-write opening then brings up to date once.

        mode=ro needs the WAL's -shm file to exist or be creatable; where neither holds (a
        read-only directory, no writer running), the file can only be read as immutable,
        which is true of it there: nothing can write it."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        try:
            for candidate in (uri, f"{uri}&immutable=1"):
                self._db = sqlite3.connect(
                    candidate,
                    uri=True,
                    timeout=busy_timeout_seconds,
                    isolation_level=None,
                    check_same_thread=False,
                )
                try:
                    version = self._schema_version()
                    break
                except sqlite3.OperationalError:
                    self._db.close()
                    if candidate != uri:
                        raise
        except sqlite3.Error as error:
            raise ConfigurationError(f"cannot open SQLite store {self.path}: {error}") from None
        if version > SCHEMA_VERSION:
            self._db.close()
            raise ConfigurationError(self._newer_problem(version))
        if version == SCHEMA_VERSION:
            return True
        self._db.close()
        return False

    def _newer_problem(self, version: int) -> str:
        return (
            f"SQLite store {self.path} has schema version {version}, written by a newer"
            f" worker (this one reads up to {SCHEMA_VERSION})"
        )

    def _schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _create_schema(self) -> None:
        """Create the tables, or bring a file of an earlier version up to this one, once: the
        first process to take the write lock does it, the others then find it done."""
        if self._schema_version() == SCHEMA_VERSION:
            return
        db = self._db
        with immediate(db):
            version = self._schema_version()
            if version > SCHEMA_VERSION:
                raise ConfigurationError(self._newer_problem(version))
            if version == 0 and self._has_version_0_tables():
                for statement in MIGRATE_FROM_0:
                    db.execute(statement)
            for statement in SCHEMA:
                db.execute(statement)
            columns = {row[1] for row in db.execute("PRAGMA table_info(writes)")}
            if "drift" not in columns:  # a file of version 2 or 3
                db.execute("ALTER TABLE writes ADD COLUMN drift TEXT")
            if version < 5:  # (a new file has no rows: nothing to fill in)
                db.execute(CASES_FROM_ATTEMPTS)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _has_version_0_tables(self) -> bool:
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(attempts)")}
        return "input_hash" in columns

    def record_many(
        self,
        items: Sequence[tuple[str, Attempt]],
        *,
        now: datetime,
        write_ids: Sequence[str | None] | None = None,
        letters: Sequence[DeadLetter] = (),
    ) -> list[Recorded]:
        """Record in order, in one transaction: a repeated hash sees the earlier item as first.

        The batch's outcomes and write ids are read in a few statements and their counts,
        entries, write ids and alerts written in a few more after the loop: the same rows as
        one by one, in fewer statements. A write id already kept under its outcome (a retry
        of a transaction that committed) writes nothing and returns what that write found.
        `letters` are kept first, in their own transaction (a local file: no round trip).
        """
        self.dead_letter(*letters)
        return self._record_many(items, now=now, write_ids=write_ids)

    def _record_many(
        self,
        items: Sequence[tuple[str, Attempt]],
        *,
        now: datetime,
        write_ids: Sequence[str | None] | None,
    ) -> list[Recorded]:
        ids: Sequence[str | None] = [None] * len(items) if write_ids is None else write_ids
        expires_at = (now + self.ttl).isoformat() if self.ttl else None
        results: list[Recorded] = []
        entries: list[tuple[int, str]] = []
        writes: list[tuple[int, str, int, str, str | None]] = []
        cases: list[tuple[str | None, int, int]] = []
        alerts: list[str] = []
        # Each (contract version, case ID)'s first required set, as the batch starts one: the
        # batch reads the table once, before its loop, so the rows can wait for its end.
        firsts: list[tuple[str, str, str, str, str | None, str | None]] = []
        counted: set[int] = set()
        db = self._db
        with immediate(db):
            outcomes = self._outcomes({input_hash for input_hash, _ in items})
            known = self._writes(
                {
                    (outcomes[input_hash].id, write_id)
                    for (input_hash, _), write_id in zip(items, ids, strict=True)
                    if write_id and input_hash in outcomes
                }
            )
            contracts = self._contracts(
                {
                    (attempt.contract_version, attempt.case_id)
                    for _, attempt in items
                    if attempt.contract_version is not None and attempt.case_id is not None
                }
            )
            for (input_hash, given), write_id in zip(items, ids, strict=True):
                outcome = outcomes.get(input_hash)
                if (
                    outcome is not None
                    and write_id
                    and not outcome.expired(now)
                    and (kept := known.get((outcome.id, write_id))) is not None
                ):
                    results.append(_replayed(outcome, *kept))
                    continue
                drift = self._drift(
                    input_hash,
                    given,
                    contracts,
                    alerts=alerts,
                    firsts=firsts,
                    now=now,
                    expires_at=expires_at,
                )
                attempt = drifted(given) if drift else given
                if outcome is not None and outcome.expired(now):
                    known = {key: found for key, found in known.items() if key[0] != outcome.id}
                    counted.discard(outcome.id)
                    outcome, own = self._first(input_hash, attempt, expires_at, outcome.id)
                    outcomes[input_hash] = outcome
                elif outcome is None:
                    outcome, own = self._first(input_hash, attempt, expires_at, None)
                    outcomes[input_hash] = outcome
                else:
                    outcome.total += 1
                    counted.add(outcome.id)
                    cases.append((attempt.case_id, outcome.id, recorded_ms(attempt)))
                    result = _marked(
                        self._compare(input_hash, outcome, attempt, entries, now), drift
                    )
                    results.append(result)
                    found: str = result.cache
                    if result.alert is not None:
                        found = alert_json(result.alert)
                        alerts.append(found)
                    if write_id:
                        known[outcome.id, write_id] = (found, drift or None)
                        writes.append((outcome.id, write_id, outcome.total, found, drift or None))
                    continue
                cases.append((attempt.case_id, outcome.id, recorded_ms(attempt)))
                results.append(_marked(Recorded(cache="miss", first=attempt), drift))
                entries += [(outcome.id, own)] if keeps_own_entry(attempt) else []
                if write_id:
                    known[outcome.id, write_id] = ("miss", drift or None)
                    writes.append((outcome.id, write_id, 1, "miss", drift or None))
            self._store(
                entries,
                [(o.total, o.id) for o in outcomes.values() if o.id in counted],
                writes,
                alerts,
                ids,
                cases=cases,
                firsts=firsts,
            )
        return results

    def _first(
        self, input_hash: str, attempt: Attempt, expires_at: str | None, expired: int | None
    ) -> tuple[_Outcome, str]:
        """A hash's first attempt, kept in a new outcomes row or in the `expired` one's (its
        id), and the attempt's own entry."""
        first, outcome_text, shared, own = first_rows(attempt)
        # A compact first is not kept twice: its comparands are read out of it.
        compact = not keeps_own_entry(attempt)
        kept, outcome_kept = (None, None) if compact else (shared, outcome_text)
        db = self._db
        if expired is None:
            (outcome_id,) = db.execute(
                "INSERT INTO outcomes (input_hash, first_attempt, total_attempts,"
                " expires_at, outcome, shared) VALUES (?, ?, 1, ?, ?, ?) RETURNING id",
                (input_hash, first, expires_at, outcome_kept, kept),
            ).fetchone()
        else:
            # A new first outcome starts a new history. No entry of the old one is pending:
            # an earlier item under this hash would have restarted it already.
            for table in ("attempts", "writes", "conflicts_alerted", "case_hashes"):
                db.execute(f"DELETE FROM {table} WHERE outcome_id = ?", (expired,))
            db.execute(
                "UPDATE outcomes SET first_attempt = ?, total_attempts = 1,"
                " expires_at = ?, outcome = ?, shared = ? WHERE id = ?",
                (first, expires_at, outcome_kept, kept, expired),
            )
            outcome_id = expired
        return _Outcome(outcome_id, 1, attempt, expires_at, outcome_text, shared), own

    def _contracts(self, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], _Contract]:
        """The first required sets kept for these (contract version, case ID) pairs."""
        found: dict[tuple[str, str], _Contract] = {}
        ordered = sorted(pairs)
        for start in range(0, len(ordered), WRITES_PER_READ):
            chunk = ordered[start : start + WRITES_PER_READ]
            values = ",".join(["(?, ?)"] * len(chunk))
            rows = self._db.execute(
                f"WITH wanted (contract_version, case_id) AS (VALUES {values})"
                " SELECT c.contract_version, c.case_id, c.required, c.input_hash, c.task_id,"
                " c.expires_at FROM wanted CROSS JOIN contracts AS c"
                " ON c.contract_version = wanted.contract_version"
                " AND c.case_id = wanted.case_id",
                [value for pair in chunk for value in pair],
            )
            for contract_version, case_id, *fields in rows:
                found[contract_version, case_id] = _Contract(*fields)
        return found

    def _drift(
        self,
        input_hash: str,
        attempt: Attempt,
        contracts: dict[tuple[str, str], _Contract],
        *,
        alerts: list[str],
        firsts: list[tuple[str, str, str, str, str | None, str | None]],
        now: datetime,
        expires_at: str | None,
    ) -> str:
        """Contract drift for one attempt, as RECORD_LUA's drift(): "" when it keeps its
        pair's first required set (or starts it: its row appended to `firsts`, written with
        the batch's other rows), "1" for a drift alerted before, or the JSON of the drift
        alert raised now (appended to `alerts`)."""
        required = required_set_json(attempt)
        if not required or attempt.contract_version is None or attempt.case_id is None:
            return ""
        db = self._db
        pair = (attempt.contract_version, attempt.case_id)
        first = contracts.get(pair)
        if first is None or first.expired(now):
            if first is not None:  # its drifts go with it, as the Redis hash's fields do
                db.execute("DELETE FROM drifts WHERE contract_version = ? AND case_id = ?", pair)
            contracts[pair] = _Contract(required, input_hash, attempt.task_id, expires_at)
            firsts.append((*pair, required, input_hash, attempt.task_id, expires_at))
            return ""
        if first.required == required:
            return ""
        seen = db.execute(
            "SELECT 1 FROM drifts WHERE contract_version = ? AND case_id = ? AND required = ?",
            (*pair, required),
        ).fetchone()
        if seen is not None:
            return "1"
        first_set, later_set = json.loads(first.required), json.loads(required)
        text = ContractDriftAlert(
            case_id=attempt.case_id,
            contract_version=attempt.contract_version,
            first_required_claim_ids=first_set,
            required_claim_ids=later_set,
            added_claim_ids=sorted(set(later_set) - set(first_set)),
            removed_claim_ids=sorted(set(first_set) - set(later_set)),
            first_input_hash=first.input_hash,
            input_hash=input_hash,
            first_task_id=first.task_id,
            task_id=attempt.task_id,
            raised_at=now,
        ).model_dump_json()
        db.execute(
            "INSERT INTO drifts (contract_version, case_id, required, alert) VALUES (?, ?, ?, ?)",
            (*pair, required, text),
        )
        alerts.append(text)
        return text

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
            for input_hash, outcome_id, total, first, expires_at, outcome, shared in rows:
                # A compact first keeps what it is compared by in itself.
                comparands = None if shared is not None else kept_comparands(first)
                if comparands is None:
                    found[input_hash] = _Outcome(
                        outcome_id, total, first, expires_at, outcome, shared
                    )
                else:
                    found[input_hash] = _Outcome(outcome_id, total, first, expires_at, *comparands)
        return found

    def _writes(
        self, wanted: set[tuple[int, str]]
    ) -> dict[tuple[int, str], tuple[str, str | None]]:
        """What each of these (outcome id, write id) pairs found, and its drift, for those
        that are kept.

        CROSS JOIN keeps SQLite from scanning `writes`: it looks each pair up by primary key.
        """
        found: dict[tuple[int, str], tuple[str, str | None]] = {}
        ordered = sorted(wanted)
        for start in range(0, len(ordered), WRITES_PER_READ):
            chunk = ordered[start : start + WRITES_PER_READ]
            pairs = ",".join(["(?, ?)"] * len(chunk))
            rows = self._db.execute(
                f"WITH wanted (outcome_id, write_id) AS (VALUES {pairs})"
                " SELECT w.outcome_id, w.write_id, w.found, w.drift"
                " FROM wanted CROSS JOIN writes AS w"
                " ON w.outcome_id = wanted.outcome_id AND w.write_id = wanted.write_id",
                [value for pair in chunk for value in pair],
            )
            for outcome_id, write_id, text, drift in rows:
                found[outcome_id, write_id] = (text, drift)
        return found

    def _compare(
        self,
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
        # Each (first outcome, observed outcome) is alerted once: an outcome's row is its first.
        new = self._db.execute(
            "INSERT INTO conflicts_alerted (outcome_id, observed) VALUES (?, ?)"
            " ON CONFLICT DO NOTHING RETURNING 1",
            (outcome.id, outcome_json(attempt)),
        ).fetchone()
        if new is None:
            return Recorded(cache="conflict", first=first)
        alert = Alert(input_hash=input_hash, first=first, observed=attempt, raised_at=now)
        return Recorded(cache="conflict", first=first, alert=alert)

    def _store(
        self,
        entries: list[tuple[int, str]],
        totals: list[tuple[int, int]],
        writes: list[tuple[int, str, int, str, str | None]],
        alerts: list[str],
        write_ids: Sequence[str | None],
        *,
        cases: list[tuple[str | None, int, int]],
        firsts: list[tuple[str, str, str, str, str | None, str | None]],
    ) -> None:
        """The batch's rows, and the close of its write ids' ledger entries. `cases`: each
        attempt's (case ID, outcome id, recorded_ms()); a case keeps the time it first
        recorded the hash (in the hash's history: a new one drops the old one's rows).
        `firsts`: the contracts rows the batch started, in order."""
        db = self._db
        self._close(write_ids)
        db.executemany(
            "INSERT OR REPLACE INTO contracts (contract_version, case_id, required,"
            " input_hash, task_id, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
            firsts,
        )
        db.executemany(
            "INSERT OR IGNORE INTO case_hashes (case_id, outcome_id, recorded_ms) VALUES (?, ?, ?)",
            [case for case in cases if case[0] is not None],
        )
        db.executemany("UPDATE outcomes SET total_attempts = ? WHERE id = ?", totals)
        db.executemany("INSERT INTO attempts (outcome_id, attempt) VALUES (?, ?)", entries)
        db.executemany(
            "INSERT INTO writes (outcome_id, write_id, number, found, drift)"
            " VALUES (?, ?, ?, ?, ?)",
            writes,
        )
        # Bounded per hash: the newest attempts and their write ids stay; the first is also
        # kept in `outcomes`. A hash never recorded more often than the bound has nothing to trim.
        over = [
            (outcome_id, total)
            for total, outcome_id in totals
            if total > self.max_attempts_per_hash
        ]
        db.executemany(
            "DELETE FROM attempts WHERE outcome_id = ? AND id <= (SELECT id FROM attempts"
            " WHERE outcome_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            [(outcome_id, outcome_id, self.max_attempts_per_hash) for outcome_id, _ in over],
        )
        db.executemany(
            "DELETE FROM writes WHERE outcome_id = ? AND number <= ?",
            [(outcome_id, total - self.max_attempts_per_hash) for outcome_id, total in over],
        )
        if alerts:
            db.executemany("INSERT INTO alerts (alert) VALUES (?)", [(a,) for a in alerts])
            db.execute(
                "DELETE FROM alerts WHERE id <= (SELECT MAX(id) FROM alerts) - ?", (MAX_ALERTS,)
            )

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        rows = self._db.execute("SELECT input_hash, first_attempt FROM outcomes").fetchall()
        for input_hash, first in rows:
            yield input_hash, Attempt.model_validate_json(first)

    def first_outcomes_by_time(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> Iterator[tuple[str, Attempt]]:
        """SQLite's sorter orders (time, hash, id), spilling to temporary files past its cache
        (no index, no schema change: docs/records.md has the measurement); the first attempts
        are then read by id a batch at a time, so neither the sort nor the rows are ever all
        in this process's memory. The time is recorded_ms() of the kept recorded_at, computed
        in Python (SQLite's own date functions round to the millisecond where it truncates).
        A row deleted since the sort (prune --outcomes) is left out."""
        db = self._db
        db.create_function("recorded_ms", 1, _recorded_ms, deterministic=True)
        low, high = ms_bounds(since, until)
        order = db.execute(
            "SELECT id FROM (SELECT id, input_hash,"
            " recorded_ms(json_extract(first_attempt, '$.recorded_at')) AS ms FROM outcomes)"
            " WHERE ms >= ? AND ms < ? ORDER BY ms, input_hash",
            (low, high),
        )
        while ids := [outcome_id for (outcome_id,) in order.fetchmany(OUTCOMES_PER_READ)]:
            rows = {
                outcome_id: (input_hash, first)
                for outcome_id, input_hash, first in db.execute(
                    "SELECT id, input_hash, first_attempt FROM outcomes"
                    f" WHERE id IN ({','.join('?' * len(ids))})",
                    ids,
                )
            }
            for outcome_id in ids:
                if (row := rows.get(outcome_id)) is not None:
                    yield row[0], Attempt.model_validate_json(row[1])

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
            attempts=with_first(
                first,
                Expander(first).attempts(text for (text,) in entries),
                row[2],
                self.max_attempts_per_hash,
            ),
            total_attempts=row[2],
            expires_at=datetime.fromisoformat(row[3]) if row[3] else None,
        )

    def histories(self, input_hashes: Sequence[str]) -> list[History | None]:
        # A local file: a query per hash costs no round trip.
        return [self.history(input_hash) for input_hash in input_hashes]

    def recorded_writes(self, writes: Sequence[tuple[str, str]]) -> list[bool]:
        """As record_many() finds a replay: the write id kept under its hash's outcome, which
        has not expired."""
        now = datetime.now(UTC)
        outcomes = {
            input_hash: outcome
            for input_hash, outcome in self._outcomes({h for h, _ in writes}).items()
            if not outcome.expired(now)
        }
        known = self._writes({(outcomes[h].id, w) for h, w in writes if h in outcomes})
        return [h in outcomes and (outcomes[h].id, w) in known for h, w in writes]

    def first_required(self, contract_version: str, case_id: str) -> FirstRequired | None:
        pair = (contract_version, case_id)
        first = self._contracts({pair}).get(pair)
        if first is None or first.expired(datetime.now(UTC)):
            return None  # an expired first no longer counts: the next valid row starts anew
        return FirstRequired(json.loads(first.required), first.input_hash)

    def hashes_for_case(self, case_id: str, limit: int | None = None) -> list[str]:
        """As history() does, an outcome past its expiry is still listed until a new attempt
        of its hash starts a new history (which drops every case's entry of the old one)."""
        rows = self._db.execute(
            "SELECT o.input_hash FROM case_hashes AS c JOIN outcomes AS o ON o.id = c.outcome_id"
            " WHERE c.case_id = ? ORDER BY c.recorded_ms DESC, o.input_hash DESC LIMIT ?",
            (case_id, -1 if limit is None else max(limit, 0)),  # SQLite: -1 is no limit
        )
        return [input_hash for (input_hash,) in rows]

    def alerts(
        self, limit: int = 100, *, since: datetime | None = None, kind: AlertKind | None = None
    ) -> list[AnyAlert]:
        if since is not None or kind is not None:
            return newest_since(self._alerts_newest_first(), since, limit, kind)
        rows = self._db.execute(
            "SELECT alert FROM (SELECT id, alert FROM alerts ORDER BY id DESC LIMIT ?) ORDER BY id",
            (max(limit, 0),),  # SQLite reads a negative LIMIT as "no limit"
        )
        return [parse_alert(text) for (text,) in rows]

    def _alerts_newest_first(self) -> Iterator[AnyAlert]:
        """Every alert in reverse arrival order, read a page at a time as the caller goes."""
        up_to = MAX_ROWID
        while True:
            rows = self._db.execute(
                "SELECT id, alert FROM alerts WHERE id <= ? ORDER BY id DESC LIMIT ?",
                (up_to, ALERT_PAGE),
            ).fetchall()
            for row_id, text in rows:
                up_to = row_id - 1
                yield parse_alert(text)
            if len(rows) < ALERT_PAGE:
                return

    def alert_count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM alerts").fetchone()[0])

    def dead_letter(self, *letters: DeadLetter) -> None:
        if not letters:
            return
        with immediate(self._db):
            self._db.executemany(
                "INSERT INTO dead_letters (letter) VALUES (?)",
                [(letter_json(letter, self.dead_letter_max_bytes),) for letter in letters],
            )
            self._db.execute(
                "DELETE FROM dead_letters WHERE id <= (SELECT MAX(id) FROM dead_letters) - ?",
                (MAX_DEAD_LETTERS,),
            )
            self._close_letters(letters)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self._db.execute(
            "SELECT letter FROM (SELECT id, letter FROM dead_letters ORDER BY id DESC LIMIT ?)"
            " ORDER BY id",
            (max(limit, 0),),
        )
        return [read_letter(text) for (text,) in rows]

    def count_delivery(self, task_id: str) -> int:
        with immediate(self._db):
            row = self._db.execute(
                "INSERT INTO deliveries (task_id, count) VALUES (?, 1)"
                " ON CONFLICT (task_id) DO UPDATE SET count = count + 1 RETURNING count",
                (task_id,),
            ).fetchone()
        return int(row[0])

    def forget_deliveries(self, task_id: str) -> None:
        with immediate(self._db):
            self._db.execute("DELETE FROM deliveries WHERE task_id = ?", (task_id,))

    def prune(
        self,
        before: datetime,
        *,
        now: datetime,
        outcomes: bool = False,
        progress: Callable[[Pruned], None] | None = None,
    ) -> Pruned:
        """Drop expired histories and the entries recorded before `before` (with `outcomes`,
        the histories first recorded before it too): worker/stores/sqlite/sqlite_prune.py."""
        return prune(self._db, before=before, now=now, outcomes=outcomes, progress=progress)

    def vacuum(self) -> None:
        """Give the pages freed back to the file system (VACUUM: a rewrite of the file)."""
        self._db.execute("VACUUM")

    def close(self) -> None:
        self._db.close()
