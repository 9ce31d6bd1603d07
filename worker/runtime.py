"""What a worker process builds once: settings, policy, store and alert sink, passed down."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from contracts import Policy
from worker.alerts import AlertSink, WebhookSender
from worker.handling import Body, body_text, handle
from worker.logging import emit_record
from worker.metrics import Metrics
from worker.pipeline import Clock, Delivery, Processed, rejected, utc_now
from worker.settings import Settings
from worker.stores import DeadLetter, ResultStore, open_store


@dataclass
class Runtime:
    """Everything a task needs; built in each worker process (never shared across a fork)."""

    settings: Settings
    policy: Policy | None
    store: ResultStore
    alerts: AlertSink
    clock: Clock = field(default=utc_now)
    metrics: Metrics = field(default_factory=lambda: Metrics(enabled=False))

    @classmethod
    def from_settings(cls, settings: Settings) -> Runtime:
        webhook = (
            WebhookSender(
                settings.alert_webhook_url, timeout_seconds=settings.alert_webhook_timeout_seconds
            )
            if settings.alert_webhook_url
            else None
        )
        return cls(
            settings=settings,
            policy=settings.load_policy(),
            store=open_store(settings.result_store_url, settings),
            alerts=AlertSink(webhook),
            metrics=Metrics(enabled=settings.metrics_port is not None),
        )

    def run(self, bodies: Sequence[tuple[Body, Delivery]]) -> list[Processed]:
        """Handle bodies, then emit one record per body (and each alert) in order."""
        started = time.perf_counter()
        results = handle(
            bodies,
            store=self.store,
            policy=self.policy,
            max_message_bytes=self.settings.max_message_bytes,
            clock=self.clock,
        )
        per_message_ms = (time.perf_counter() - started) * 1000 / max(len(results), 1)
        alerts = 0
        for result in results:
            emit_record(result.record, duration_ms=round(per_message_ms, 3))
            if result.alert is not None:
                self.alerts.raise_alert(result.alert)
                alerts += 1
        self.metrics.observe(
            [result.record for result in results],
            alerts=alerts,
            seconds_per_message=per_message_ms / 1000,
        )
        return results

    def reject_all(self, bodies: Sequence[Body], error: str, delivery: Delivery) -> list[Processed]:
        """Dead-letter and record every body as rejected with one error (no scoring)."""
        self.store.dead_letter(
            *(
                DeadLetter(
                    received_at=self.clock(),
                    error=error,
                    body=body_text(body),
                    task_id=delivery.task_id,
                )
                for body in bodies
            )
        )
        results = []
        for body in bodies:
            record = rejected(error, body=body, policy=self.policy, delivery=delivery)
            emit_record(record)
            results.append(Processed(record=record))
        self.metrics.observe([r.record for r in results], alerts=0, seconds_per_message=0.0)
        return results

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
