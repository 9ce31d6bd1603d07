"""The store contract: keep the first outcome per hash, append every attempt, never overwrite."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from contracts import Alert, Attempt
from contracts.outcomes import CacheOutcome


class Recorded(BaseModel):
    """What recording one attempt found: the canonical first attempt and how this one compares."""

    model_config = ConfigDict(frozen=True)

    cache: CacheOutcome
    first: Attempt
    alert: Alert | None = None


class History(BaseModel):
    """Everything kept for one input hash, for `show` and the canary."""

    model_config = ConfigDict(frozen=True)

    input_hash: str
    first: Attempt
    attempts: list[Attempt]
    total_attempts: int
    expires_at: datetime | None = None


class DeadLetter(BaseModel):
    """A message that could not be scored, kept whole with the error that rejected it."""

    model_config = ConfigDict(frozen=True)

    received_at: datetime
    error: str
    body: str
    task_id: str | None = None


def classify(first: Attempt, attempt: Attempt) -> CacheOutcome:
    """hit when (value, reason) agree exactly with the first attempt, conflict otherwise."""
    return "hit" if first.outcome == attempt.outcome else "conflict"


class ResultStore(Protocol):
    """First-writer-wins outcomes, attempts, alerts and dead letters.

    record() is atomic: of several writers racing on one new hash exactly one sees `miss`.
    A conflict's alert is appended to the alert log in the same transaction (SQLite) or in
    the call right after (Redis, whose global stream cannot share a Cluster slot with the
    hash's keys); a crash in between leaves the message unacknowledged, so its redelivery
    conflicts again and raises the alert then.
    """

    def record(self, input_hash: str, attempt: Attempt, *, now: datetime) -> Recorded: ...

    def record_many(
        self, items: Sequence[tuple[str, Attempt]], *, now: datetime
    ) -> list[Recorded]: ...

    def history(self, input_hash: str) -> History | None: ...

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        """Every stored (input hash, first attempt), in no particular order (for the canary)."""
        ...

    def alerts(self, limit: int = 100) -> list[Alert]: ...

    def dead_letter(self, *letters: DeadLetter) -> None:
        """Keep each letter whole in a bounded list; one round trip however many there are."""
        ...

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]: ...

    def count_delivery(self, task_id: str) -> int:
        """Count one more delivery of a task id; returns the count so far (bounds poison loops)."""
        ...

    def close(self) -> None: ...
