"""Nondeterminism alerts leave the process here: an ERROR record, then an optional webhook.

The alert stream entry is written by the store together with the attempt; the webhook is
best effort on a background thread so it can never block, delay or undo a record.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import httpx

from contracts import Alert
from worker.logging import emit_alert, get_logger

WEBHOOK_QUEUE_SIZE = 1_000


class WebhookSender:
    """POSTs alert JSON to a URL with a timeout and a few retries, from one daemon thread."""

    def __init__(self, url: str, *, timeout_seconds: float = 2.0, retries: int = 3) -> None:
        self.url = url
        self.timeout = timeout_seconds
        self.retries = retries
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(WEBHOOK_QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name="alert-webhook", daemon=True)
        self._thread.start()

    def send(self, payload: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            get_logger().warning(
                "evidence_coverage.webhook_dropped",
                input_hash=payload.get("input_hash"),
                why="webhook queue full; the alert is still in the alert stream",
            )

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (up to `timeout`), then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while (payload := self._queue.get()) is not None:
                self._post(client, payload)

    def _post(self, client: httpx.Client, payload: dict[str, Any]) -> None:
        for attempt in range(1, self.retries + 1):
            try:
                response = client.post(self.url, json=payload)
                if response.status_code < 500:
                    return
                problem = f"HTTP {response.status_code}"
            except httpx.HTTPError as error:
                problem = type(error).__name__
            if attempt < self.retries:
                time.sleep(
                    0.2 * 2 ** (attempt - 1)
                )  # 0.2 s, 0.4 s, ...: short, it is a side channel
        get_logger().warning(
            "evidence_coverage.webhook_failed",
            input_hash=payload.get("input_hash"),
            attempts=self.retries,
            problem=problem,
        )


class AlertSink:
    """Where a conflict's alert goes after the store has kept it: the log, then the webhook."""

    def __init__(self, webhook: WebhookSender | None = None) -> None:
        self.webhook = webhook

    def raise_alert(self, alert: Alert, **context: Any) -> None:
        emit_alert(alert, **context)
        if self.webhook is not None:
            self.webhook.send(
                {"event": "evidence_coverage.nondeterminism", **alert.model_dump(mode="json")}
            )

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()
