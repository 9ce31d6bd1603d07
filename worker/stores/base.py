"""The store contract: keep the first outcome per hash, append every attempt, never overwrite."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from contracts import Alert, Attempt
from contracts.outcomes import CacheOutcome


class Recorded:
    """What recording one attempt found: how it compares with the first attempt, the first
    attempt itself, and a conflict's alert.

    A store may hand the first attempt over as the JSON it keeps; it is parsed when asked for.
    A hit's outcome is the attempt's own (that is what a hit is), so the worker asks only on a
    conflict, and a re-run of known inputs parses nothing it does not need.
    """

    __slots__ = ("_first", "alert", "cache")

    def __init__(
        self, cache: CacheOutcome, first: Attempt | str | bytes, alert: Alert | None = None
    ) -> None:
        self.cache = cache
        self._first = first
        self.alert = alert

    @property
    def first(self) -> Attempt:
        if not isinstance(self._first, Attempt):
            self._first = Attempt.model_validate_json(self._first)
        return self._first

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Recorded):
            return NotImplemented
        return (self.cache, self.first, self.alert) == (other.cache, other.first, other.alert)

    __hash__ = None  # type: ignore[assignment]  # equal by value, and not immutable

    def __repr__(self) -> str:
        return f"Recorded(cache={self.cache!r}, first={self.first!r}, alert={self.alert!r})"


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


def outcome_json(attempt: Attempt) -> str:
    """The definition of "same outcome": two attempts agree exactly when these strings are equal.

    classify() compares them, and the Redis script compares them too (stored beside each first
    attempt), so both stores decide hit or conflict by this one string: the value spelled as
    json writes it (repr: exact, so 0.5 and 0.50000000001 differ and -0.0 is not 0.0) and the
    reason verbatim (whitespace counts). A non-finite value is spelled as the stores keep it,
    null (pydantic writes NaN and infinities as null), so an outcome compares the same before
    and after a round trip through either store. The spelling must never change, as Redis keeps
    these strings from earlier versions: it is `json.dumps([value, reason], ensure_ascii=False)`,
    written out because it runs several times per attempt.
    """
    return f"[{value_json(attempt.value)}, {encode_basestring(attempt.reason)}]"


def value_json(value: float | None) -> str:
    """A metric value as outcome_json() spells it, also valid JSON for an attempt's `value`."""
    if value is None or not math.isfinite(value):
        return "null"
    return float.__repr__(value)


def classify(first: Attempt, attempt: Attempt) -> CacheOutcome:
    """hit when the attempt's outcome_json() is the first's, conflict otherwise."""
    return "hit" if outcome_json(first) == outcome_json(attempt) else "conflict"


class OutcomeStore(Protocol):
    """First-writer-wins outcomes and the attempts behind them.

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

    def history(self, input_hash: str) -> History | None:
        """The first attempt and the newest attempts, each whole (as it was recorded)."""
        ...

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        """Every stored (input hash, first attempt), in no particular order (for the canary)."""
        ...

    def close(self) -> None: ...


class AuditTrail(Protocol):
    """What reviewers and the poison-message guard read: alerts, dead letters, delivery counts."""

    def alerts(self, limit: int = 100) -> list[Alert]:
        """The newest `limit` alerts, oldest first."""
        ...

    def alert_count(self) -> int:
        """How many alerts are kept (the stream is bounded: the oldest go first)."""
        ...

    def dead_letter(self, *letters: DeadLetter) -> None:
        """Keep each letter whole in a bounded list; one round trip however many there are."""
        ...

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]: ...

    def count_delivery(self, task_id: str) -> int:
        """Count one more delivery of a task id; returns the count so far (bounds poison loops)."""
        ...

    def close(self) -> None: ...


class ResultStore(OutcomeStore, AuditTrail, Protocol):
    """Both halves on one backend, as the worker and the CLI open it (see open_store)."""
