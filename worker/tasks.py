"""Thin Celery tasks: validate, run the pipeline, record, log. Options carry acks and retries."""

from __future__ import annotations

import os
from typing import Any

import structlog
from celery import Task, signals

from worker import metrics
from worker.app import RETRY_BACKOFF_MAX_SECONDS, app
from worker.constants import CANARY, NOOP, SCORE, SCORE_BATCH
from worker.errors import TransientError
from worker.handling import body_text
from worker.logging import emit_record
from worker.pipeline import Delivery, rejected
from worker.runtime import Runtime, summary
from worker.settings import load_settings
from worker.stores import DeadLetter

# Room for Celery's envelope around one message: [[message], {}, {callbacks...}].
ENVELOPE_BYTES = 4_096

TASK_OPTIONS: dict[str, Any] = {
    "bind": True,
    # Only the store being unreachable is worth retrying; bad input never is.
    "autoretry_for": (TransientError,),
    "retry_backoff": True,
    "retry_backoff_max": RETRY_BACKOFF_MAX_SECONDS,
    "retry_jitter": True,
    "max_retries": 20,
}

_runtime: Runtime | None = None


def runtime() -> Runtime:
    """This process's runtime, built on first use (after the prefork fork, never before)."""
    global _runtime  # noqa: PLW0603 - one per process by design
    if _runtime is None:
        _runtime = Runtime.from_settings(load_settings())
    return _runtime


@signals.worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _close_runtime(pid: int | None = None, **_: Any) -> None:
    global _runtime  # noqa: PLW0603
    if _runtime is not None:
        _runtime.close()
        _runtime = None
    metrics.forget_process(pid or os.getpid())


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _serve_metrics(**_: Any) -> None:
    """The main process serves all pool processes' metrics, when a port is configured.

    worker_init runs in the main process before the pool forks, so the multiprocess dir set
    here is inherited by every child before any of them imports prometheus_client.
    """
    port = load_settings().metrics_port
    if port is not None:
        metrics.prepare(port)
        metrics.serve(port)


@signals.worker_shutdown.connect  # type: ignore[untyped-decorator]
def _remove_metrics_dir(**_: Any) -> None:
    metrics.cleanup()


def body_limit(task_name: str | None) -> int:
    """Bytes a transport body may have before it is parsed at all."""
    settings = runtime().settings
    if task_name == SCORE_BATCH:
        return settings.max_batch_bytes
    return settings.max_message_bytes + ENVELOPE_BYTES


def reject_undeliverable(message: Any, error: str) -> None:
    """A body no task can take: dead-letter it whole, record it as rejected, then ack it."""
    current = runtime()
    headers = message.headers or {}
    delivery = Delivery(task_id=headers.get("id"))
    current.store.dead_letter(
        DeadLetter(
            received_at=current.clock(),
            error=error,
            body=body_text(message.body),
            task_id=delivery.task_id,
        )
    )
    record = rejected(error, policy=current.policy, delivery=delivery)
    emit_record(record, task_name=headers.get("task"))
    current.metrics.observe([record], alerts=0, seconds_per_message=0.0)
    message.ack()


def _delivery(task: Task) -> Delivery:
    info = task.request.delivery_info or {}
    return Delivery(task_id=task.request.id, redelivered=bool(info.get("redelivered")))


def _run(task: Task, bodies: list[Any]) -> list[dict[str, Any]]:
    delivery = _delivery(task)
    current = runtime()
    with structlog.contextvars.bound_contextvars(
        task_id=delivery.task_id,
        task_name=task.name,
        retries=task.request.retries,
        redelivered=delivery.redelivered,
    ):
        if delivery.redelivered and delivery.task_id:
            deliveries = current.store.count_delivery(delivery.task_id)
            if deliveries > current.settings.max_deliveries:
                error = (
                    f"delivered {deliveries} times without completing "
                    f"(limit EVIDENCE_MAX_DELIVERIES={current.settings.max_deliveries})"
                )
                return summary(current.reject_all(bodies, error, delivery))
        return summary(current.run([(body, delivery) for body in bodies]))


@app.task(name=SCORE, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
def score(self: Task, message: Any) -> list[dict[str, Any]]:
    """Score one AttributionResult (a JSON object, or its JSON text)."""
    return _run(self, [message])


@app.task(name=SCORE_BATCH, **TASK_OPTIONS)  # type: ignore[untyped-decorator]
def score_batch(self: Task, messages: Any) -> list[dict[str, Any]]:
    """Score a list of AttributionResults; each keeps its own record and hit/conflict."""
    if not isinstance(messages, list):
        error = f"score_batch takes a list of messages, got {type(messages).__name__}"
        return summary(runtime().reject_all([messages], error, _delivery(self)))
    return _run(self, messages)


@app.task(name=NOOP, bind=True)  # type: ignore[untyped-decorator]
def noop(self: Task, message: Any) -> None:
    """Celery's own floor per message, the baseline `bench` measures against."""


@app.task(name=CANARY, bind=True)  # type: ignore[untyped-decorator]
def canary(self: Task, sample: int | None = 1000, seed: int = 0) -> dict[str, int]:
    """Re-score stored first outcomes (for Celery beat); each difference is an ERROR line."""
    from worker.canary import run_canary
    from worker.logging import get_logger

    result = run_canary(runtime().store.first_outcomes(), size=sample, seed=seed)
    log = get_logger()
    for difference in result.differences:
        log.error("evidence_coverage.canary_difference", **difference.as_json())
    summary = {
        "seen": result.seen,
        "checked": result.checked,
        "differences": len(result.differences),
    }
    log.info("evidence_coverage.canary", task_id=self.request.id, **summary)
    return summary
