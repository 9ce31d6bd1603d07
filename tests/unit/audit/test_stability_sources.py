"""Grader stability read from a store's histories and from record lines (SPEC §10)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from contracts import AttributionResult
from contracts.grader_stability import GraderId, GraderStability, least_stable_first
from tests import factories
from tests.conftest import FIXED_NOW
from worker.audit import stability_sources
from worker.audit.stability_sources import Stability, records_stability, store_stability
from worker.pipeline.scoring import process
from worker.stores import OutcomeStore
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore

OLD = GraderId("claim-attributor", "3.2.0", "gpt-4o-mini-2024-07-18")
NEW = GraderId("claim-attributor", "4.0.0", "gpt-4.1-mini")
NEW_GRADER = {"name": NEW.name, "version": NEW.version, "model": NEW.model, "prompt": "p"}
ALL = ["refund-window", "refund-method", "support-channel"]


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OutcomeStore]:
    """An empty store of each kind: SQLite and Redis (fakeredis, with the Lua script)."""
    opened: Any = (
        SQLiteStore(tmp_path / "s.sqlite3")
        if request.param == "sqlite"
        else RedisStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="unit")
    )
    yield opened
    opened.close()


def grade(
    store: OutcomeStore,
    message: Callable[..., AttributionResult],
    case: str,
    *,
    supported: list[str] | None = None,
    at: datetime = FIXED_NOW,
    **fields: Any,
) -> None:
    """One grading of `case`'s inputs (the base message's, its answer marked with the case: a
    hash covers the answer, not the case ID), `supported` as the grader said."""
    graded = message(
        case_id=case,
        answer=f"Returns are accepted within 30 days. Reach support through live chat. {case}",
        supported_claim_ids=supported or ["refund-window", "support-channel"],
        **fields,
    )
    process(graded, store=store, policy=None, clock=lambda: at)


def test_a_store_counts_inputs_regrades_and_flips_per_grader(
    store: OutcomeStore, message: Callable[..., AttributionResult]
) -> None:
    """Two confirmations and a flip among three inputs; another grader's input apart."""
    grade(store, message, "c-1")
    grade(store, message, "c-1", at=FIXED_NOW + timedelta(seconds=1))
    grade(store, message, "c-2")
    grade(store, message, "c-2", supported=ALL, at=FIXED_NOW + timedelta(seconds=1))
    grade(store, message, "c-2", at=FIXED_NOW + timedelta(seconds=2))
    grade(store, message, "c-3")
    grade(store, message, "c-1", grader=NEW_GRADER)

    assert store_stability(store) == Stability(
        [GraderStability(OLD, 3, 2, 1), GraderStability(NEW, 1, 0, 0)]
    )


def test_since_selects_attempts_each_compared_with_its_first(
    store: OutcomeStore, message: Callable[..., AttributionResult]
) -> None:
    """A flip after `since` counts against a first before it; a hash idle since does not."""
    grade(store, message, "c-1")
    grade(store, message, "c-1", supported=ALL, at=FIXED_NOW + timedelta(hours=2))
    grade(store, message, "c-2")
    grade(store, message, "c-2", at=FIXED_NOW + timedelta(seconds=1))

    since = FIXED_NOW + timedelta(hours=1)

    assert store_stability(store, since=since) == Stability([GraderStability(OLD, 1, 1, 1)])
    assert store_stability(store, since=since + timedelta(hours=2)) == Stability([])


def test_an_input_kept_before_graders_were_named_is_counted_apart(
    store: OutcomeStore, message: Callable[..., AttributionResult]
) -> None:
    """An attempt without grader_* (an earlier version's) is under no grader."""
    store.record("a" * 64, factories.attempt(), now=FIXED_NOW)
    grade(store, message, "c-1")

    assert store_stability(store) == Stability([GraderStability(OLD, 1, 0, 0)], unnamed=1)


def line(cache: str, value: float | None, reason: str, **fields: Any) -> tuple[int, bytes]:
    """A scored record line of hash h-1 by OLD: its first outcome (value, reason) and, on a
    hit or a conflict, its own in observed_*."""
    record: dict[str, Any] = {
        "event": "evidence_coverage.scored",
        "input_hash": "h-1",
        "grader_name": OLD.name,
        "grader_version": OLD.version,
        "grader_model": OLD.model,
        "value": value,
        "reason": reason,
        "cache": cache,
        "recorded_at": "2026-12-01T12:00:00Z",
        **fields,
    }
    return 0, json.dumps(record).encode()


HALF, ONE = (0.5, "supported=1; required=2"), (1.0, "supported=2; required=2")


