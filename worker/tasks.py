"""Thin Celery tasks: bind the task's context, hand the bodies to the service, return a summary.

Acks, retries and serialization are the task options' and the app's (worker/app.py).
"""

from __future__ import annotations

from typing import Any

import structlog
from celery import Task

from worker.app import RETRY_BACKOFF_MAX_SECONDS, app
from worker.constants import CANARY, NOOP, SCORE, SCORE_BATCH
from worker.errors import TransientError
from worker.scoring import Delivery
from worker.service import summary

TASK_OPTIONS: dict[str, Any] = {
    "bind": True,
    # Only the store being unreachable is worth retrying; bad input never is.
    "autoretry_for": (TransientError,),
    "retry_backoff": True,
    "retry_backoff_max": RETRY_BACKOFF_MAX_SECONDS,
    "retry_jitter": True,
    "max_retries": 20,
}


def _delivery(task: Task) -> Delivery:
    info = task.request.delivery_info or {}
    return Delivery(task_id=task.request.id, redelivered=bool(info.get("redelivered")))


def _run(task: Task, bodies: list[Any]) -> list[dict[str, Any]]:
    delivery = _delivery(task)
    service = task.app.service()
    with structlog.contextvars.bound_contextvars(
        task_id=delivery.task_id,
        task_name=task.name,
        retries=task.request.retries,
        redelivered=delivery.redelivered,
    ):
        if delivery.redelivered and delivery.task_id:
            deliveries = service.store.count_delivery(delivery.task_id)
            if deliveries > service.settings.max_deliveries:
                error = (
                    f"delivered {deliveries} times without completing "
                    f"(limit EVIDENCE_MAX_DELIVERIES={service.settings.max_deliveries})"
                )
                return summary(service.reject(bodies, error, delivery))
        return summary(service.handle([(body, delivery) for body in bodies]))


@app.task(name=SCORE, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
def score(self: Task, message: Any) -> list[dict[str, Any]]:
    """Score one AttributionResult (a JSON object, or its JSON text)."""
    return _run(self, [message])


@app.task(name=SCORE_BATCH, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
def score_batch(self: Task, messages: Any) -> list[dict[str, Any]]:
    """Score a list of AttributionResults; each keeps its own record and hit/conflict."""
    if not isinstance(messages, list):
        error = f"score_batch takes a list of messages, got {type(messages).__name__}"
        return summary(self.app.service().reject([messages], error, _delivery(self)))
    return _run(self, messages)


@app.task(name=NOOP, bind=True)  # type: ignore[untyped-decorator]
def noop(self: Task, message: Any) -> None:
    """Celery's own floor per message, the baseline `bench` measures against."""


@app.task(name=CANARY, bind=True)  # type: ignore[untyped-decorator]
def canary(self: Task, sample: int | None = 1000, seed: int = 0) -> dict[str, int]:
    """Re-score stored first outcomes (for Celery beat); each difference is an ERROR line."""
    from worker.canary import run_canary
    from worker.logging import get_logger

    result = run_canary(self.app.service().store.first_outcomes(), size=sample, seed=seed)
    log = get_logger()
    for difference in result.differences:
        log.error("evidence_coverage.canary_difference", **difference.as_json())
    counts = {
        "seen": result.seen,
        "checked": result.checked,
        "differences": len(result.differences),
    }
    log.info("evidence_coverage.canary", task_id=self.request.id, **counts)
    return counts
