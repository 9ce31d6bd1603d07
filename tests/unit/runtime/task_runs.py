"""Running the Celery tasks without a broker, shared by the tasks' test modules.

A test app (`APP`, built from Settings like any other; nothing from the environment) holds the
registered tasks; `run` and `delivered` execute a task's body as the worker would for one
delivery, with a pushed request, and capture its log entries. The store and clock the tasks
use are the fixtures in conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
import structlog
from celery import Task
from celery.exceptions import Reject
from structlog.testing import capture_logs

from contracts import Attempt, AttributionResult, input_hash
from tests.factories import expected_rejected, expected_scored
from worker.constants import RECONCILE, SCORE, SCORE_BATCH
from worker.errors import TransientError
from worker.runtime.celery_app import create_app
from worker.settings import Settings
from worker.stores import DeadLetter, Recorded
from worker.stores.redis.redis_store import RedisStore

MessageFactory = Callable[..., dict[str, Any]]
TWO_THIRDS_REASON = "supported=2; required=3; missing=refund-method"
UNKNOWN_ID_REASON = (
    "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: old-c1"
)
MAX_DELIVERIES = 2
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
STORE_WINDOW_SECONDS = 30.0
LATER = datetime.now(UTC) + timedelta(hours=1)

APP = create_app(Settings())
"""The tests' app; the `runtime` fixture installs its service. Its settings are Celery's only:
the tasks read theirs from the service."""
score: Task = APP.tasks[SCORE]
score_batch: Task = APP.tasks[SCORE_BATCH]
reconcile: Task = APP.tasks[RECONCILE]


class FlakyStore(RedisStore):
    """A Redis store whose first `failures` writes find Redis unreachable, whose writes of an
    input hash in `broken` fail as a corrupt key makes a script fail (a bug to the worker),
    and whose dead letters fail likewise while `broken_letters`."""

    failures = 0
    broken_letters = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.broken: set[str] = set()

    def record_many(
        self,
        items: Sequence[tuple[str, Attempt]],
        *,
        now: datetime,
        write_ids: Sequence[str | None] | None = None,
        letters: Sequence[DeadLetter] = (),
    ) -> list[Recorded]:
        if self.failures:
            self.failures -= 1
            raise TransientError("Redis unreachable: connection refused")
        if self.broken & {input_hash for input_hash, _ in items} or (
            letters and self.broken_letters
        ):
            raise redis.ResponseError(WRONGTYPE)
        return super().record_many(items, now=now, write_ids=write_ids, letters=letters)

    def dead_letter(self, *letters: DeadLetter) -> None:
        if self.broken_letters:
            raise redis.ResponseError(WRONGTYPE)
        super().dead_letter(*letters)


class FakeTime:
    """A monotonic clock that moves only when the store's backoff sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def run(
    task: Task, argument: Any, *, task_id: str = "task-1", redelivered: bool = False
) -> tuple[Any, list[MutableMapping[str, Any]]]:
    """Run a task's body as the worker would for one delivery; return (result, log entries)."""
    task.push_request(id=task_id, delivery_info={"redelivered": redelivered}, retries=0)
    try:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            result = task.run(argument)
    finally:
        task.pop_request()
    return result, logs


RECORDED_AT = "2026-12-01T12:00:00Z"  # FIXED_NOW as a log line writes it


def without_duration(entry: MutableMapping[str, Any]) -> dict[str, Any]:
    """A log entry minus duration_ms, the one field that depends on the machine."""
    assert entry.get("duration_ms") is None or entry["duration_ms"] >= 0
    return {key: value for key, value in entry.items() if key != "duration_ms"}


def scored_entry(message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The expected log entry of a report-only `scored` record (no policy configured)."""
    return {
        "log_level": "info",
        **expected_scored(message, task_id="task-1", **fields),
        "recorded_at": RECORDED_AT,
        "task_name": "evidence_coverage.score",
        "retries": 0,
        "redelivered": False,
        **fields,
    }


def rejected_entry(reason: str, **fields: Any) -> dict[str, Any]:
    return {
        "log_level": "warning",
        **expected_rejected(reason, task_id="task-1", recorded_at=RECORDED_AT, **fields),
    }


def delivered(
    task: Task, argument: Any, *, redelivered: bool = False
) -> tuple[Any, list[MutableMapping[str, Any]]]:
    """`run` in a worker (not called directly): a Reject is returned, not raised."""
    task.push_request(
        id="task-1",
        delivery_info={"redelivered": redelivered},
        retries=0,
        called_directly=False,
    )
    try:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            try:
                result = task.run(argument)
            except Reject as rejected:
                result = rejected
    finally:
        task.pop_request()
    return result, logs


def hash_of(message: dict[str, Any]) -> str:
    return input_hash(AttributionResult.model_validate(message))
