"""A store that waits out an outage instead of giving a message up.

Each write (record, dead letter, delivery count) is retried while the store is unavailable,
with exponential backoff capped at a maximum and jittered, for up to a window; then the
TransientError goes up, and the task hands its message back to the broker unacknowledged.
Reads are not retried: a reader (`show`, the canary) should hear at once that the store is
away. Written by hand rather than with a retry library: the loop is a dozen lines, and what
matters here is what it reports on every wait (a WARNING line with the case IDs, a gauge),
which the callbacks below do.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, TypeVar

from contracts import Attempt
from contracts.record_models import AnyAlert
from worker.errors import TransientError
from worker.stores.contract import (
    DeadLetter,
    FirstRequired,
    History,
    LedgerEntry,
    Recorded,
    RecordOne,
    ResultStore,
)

T = TypeVar("T")

FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 10.0

# False inside `impatient()`: the consumer, in the worker's event loop, must never sleep.
_patient: ContextVar[bool] = ContextVar("patient", default=True)
# Set once this process is to end (worker/runtime/termination.py): no write waits any more.
_giving_up = False


def give_up_waiting() -> None:
    """From now on, writes in this process fail at once while the store is unavailable: the
    process is ending (a held SIGTERM), and its message goes back to the broker."""
    global _giving_up  # noqa: PLW0603 - one per process by design
    _giving_up = True


@contextmanager
def impatient() -> Iterator[None]:
    """Within this block, writes fail at once while the store is unavailable."""
    token = _patient.set(False)
    try:
        yield
    finally:
        _patient.reset(token)


def backoff(attempt: int, *, rng: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number `attempt` (1-based): doubling from the first delay,
    capped, and jittered down by up to half so that workers do not retry in step."""
    delay: float = min(FIRST_DELAY_SECONDS * 2.0 ** (attempt - 1), MAX_DELAY_SECONDS)
    return delay * (1 - rng() / 2)


class DurableStore(RecordOne):
    """ResultStore around another: its writes wait out an outage for up to `window_seconds`."""

    def __init__(
        self,
        store: ResultStore,
        *,
        window_seconds: float,
        on_wait: Callable[[TransientError, int, float], None] = lambda *_: None,
        on_recovered: Callable[[], None] = lambda: None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.inner = store
        self.window_seconds = window_seconds
        self._on_wait = on_wait
        self._on_recovered = on_recovered
        self._sleep = sleep
        self._clock = clock
        self._rng = rng

    def _write(self, operation: Callable[[], T]) -> T:
        deadline = self._clock() + self.window_seconds
        attempt = 0
        while True:
            try:
                result = operation()
            except TransientError as error:
                attempt += 1
                delay = backoff(attempt, rng=self._rng)
                if not _patient.get() or _giving_up or self._clock() + delay > deadline:
                    raise
                self._on_wait(error, attempt, delay)
                self._sleep(delay)
                continue
            if attempt:
                self._on_recovered()
            return result

    # Writes: retried while the store is unavailable.

    def record_many(self, *args: Any, **kwargs: Any) -> list[Recorded]:
        return self._write(lambda: self.inner.record_many(*args, **kwargs))

    def dead_letter(self, *letters: DeadLetter) -> None:
        self._write(lambda: self.inner.dead_letter(*letters))

    def count_delivery(self, task_id: str) -> int:
        return self._write(lambda: self.inner.count_delivery(task_id))

    def forget_deliveries(self, task_id: str) -> None:
        self._write(lambda: self.inner.forget_deliveries(task_id))

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        self._write(lambda: self.inner.note_published(entries, sent=sent))

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        self._write(lambda: self.inner.confirm_sent(write_ids))

    def close_entries(self, write_ids: Sequence[str]) -> None:
        self._write(lambda: self.inner.close_entries(write_ids))

    def take_lease(self, name: str, holder: str, seconds: int) -> bool:
        return self.inner.take_lease(name, holder, seconds)

    def give_back_lease(self, name: str, holder: str) -> None:
        self.inner.give_back_lease(name, holder)

    def remove_letters(self, letter_ids: Sequence[str]) -> int:
        return self._write(lambda: self.inner.remove_letters(letter_ids))

    # Reads: as the store answers them.

    def history(self, *args: Any, **kwargs: Any) -> History | None:
        return self.inner.history(*args, **kwargs)

    def histories(self, input_hashes: Sequence[str]) -> list[History | None]:
        return self.inner.histories(input_hashes)

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        return self.inner.first_outcomes()

    def first_outcomes_by_time(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> Iterator[tuple[str, Attempt]]:
        return self.inner.first_outcomes_by_time(since, until)

    def hashes_for_case(self, case_id: str, limit: int | None = None) -> list[str]:
        return self.inner.hashes_for_case(case_id, limit)

    def recorded_writes(self, writes: Sequence[tuple[str, str]]) -> list[bool]:
        return self.inner.recorded_writes(writes)

    def first_required(self, contract_version: str, case_id: str) -> FirstRequired | None:
        return self.inner.first_required(contract_version, case_id)

    def alerts(self, *args: Any, **kwargs: Any) -> list[AnyAlert]:
        return self.inner.alerts(*args, **kwargs)

    def alert_count(self) -> int:
        return self.inner.alert_count()

    def dead_letters(self, *args: Any, **kwargs: Any) -> list[DeadLetter]:
        return self.inner.dead_letters(*args, **kwargs)

    def letters_newest_first(self) -> Iterator[tuple[str, DeadLetter]]:
        return self.inner.letters_newest_first()

    def letter(self, letter_id: str) -> DeadLetter | None:
        return self.inner.letter(letter_id)

    def still_open(self, write_ids: Sequence[str]) -> set[str]:
        return self.inner.still_open(write_ids)

    def ledger_now(self) -> datetime:
        return self.inner.ledger_now()

    def unrecorded(self, *, published_before: datetime) -> Iterator[LedgerEntry]:
        return self.inner.unrecorded(published_before=published_before)

    def count_unrecorded(self, *, published_before: datetime) -> int:
        return self.inner.count_unrecorded(published_before=published_before)

    def close(self) -> None:
        self.inner.close()
