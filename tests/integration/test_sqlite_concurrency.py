"""Several OS processes racing on one new input hash: exactly one first writer, nothing lost.

The SQLite store serializes writers with BEGIN IMMEDIATE; the Redis store with one Lua script
per attempt. Both are raced here by spawned processes released together by a barrier.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contracts import Alert, Attempt
from tests import factories
from tests.conftest import FIXED_NOW
from tests.integration.store_factories import write_version_0_sqlite
from worker.stores import ResultStore
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore

pytestmark = pytest.mark.integration

PROCESSES = 6
ROUNDS = 5
BARRIER_TIMEOUT_SECONDS = 90
RESULT_TIMEOUT_SECONDS = 100

AGREEING = (2 / 3, "supported=2; required=3; missing=refund-method")
DISAGREEING = (1 / 3, "supported=1; required=3; missing=refund-method,support-channel")


def race_hash(round_: int) -> str:
    return f"{round_ + 1:064x}"


def outcome_of(process: int, round_: int) -> tuple[float, str]:
    """Four processes agree and two disagree per round, a different two each round."""
    return DISAGREEING if (process + round_) % 3 == 0 else AGREEING


def race_attempt(process: int, round_: int) -> Attempt:
    value, reason = outcome_of(process, round_)
    return factories.attempt(
        case_id=f"case-p{process}-r{round_}",
        task_id=f"task-p{process}-r{round_}",
        supported_claim_ids=["refund-window"],
        value=value,
        reason=reason,
        worker_version="0.1.0",
    )


def open_race_store(spec: tuple[str, str, str]) -> ResultStore:
    kind, location, prefix = spec
    if kind == "sqlite":
        return SQLiteStore(location)
    return RedisStore.from_url(location, prefix=prefix)


def racer(process: int, barrier: Any, results: Any, spec: tuple[str, str, str]) -> None:
    """Child process: open the store when released, then record one attempt per round."""
    try:
        barrier.wait(BARRIER_TIMEOUT_SECONDS)
        store = open_race_store(spec)
        try:
            for round_ in range(ROUNDS):
                barrier.wait(BARRIER_TIMEOUT_SECONDS)
                recorded = store.record(
                    race_hash(round_), race_attempt(process, round_), now=FIXED_NOW
                )
                results.put(("seen", round_, Seen(process, recorded.cache, recorded.first.case_id)))
        finally:
            store.close()
    except BaseException:
        results.put(("error", process, traceback.format_exc()))
        barrier.abort()
    finally:
        results.put(("done", process, None))


def opener(process: int, barrier: Any, results: Any, path: str, files: int) -> None:
    """Child process: open each new SQLite file at the same moment as the others."""
    try:
        for n in range(files):
            barrier.wait(BARRIER_TIMEOUT_SECONDS)
            SQLiteStore(Path(path) / f"fresh-{n}.sqlite3").close()
            results.put(("opened", process, n))
    except BaseException:
        results.put(("error", process, traceback.format_exc()))
        barrier.abort()
    finally:
        results.put(("done", process, None))


def legacy_opener(process: int, barrier: Any, results: Any, path: str) -> None:
    """Child process: open a file of the previous schema at the same moment as the others and
    record one attempt under the hash it holds."""
    try:
        barrier.wait(BARRIER_TIMEOUT_SECONDS)
        store = SQLiteStore(path)
        try:
            recorded = store.record(race_hash(0), race_attempt(process, 1), now=FIXED_NOW)
            results.put(("seen", process, recorded.cache))
        finally:
            store.close()
    except BaseException:
        results.put(("error", process, traceback.format_exc()))
        barrier.abort()
    finally:
        results.put(("done", process, None))


@dataclass(frozen=True)
class Seen:
    """What one process saw when recording in one round."""

    process: int
    cache: str
    first_case_id: str | None


def run_processes(target: Any, *args: Any) -> list[tuple[str, Any, Any]]:
    """Run PROCESSES spawned children on one barrier until all are done; return their reports.

    A child's failure is re-raised here with its traceback (the root cause before the
    BrokenBarrierErrors it causes in the others).
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    children = [
        context.Process(target=target, args=(n, barrier, results, *args)) for n in range(PROCESSES)
    ]
    for child in children:
        child.start()
    reports: list[tuple[str, Any, Any]] = []
    deadline = time.monotonic() + RESULT_TIMEOUT_SECONDS
    try:
        while sum(kind == "done" for kind, *_ in reports) < PROCESSES:
            try:
                reports.append(results.get(timeout=max(deadline - time.monotonic(), 0.1)))
            except queue.Empty:
                break
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.kill()
                child.join()
    errors = [details for kind, _, details in reports if kind == "error"]
    errors.sort(key=lambda details: "BrokenBarrierError" in details)
    assert errors == [], errors[0]
    assert [child.exitcode for child in children] == [0] * PROCESSES
    return [report for report in reports if report[0] not in {"done", "error"}]


def race(spec: tuple[str, str, str]) -> dict[int, list[Seen]]:
    """Race PROCESSES processes over ROUNDS new hashes; return what each saw, per round."""
    reports = run_processes(racer, spec)
    assert len(reports) == PROCESSES * ROUNDS
    rounds: dict[int, list[Seen]] = {round_: [] for round_ in range(ROUNDS)}
    for _, round_, seen in reports:
        rounds[round_].append(seen)
    return rounds


