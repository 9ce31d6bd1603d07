"""The one path from bodies to records in a process: the tasks, the consumer and `score`.

Per body: admit it (intake), or dead-letter it and record it as rejected; score and record
the admitted ones in one store call (scoring); then emit one record per body, in order, and
each alert (log line, webhook), and count them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import structlog

from contracts import Policy, input_hash
from contracts.record_models import REJECTED
from worker.errors import InputError, TransientError
from worker.observability import telemetry
from worker.observability.logging import get_logger
from worker.observability.metrics import Metrics
from worker.observability.structlog_lines import RecordLines
from worker.pipeline.alert_delivery import AlertSink, WebhookSender
from worker.pipeline.intake import Body, CutBody, admit, body_text
from worker.pipeline.redaction import logged_text
from worker.pipeline.scoring import (
    Clock,
    Delivery,
    Processed,
    process_many,
    rejected_record,
    utc_now,
    write_ids,
)
from worker.settings import Settings
from worker.stores import DeadLetter, ResultStore, open_store
from worker.stores.durable import DurableStore


@dataclass
class Service:
    """Everything one process needs to turn bodies into records; built once per process."""

    settings: Settings
    policy: Policy | None
    store: ResultStore
    alerts: AlertSink
    clock: Clock = field(default=utc_now)
    metrics: Metrics = field(default_factory=lambda: Metrics(enabled=False))

    @classmethod
    def open(
        cls,
        settings: Settings,
        *,
        store_url: str,
        policy: Policy | None,
        metrics: bool = False,
        retry_window_seconds: float = 0.0,
    ) -> Service:
        """A service on the store at `store_url`, deciding with `policy` (None: report-only),
        whose writes wait out a store outage for up to `retry_window_seconds`."""
        counters = Metrics(enabled=metrics)
        return cls(
            settings=settings,
            policy=policy,
            store=DurableStore(
                open_store(store_url, settings),
                window_seconds=retry_window_seconds,
                on_wait=lambda error, attempt, delay: _store_waits(counters, error, attempt, delay),
                on_recovered=lambda: _store_recovered(counters),
            ),
            alerts=AlertSink(WebhookSender.from_settings(settings)),
            metrics=counters,
        )

    @classmethod
    def for_worker(cls, settings: Settings) -> Service:
        """The worker's service: its store, its policy, metrics when a port is set."""
        return cls.open(
            settings,
            store_url=settings.result_store_url,
            policy=settings.load_policy(),
            metrics=settings.metrics_port is not None,
            retry_window_seconds=settings.store_retry_window,
        )

    def handle(self, bodies: Sequence[tuple[Body, Delivery]]) -> list[Processed]:
        """One Processed per body, in input order; rejected bodies are dead-lettered first,
        in the store call that records the others."""
        started = time.perf_counter()
        admitted = []
        letters = []
        slots: list[Processed | None] = []
        case_ids: list[str | None] = []
        # Per body, the redacted text its line carries with EVIDENCE_LOG_RAW_TEXT; a rejected
        # body carries none (its dead letter keeps it whole).
        texts: list[dict[str, Any]] | None = [] if self.settings.log_raw_text else None
        for body, delivery in bodies:
            try:
                message = admit(body, max_bytes=self.settings.max_message_bytes)
            except InputError as error:
                letters.append(self._letter(body, str(error), delivery))
                record = rejected_record(
                    str(error),
                    body=body,
                    recorded_at=letters[-1].received_at,
                    policy=self.policy,
                    delivery=delivery,
                )
                slots.append(Processed(record=record))
                case_ids.append(record.case_id)
                if texts is not None:
                    texts.append({})
                continue
            admitted.append((message, delivery))
            slots.append(None)
            case_ids.append(message.case_id)
            if texts is not None:
                texts.append(logged_text(message, self.settings.excerpt_max_chars))
        # The WARNING lines of a store outage name the messages that are waiting for it.
        with structlog.contextvars.bound_contextvars(case_ids=case_ids):
            scored = iter(
                process_many(
                    admitted,
                    store=self.store,
                    policy=self.policy,
                    clock=self.clock,
                    excerpt_chars=self.settings.excerpt_chars,
                    letters=letters,
                )
            )
        results = [slot if slot is not None else next(scored) for slot in slots]
        self._emit(
            results,
            seconds=time.perf_counter() - started,
            texts=texts,
            published_at=[delivery.published_at for _, delivery in bodies],
        )
        return results

    def recorded(self, bodies: Sequence[tuple[Body, Delivery]]) -> list[bool]:
        """For each body, whether the store holds its write (its task ID and position): the
        write landed on an earlier delivery, so handling it again is a replay. A body that
        cannot be admitted, or has no task ID, was never recorded. Nothing is scored."""
        ids = write_ids([delivery for _, delivery in bodies])
        asked: list[tuple[int, tuple[str, str]]] = []
        for position, ((body, _), write_id) in enumerate(zip(bodies, ids, strict=True)):
            if write_id is None:
                continue
            try:
                message = admit(body, max_bytes=self.settings.max_message_bytes)
            except InputError:
                continue
            asked.append((position, (input_hash(message), write_id)))
        found = [False] * len(bodies)
        held = self.store.recorded_writes([write for _, write in asked])
        for (position, _), stored in zip(asked, held, strict=True):
            found[position] = stored
        return found

    def reject(
        self,
        bodies: Sequence[Body],
        error: str,
        delivery: Delivery,
        *,
        identify: bool = True,
        **context: Any,
    ) -> list[Processed]:
        """Dead-letter and record every body as rejected with one error, without scoring.

        `identify=False` for transport bodies (a task envelope, an oversize blob): their
        case_id is not worth parsing them for, and each stands for its whole task (its
        dead letter closes every ledger entry of the task); otherwise the bodies are the
        task's messages, in order, from `delivery.position` (0 when it has none).
        """
        start = delivery.position or 0
        letters = [
            self._letter(body, error, replace(delivery, position=start + i))
            if identify
            else self._letter(body, error, delivery)
            for i, body in enumerate(bodies)
        ]
        with structlog.contextvars.bound_contextvars(case_ids=[None] * len(bodies)):
            self.store.dead_letter(*letters)
        results = [
            Processed(
                record=rejected_record(
                    error,
                    body=body if identify else None,
                    recorded_at=letter.received_at,
                    policy=self.policy,
                    delivery=delivery,
                )
            )
            for body, letter in zip(bodies, letters, strict=True)
        ]
        self._emit(
            results, seconds=None, published_at=[delivery.published_at] * len(results), **context
        )
        return results

    def _letter(self, body: Body, error: str, delivery: Delivery) -> DeadLetter:
        cut = body if isinstance(body, CutBody) else None
        return DeadLetter(
            received_at=self.clock(),
            error=error,
            body=body_text(body),
            task_id=delivery.task_id,
            position=delivery.position,
            line=delivery.line,
            # A body the transport cut keeps the whole one's digest and size (see CutBody).
            body_sha256=None if cut is None else cut.sha256,
            body_bytes=None if cut is None else cut.size,
            truncated=cut is not None,
        )

    def _emit(
        self,
        results: Sequence[Processed],
        *,
        seconds: float | None,
        texts: Sequence[dict[str, Any]] | None = None,
        published_at: Sequence[datetime | None] = (),
        **context: Any,
    ) -> None:
        """Each record (and alert) in order; the call's time is shared out per message;
        `texts`: per result, fields its line carries besides (EVIDENCE_LOG_RAW_TEXT);
        `published_at`: per result, when its message was published, if known."""
        per_message_ms = None if seconds is None else seconds * 1000 / max(len(results), 1)
        if per_message_ms is not None:
            context["duration_ms"] = round(per_message_ms, 3)
        alerts = drift_alerts = 0
        exporter = telemetry.active()
        lines = RecordLines()
        for position, result in enumerate(results):
            # A replay (its write id recorded before: a duplicate or redelivered message) says
            # so on its line, whatever the broker's flag; its record is the original's.
            own = {"redelivered": True} if result.replayed else {}
            if texts is None:
                lines.add(result.record, **context, **own)
            else:
                lines.add(result.record, **context, **texts[position], **own)
            if exporter is not None:
                exporter.evaluation(result.record)
            if result.alert is None and result.drift is None:
                continue
            lines.flush()  # a record's line comes before its alerts' lines
            # A replayed alert is raised again: when the first reply was lost, this is the
            # first time anyone hears of it. The alert stream holds it once.
            where = {"line": result.record.line} if result.record.line else {}
            replay = {"replayed": True} if result.replayed else {}
            if result.alert is not None:
                self.alerts.raise_alert(result.alert, **where, **replay)
                alerts += 1
            if result.drift is not None:
                self.alerts.raise_alert(result.drift, **where, **replay)
                drift_alerts += 1
        lines.flush()
        self.metrics.observe(
            [result.record for result in results],
            replayed=[result.replayed for result in results],
            alerts=alerts,
            drift_alerts=drift_alerts,
            seconds_per_message=(per_message_ms or 0.0) / 1000,
            published_at=published_at,
        )

    def close(self) -> None:
        self.alerts.close()
        self.store.close()


def summary(results: Sequence[Processed]) -> list[dict[str, Any]]:
    """The small JSON a task returns: enough to follow a result without the store."""
    return [
        {
            "case_id": r.record.case_id,
            "input_hash": r.record.input_hash,
            "status": r.record.status,
            "cache": r.record.cache,
        }
        for r in results
    ]


def is_rejection(processed: Processed) -> bool:
    """True when the body never reached the metric (schema, size, envelope)."""
    return processed.record.event == REJECTED


def _store_waits(metrics: Metrics, error: TransientError, attempt: int, delay: float) -> None:
    metrics.store_waiting(True)
    get_logger().warning(
        "evidence_coverage.store_unavailable",
        problem=str(error),
        attempt=attempt,
        retry_in_seconds=round(delay, 3),
    )


def _store_recovered(metrics: Metrics) -> None:
    metrics.store_waiting(False)
    get_logger().info("evidence_coverage.store_recovered")
