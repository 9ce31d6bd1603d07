"""Alerts (nondeterminism and contract drift) leave the process here: an ERROR record, then
an optional webhook.

The alert stream entry is written by the store together with the attempt, and it is the
source of truth; the webhook is best effort on a background thread so it can never block,
delay or undo a record, nor hold up shutdown. An alert the webhook did not get (queue full,
POSTs failed or out of time, shutdown) is one `evidence_coverage.webhook_undelivered`
WARNING line naming its hash, so every alert is delivered or accounted for.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

import httpx

from contracts.record_models import ALERT_EVENTS, AnyAlert
from worker.observability.logging import alert_fields, emit_alert, get_logger
from worker.settings import WEBHOOK_DEADLINE_SECONDS, WEBHOOK_DRAIN_SECONDS

if TYPE_CHECKING:
    from worker.settings import Settings

WEBHOOK_QUEUE_SIZE = 1_000
UNDELIVERED = "evidence_coverage.webhook_undelivered"
SOURCE_OF_TRUTH = (
    "the alert stream is the source of truth: evidence-worker alerts --since RAISED_AT lists it"
)
# close() waits this long past the drain time for the thread to log what it leaves behind.
JOIN_GRACE_SECONDS = 1.0

Cause = Literal["queue_full", "failed", "shutdown"]


def log_undelivered(payload: dict[str, Any], cause: Cause, **details: Any) -> None:
    """One WARNING line for one alert the webhook did not get."""
    kind = {"kind": payload["kind"]} if "kind" in payload else {}
    get_logger().warning(
        UNDELIVERED,
        **kind,
        input_hash=payload.get("input_hash"),
        raised_at=payload.get("raised_at"),
        cause=cause,
        **details,
        note=SOURCE_OF_TRUTH,
    )


class WebhookSender:
    """POSTs alert JSON to a URL, in order, from one daemon thread: each POST within a total
    deadline, a few tries per alert; whatever it cannot POST it logs as undelivered.

    Each POST is a coroutine under asyncio.timeout on an event loop the thread owns, so the
    deadline interrupts it wherever it waits: connecting, sending, the status line or the
    body. httpx's own timeouts are per operation, and a receiver that trickles one byte at a
    time restarts its read timeout with every byte. A watchdog over a blocking client could
    only abandon such a call, leaving a thread behind for every stuck receiver.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_seconds: float = 2.0,
        retries: int = 3,
        deadline_seconds: float = WEBHOOK_DEADLINE_SECONDS,
        drain_seconds: float = WEBHOOK_DRAIN_SECONDS,
        queue_size: int = WEBHOOK_QUEUE_SIZE,
    ) -> None:
        self.url = url
        self.timeout = timeout_seconds
        self.retries = retries
        self.deadline = deadline_seconds
        self.drain_seconds = drain_seconds
        self._late = f"no answer within the {deadline_seconds:g} s deadline"
        self.delivered = 0  # alerts the receiver answered with a status below 500
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(queue_size)
        self._lock = threading.Lock()  # orders send() against close()
        self._closing = False
        self._stop_at: float | None = None  # time.monotonic() by which the thread stops
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scope: asyncio.Timeout | None = None  # the running POST's (or pause's) deadline
        self._thread = threading.Thread(target=self._run, name="alert-webhook", daemon=True)
        self._thread.start()

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookSender | None:
        """The sender EVIDENCE_ALERT_WEBHOOK_* describe, or None when no URL is set."""
        if not settings.alert_webhook_url:
            return None
        return cls(
            settings.alert_webhook_url,
            timeout_seconds=settings.alert_webhook_timeout_seconds,
            deadline_seconds=settings.alert_webhook_deadline_seconds,
            drain_seconds=settings.alert_webhook_drain_seconds,
        )

    def send(self, payload: dict[str, Any]) -> None:
        """Queue one alert without ever waiting; when it cannot be queued, log it."""
        with self._lock:
            if self._closing:
                cause: Cause = "shutdown"
            else:
                try:
                    self._queue.put_nowait(payload)
                    return
                except queue.Full:
                    cause = "queue_full"
        log_undelivered(payload, cause)

    def close(self, timeout: float | None = None) -> None:
        """POST what is queued for up to `timeout` seconds (default: the drain time), then
        stop, logging every alert left undelivered. Returns within the timeout plus
        JOIN_GRACE_SECONDS, however the receiver behaves."""
        drain = self.drain_seconds if timeout is None else timeout
        with self._lock:
            if not self._closing:
                self._closing = True
                self._stop_at = time.monotonic() + drain
        # The sentinel wakes an idle thread; a busy one sees _closing before its next alert.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._cut_short()
        self._thread.join(max(drain, 0.0) + JOIN_GRACE_SECONDS)
        self._abandon_queued()

    def _run(self) -> None:
        with asyncio.Runner() as runner:
            self._loop = runner.get_loop()
            client = httpx.AsyncClient(timeout=self.timeout)
            try:
                while (payload := self._next()) is not None:
                    runner.run(self._deliver(client, payload))
            finally:
                runner.run(client.aclose())
        self._abandon_queued()

    def _next(self) -> dict[str, Any] | None:
        """The next alert to POST; None once closed and drained, or out of drain time."""
        if self._closing and self._remaining() <= 0:
            return None
        try:
            return self._queue.get(block=not self._closing)
        except queue.Empty:
            return None

    def _remaining(self) -> float:
        """Seconds left before the thread must stop (infinite until close())."""
        stop_at = self._stop_at
        return float("inf") if stop_at is None else stop_at - time.monotonic()

    async def _deliver(self, client: httpx.AsyncClient, payload: dict[str, Any]) -> None:
        """POST one alert, retrying a 5xx or a failed try; a 4xx is the receiver's answer
        (the request itself is wrong), so it counts as delivered and is not retried."""
        for attempt in range(1, self.retries + 1):
            try:
                async with self._within(self.deadline):
                    response = await client.post(self.url, json=payload)
                if response.status_code < 500:
                    self.delivered += 1
                    return
                problem = f"HTTP {response.status_code}"
            except TimeoutError:
                cut = self._remaining() <= 0  # close() brought the deadline forward
                problem = "no answer before shutdown" if cut else self._late
            except httpx.HTTPError as error:
                problem = type(error).__name__
            except Exception as error:  # an alert is logged, never lost with the thread
                problem = f"{type(error).__name__}: {error}"
            if attempt < self.retries:
                # Short pauses: the webhook is a side channel, the stream has the alert.
                try:
                    async with self._within(float("inf")):
                        await asyncio.sleep(0.2 * 2 ** (attempt - 1))
                except TimeoutError:
                    pass
            if self._remaining() <= 0:
                log_undelivered(payload, "shutdown", attempts=attempt, problem=problem)
                return
        log_undelivered(payload, "failed", attempts=self.retries, problem=problem)

    @contextlib.asynccontextmanager
    async def _within(self, seconds: float) -> AsyncIterator[None]:
        """A deadline of `seconds`, or sooner if close() leaves less (see _cut_short)."""
        async with asyncio.timeout(min(seconds, self._remaining())) as scope:
            self._scope = scope
            try:
                yield
            finally:
                self._scope = None

    def _cut_short(self) -> None:
        """From close(): bring the running deadline forward to the stop time, on the loop."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: the thread is done
            loop.call_soon_threadsafe(self._reschedule)

    def _reschedule(self) -> None:
        scope, loop = self._scope, self._loop
        if scope is None or loop is None:
            return
        stop = loop.time() + self._remaining()
        when = scope.when()
        if when is None or stop < when:
            scope.reschedule(stop)

    def _abandon_queued(self) -> None:
        """Log every alert still queued as undelivered; each is taken once, so logged once."""
        while True:
            try:
                payload = self._queue.get_nowait()
            except queue.Empty:
                return
            if payload is not None:
                log_undelivered(payload, "shutdown")


class AlertSink:
    """Where a conflict's alert goes after the store has kept it: the log, then the webhook."""

    def __init__(self, webhook: WebhookSender | None = None) -> None:
        self.webhook = webhook

    def raise_alert(self, alert: AnyAlert, **context: Any) -> None:
        emit_alert(alert, **context)
        if self.webhook is not None:
            self.webhook.send({"event": ALERT_EVENTS[alert.kind], **alert_fields(alert)})

    def close(self) -> None:
        if self.webhook is not None:
            self.webhook.close()