def check_round(store: ResultStore, round_: int, outcomes: list[Seen]) -> None:
    """Exactly one miss; the others agree with the winner's outcome or conflict with it."""
    input_hash = race_hash(round_)
    winners = [o.process for o in outcomes if o.cache == "miss"]
    assert len(winners) == 1, f"round {round_}: misses by processes {winners}"
    winner = winners[0]
    winner_attempt = race_attempt(winner, round_)
    expected = {
        o.process: "miss"
        if o.process == winner
        else ("hit" if outcome_of(o.process, round_) == outcome_of(winner, round_) else "conflict")
        for o in outcomes
    }
    assert {o.process: o.cache for o in outcomes} == expected
    assert {o.first_case_id for o in outcomes} == {winner_attempt.case_id}

    history = store.history(input_hash)
    assert history is not None
    assert history.first == winner_attempt
    assert history.total_attempts == PROCESSES
    assert history.attempts[0] == winner_attempt
    assert sorted(a.case_id or "" for a in history.attempts) == sorted(
        race_attempt(p, round_).case_id or "" for p in range(PROCESSES)
    )

    conflicts = sorted(o.process for o in outcomes if o.cache == "conflict")
    alerts = [
        alert
        for alert in store.alerts(limit=1000, kind="nondeterminism")
        if isinstance(alert, Alert) and alert.input_hash == input_hash
    ]
    # One alert per distinct conflicting outcome, observed by whichever of its processes won.
    by_outcome: dict[tuple[float, str], set[str]] = {}
    for process in conflicts:
        by_outcome.setdefault(outcome_of(process, round_), set()).add(
            race_attempt(process, round_).case_id or ""
        )
    assert len(alerts) == len(by_outcome)
    for alert in alerts:
        observed = alert.observed
        assert observed.value is not None
        assert (observed.case_id or "") in by_outcome[observed.value, observed.reason]
    assert all(alert.first == winner_attempt for alert in alerts)


@pytest.fixture
def open_sqlite() -> Iterator[Callable[[Path], SQLiteStore]]:
    """Open SQLite stores in the test process; close them afterwards."""
    opened: list[SQLiteStore] = []

    def open_(path: Path) -> SQLiteStore:
        store = SQLiteStore(path)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def test_sqlite_processes_racing_on_a_new_hash_have_one_winner(
    tmp_path: Path, open_sqlite: Callable[[Path], SQLiteStore]
) -> None:
    """Six processes recording one new hash into one SQLite file: one miss, nothing lost."""
    path = tmp_path / "race.sqlite3"

    rounds = race(("sqlite", str(path), ""))

    store = open_sqlite(path)
    for round_, outcomes in rounds.items():
        check_round(store, round_, outcomes)
    # Each round's disagreeing processes share one outcome: one alert per round with any.
    assert len(store.alerts(limit=1000)) == sum(
        any(o.cache == "conflict" for o in outcomes) for outcomes in rounds.values()
    )


def test_sqlite_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Six processes opening the same new SQLite file at once all get a store, 20 times over."""
    files = 20

    reports = run_processes(opener, str(tmp_path), files)

    assert sorted(reports) == sorted(
        ("opened", process, n) for process in range(PROCESSES) for n in range(files)
    )


def test_sqlite_processes_opening_a_previous_version_file_at_once_migrate_it_once(
    tmp_path: Path, open_sqlite: Callable[[Path], SQLiteStore]
) -> None:
    """Six processes opening a file of the previous schema at once: each records beside the
    attempts it held, which all read back."""
    path = tmp_path / "legacy.sqlite3"
    kept = [race_attempt(process, 0) for process in (1, 2)]  # agree with one another
    write_version_0_sqlite(path, {race_hash(0): kept}, expires_at=None)

    reports = run_processes(legacy_opener, str(path))

    seen = sorted(cache for kind, _, cache in reports if kind == "seen")
    history = open_sqlite(path).history(race_hash(0))
    assert history is not None
    assert history.first == kept[0]
    assert history.attempts[:2] == kept
    assert sorted(a.case_id or "" for a in history.attempts[2:]) == sorted(
        f"case-p{process}-r1" for process in range(PROCESSES)
    )
    assert history.total_attempts == 2 + PROCESSES
    assert seen == sorted(
        "hit" if outcome_of(process, 1) == outcome_of(1, 0) else "conflict"
        for process in range(PROCESSES)
    )


def test_redis_processes_racing_on_a_new_hash_have_one_winner(
    redis_url: str, key_prefix: str
) -> None:
    """Six processes recording one new hash into one Redis: one miss, nothing lost."""
    rounds = race(("redis", redis_url, key_prefix))

    store = RedisStore.from_url(redis_url, prefix=key_prefix)
    try:
        for round_, outcomes in rounds.items():
            check_round(store, round_, outcomes)
        assert len(store.alerts(limit=1000)) == sum(
            any(o.cache == "conflict" for o in outcomes) for outcomes in rounds.values()
        )
    finally:
        store.close()