@pytest.mark.parametrize(
    ("lines", "counts"),
    [
        pytest.param([line("miss", *HALF)], (1, 0, 0), id="miss"),
        pytest.param(
            [line("miss", *HALF), line("hit", *HALF, observed_value=0.5, observed_reason=HALF[1])],
            (1, 1, 0),
            id="miss-hit",
        ),
        pytest.param(
            [
                line("miss", *HALF),
                line("conflict", *HALF, observed_value=1.0, observed_reason=ONE[1]),
            ],
            (1, 1, 1),
            id="miss-conflict",
        ),
        pytest.param(
            [line("hit", *HALF, observed_value=0.5, observed_reason=HALF[1])],
            (1, 1, 0),
            id="a-file-cut-after-the-miss-hit",
        ),
        pytest.param(
            [line("conflict", *HALF, observed_value=1.0, observed_reason=ONE[1])],
            (1, 1, 1),
            id="a-file-cut-after-the-miss-conflict",
        ),
        pytest.param(
            [
                line("miss", *HALF),
                line("conflict", *HALF, observed_value=1.0, observed_reason=ONE[1]),
                line("hit", *HALF, observed_value=0.5, observed_reason=HALF[1]),
            ],
            (1, 1, 1),
            id="flipped-once-is-flipped",
        ),
        pytest.param(
            [
                line("miss", *HALF),
                line("miss", *ONE, input_hash="h-2"),
                line("hit", *ONE, input_hash="h-2", observed_value=1.0, observed_reason=ONE[1]),
            ],
            (2, 1, 0),
            id="two-inputs",
        ),
    ],
)
def test_record_lines_count_as_their_attempts(
    lines: list[tuple[int, bytes]], counts: tuple[int, int, int]
) -> None:
    """A line's own outcome is value/reason on a miss, observed_* on a hit or a conflict."""
    assert records_stability(lines) == Stability([GraderStability(OLD, *counts)])


def test_record_lines_that_are_not_scored_records_are_passed_over() -> None:
    """Unreadable lines, other events and lines without a hash count for nothing; a scored
    line without grader_* (an earlier version's) is counted apart."""
    lines = [
        (1, b"not json"),
        (2, b'{"event": "evidence_coverage.rejected", "input_hash": null}'),
        (3, b'{"event": "evidence_coverage.nondeterminism", "input_hash": "h-1"}'),
        (4, b"[1, 2]"),
        line("miss", *HALF, grader_name=None),
        line("miss", *HALF),
    ]

    assert records_stability(lines) == Stability([GraderStability(OLD, 1, 0, 0)], unnamed=1)


def test_since_selects_record_lines_by_their_time() -> None:
    """A line recorded before `since`, or without a time, is left out."""
    lines = [
        line("miss", *HALF, recorded_at="2026-12-01T11:59:59Z"),
        line("conflict", *HALF, observed_value=1.0, observed_reason=ONE[1]),
        line("miss", *ONE, input_hash="h-2", recorded_at=None),
    ]

    since = datetime.fromisoformat("2026-12-01T12:00:00+00:00")

    assert records_stability(lines, since=since) == Stability([GraderStability(OLD, 1, 1, 1)])


def test_rows_are_least_stable_first_and_unknown_last() -> None:
    """By flip_rate_low descending; ties by grader; nothing re-graded last."""
    rows = [
        GraderStability(GraderId("c", "1", "m"), 5, 0, 0),
        GraderStability(GraderId("b", "1", "m"), 50, 40, 2),
        GraderStability(GraderId("a", "1", "m"), 50, 40, 2),
        GraderStability(GraderId("d", "1", "m"), 50, 40, 20),
    ]

    assert [row.grader.name for row in least_stable_first(rows)] == ["d", "a", "b", "c"]


def test_a_store_s_histories_are_read_a_page_at_a_time(
    store: OutcomeStore, message: Callable[..., AttributionResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One histories() call per page of first outcomes (a round trip each on Redis), never
    one per hash; the figures are the same as read whole."""
    for case in ("c-1", "c-2", "c-3", "c-4", "c-5"):
        grade(store, message, case)
    grade(store, message, "c-4", supported=ALL, at=FIXED_NOW + timedelta(seconds=1))
    whole = store_stability(store)
    pages: list[list[str]] = []
    read = store.histories

    def counted(input_hashes: list[str]) -> list[Any]:
        pages.append(list(input_hashes))
        return read(input_hashes)

    monkeypatch.setattr(store, "histories", counted)
    monkeypatch.setattr(stability_sources, "HISTORY_PAGE", 2)

    assert store_stability(store) == whole == Stability([GraderStability(OLD, 5, 1, 1)])
    assert [len(page) for page in pages] == [2, 2, 1]
