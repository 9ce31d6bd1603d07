"""`stability` and the report's Graders section: contracts.grader_stability's tally fed from
its two sources, a store's histories or record lines (SPEC §10).

A window (`since`) selects attempts, never moves the reference: each attempt recorded at or
after it is compared with its hash's first outcome, wherever that first lies in time. An
attempt or a record line that names no grader (kept before graders were named) is counted
apart: it cannot be put under one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Any, NamedTuple

from contracts import Attempt
from contracts.grader_stability import (
    GraderId,
    GraderStability,
    StabilityTally,
    least_stable_first,
    outcome_key,
)
from contracts.record_models import SCORED
from worker.stores import OutcomeStore
from worker.stores.contract import History

HISTORY_PAGE = 500  # input hashes whose histories one round trip reads


class Said(NamedTuple):
    """One attempt's outcome as a record line gives it."""

    value: float | None
    reason: str


@dataclass(frozen=True)
class Stability:
    """The rows, least stable first, and what could not be put under a grader."""

    rows: list[GraderStability]
    unnamed: int = 0  # input hashes (store) or record lines that name no grader


def grader_of(attempts: Iterable[Attempt]) -> GraderId | None:
    """The grader named by the first of `attempts` that names one (a hash's attempts share
    their grader: the input hash covers it)."""
    for attempt in attempts:
        if attempt.grader_name is not None:
            return GraderId(
                attempt.grader_name, attempt.grader_version or "", attempt.grader_model or ""
            )
    return None


def store_stability(store: OutcomeStore, since: datetime | None = None) -> Stability:
    """Per grader over every input hash the store keeps: its first attempt, then the later
    ones it still holds (a history trimmed to the newest max_attempts_per_hash compares those
    with the first). With `since`, a hash counts when its first or a later attempt was
    recorded at or after it."""
    count = StoreStability(since)
    for _, first, history in with_histories(store):
        count.add(first, history)
    return count.stability()


class StoreStability:
    """store_stability()'s count, a hash at a time: a store gives each hash once with all its
    attempts, so it is counted per grader as it goes and memory does not grow with the hashes
    (`report --store` counts it in the same pass as its rows)."""

    def __init__(self, since: datetime | None = None) -> None:
        self.since = since
        self.counts: dict[GraderId, list[int]] = {}  # inputs, re-graded, flipped
        self.unnamed = 0

    def add(self, first: Attempt, history: History | None) -> None:
        """One hash: its first attempt and its history (None: expired between the reads)."""
        if history is None:
            return
        attempts, since = history.attempts, self.since
        # The first leads the attempts exactly when none was trimmed (stores' with_first()).
        later = attempts[1:] if len(attempts) == history.total_attempts else attempts
        if since is not None:
            later = [attempt for attempt in later if _at_or_after(attempt.recorded_at, since)]
            if not later and not _at_or_after(first.recorded_at, since):
                return
        grader = grader_of([first, *later])
        if grader is None:
            self.unnamed += 1
            return
        counted = self.counts.setdefault(grader, [0, 0, 0])
        counted[0] += 1
        counted[1] += bool(later)
        key = outcome_key(first)
        counted[2] += any(outcome_key(attempt) != key for attempt in later)

    def stability(self) -> Stability:
        rows = [GraderStability(grader, *counted) for grader, counted in self.counts.items()]
        return Stability(least_stable_first(rows), self.unnamed)


def with_histories(
    store: OutcomeStore,
) -> Iterator[tuple[str, Attempt, History | None]]:
    """Each first outcome by time, with its history, read HISTORY_PAGE hashes at a time (one
    round trip a page on Redis, where a read per hash made `stability --store` 2.5 times
    slower than `records`)."""
    firsts = iter(store.first_outcomes_by_time())
    while page := list(islice(firsts, HISTORY_PAGE)):
        histories = store.histories([input_hash for input_hash, _ in page])
        for (input_hash, first), history in zip(page, histories, strict=True):
            yield input_hash, first, history


def records_stability(
    lines: Iterable[tuple[int, bytes]], since: datetime | None = None
) -> Stability:
    """Per grader over record lines (the worker's or score's), in file order. A line's own
    outcome is value/reason on a miss and observed_value/observed_reason on a hit or a
    conflict, whose value/reason is the first outcome: a hash whose first line in the file is
    a hit or a conflict has its first taken from it, so a file cut mid-stream still counts
    the re-grade. Lines that are not scored records, or unreadable, are passed over."""
    tally, unnamed = StabilityTally(), 0
    for _, body in lines:
        line = _scored(body)
        if line is None:
            continue
        if since is not None:
            moment = _moment(line.get("recorded_at") or line.get("timestamp"))
            if moment is None or not _at_or_after(moment, since):
                continue
        name = line.get("grader_name")
        if not isinstance(name, str):
            unnamed += 1
            continue
        grader = GraderId(name, str(line.get("grader_version")), str(line.get("grader_model")))
        first = Said(line.get("value"), str(line.get("reason")))
        cache = line.get("cache")
        repeat = cache in ("hit", "conflict")
        own = (
            Said(line.get("observed_value"), str(line.get("observed_reason"))) if repeat else first
        )
        tally.add_line(grader, line["input_hash"], cache, first, own)
    return Stability(least_stable_first(tally.rows()), unnamed)


def _scored(body: bytes) -> dict[str, Any] | None:
    """A scored record line's fields; None for any other line."""
    try:
        line = json.loads(body)
    except ValueError:
        return None
    if (
        not isinstance(line, dict)
        or line.get("event") != SCORED
        or not isinstance(line.get("input_hash"), str)
    ):
        return None
    return line


def _moment(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _at_or_after(moment: datetime, since: datetime) -> bool:
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)) >= since
