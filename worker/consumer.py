"""Celery's consumer, plus: every body that cannot reach a task still ends in a record.

Oversize, undecodable and malformed bodies, unknown tasks and non-task messages are recorded as
rejected and dead-lettered whole, then acknowledged; Celery alone would log the raw body
(answer and context text included) and drop it.
"""

from __future__ import annotations

import inspect
from typing import Any

from celery.worker.consumer import Consumer

from worker.constants import SCORE_BATCH
from worker.errors import TransientError
from worker.logging import get_logger
from worker.scoring import Delivery
from worker.stores.durable import impatient

# Room for Celery's envelope around one message: [[message], {}, {callbacks...}].
ENVELOPE_BYTES = 4_096
# Real messages nest about six levels deep (envelope, list, message, contexts, params). Celery
# pickles decoded arguments for the pool, and pickle runs out of stack a few hundred down.
MAX_NESTING = 64


def nests_deeper(value: Any, limit: int = MAX_NESTING) -> bool:
    """True when lists and dicts in `value` nest more than `limit` levels (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
    return False


class EvidenceConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, plus: oversize and undecodable bodies are rejected with a record and
    dead-lettered whole, never dropped silently (Celery alone would log and ack them)."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:
        on_task_received = super().create_task_handler(*args, **kwargs)

        def guarded(message: Any) -> Any:
            task_name = (message.headers or {}).get("task")
            size = len(message.body or b"")
            limit = self._body_limit(task_name)
            if size > limit:
                self.reject_undeliverable(
                    message, f"message is {size} bytes, over the {limit}-byte limit"
                )
                return None
            problem = self._envelope_problem(task_name, message)
            if problem is not None:
                self.reject_undeliverable(message, problem)
                return None
            return on_task_received(message)

        return guarded

    def _body_limit(self, task_name: str | None) -> int:
        """Bytes a transport body may have before it is parsed at all."""
        settings = self.app.settings
        if task_name == SCORE_BATCH:
            return int(settings.max_batch_bytes)
        return int(settings.max_message_bytes) + ENVELOPE_BYTES

    def reject_undeliverable(self, message: Any, error: str) -> None:
        """A body no task can take: dead-letter it whole, record it as rejected, then ack it.

        With the store unavailable it is neither recorded nor acknowledged: the broker keeps
        it and delivers it again after the visibility timeout. This runs in the worker's
        event loop, which must not wait for the store.
        """
        headers = message.headers or {}
        try:
            with impatient():
                self.app.service().reject(
                    [message.body],
                    error,
                    Delivery(task_id=headers.get("id")),
                    identify=False,
                    task_name=headers.get("task"),
                )
        except TransientError as problem:
            get_logger().warning(
                "evidence_coverage.store_unavailable",
                task_id=headers.get("id"),
                problem=str(problem),
                why="a rejected message stays unacknowledged until the store takes its record",
            )
            return
        message.ack()

    def _envelope_problem(self, task_name: str | None, message: Any) -> str | None:
        """Why Celery could not hand this task message to a task (None when it can).

        Celery unpacks the decoded body as [args, kwargs, embed] in this process and pickles
        the arguments to a pool child: a malformed envelope raises outside any task (no
        record), and deep nesting makes pickle overflow the stack and crash the consumer,
        again on every redelivery. Bad arguments would only fail the task with a TypeError.
        """
        task = self.app.tasks.get(task_name) if isinstance(task_name, str) else None
        if task is None:
            return None  # unknown task or no task header: on_unknown_* handle it
        try:
            payload = message.payload  # decoded once; Celery reuses kombu's cached result
        except Exception:  # on_decode_error / on_invalid_task report it
            return None
        if not (
            isinstance(payload, list)
            and len(payload) == 3  # Celery task protocol 2
            and isinstance(payload[0], list)
            and isinstance(payload[1], dict)
            and isinstance(payload[2], dict)
        ):
            return "invalid task envelope: the body must be [args, kwargs, embed]"
        body = message.body or b""  # bytes on Redis, str on RabbitMQ
        # Depth <= number of opening brackets, so most bodies skip the walk.
        openings = (
            body.count("[") + body.count("{")
            if isinstance(body, str)
            else body.count(b"[") + body.count(b"{")
        )
        if openings > MAX_NESTING and nests_deeper(payload):
            return f"message nests deeper than {MAX_NESTING} levels"
        args, kwargs, _ = payload
        try:
            inspect.signature(task.run).bind(*args, **kwargs)
        except TypeError as error:
            return f"invalid arguments for {task_name}: {error}"
        return None

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        self.reject_undeliverable(message, f"invalid message body: {exc}")

    # Celery's own handlers for the cases below log the raw body (answer and context text
    # included) and drop the message without a record; ours record it and dead-letter it.

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        """A disallowed content type (pickle) or a malformed task envelope."""
        self.reject_undeliverable(message, f"invalid task message: {exc}")

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        name = (message.headers or {}).get("task")
        self.reject_undeliverable(message, f"unknown task {name!r}")

    def on_unknown_message(self, body: Any, message: Any) -> None:
        self.reject_undeliverable(message, "not a task message: it has no task header")
