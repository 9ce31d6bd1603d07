"""The Celery app: `celery -A worker.app worker`. Delivery settings for an idempotent task.

Every message ends in exactly one record: scored, or rejected and dead-lettered. Messages
that never reach a task (undecodable or oversize bodies) are caught by EvidenceConsumer.
"""

from __future__ import annotations

import inspect
from typing import Any

from celery import Celery, signals
from celery.worker.consumer import Consumer

from worker.settings import Settings, load_settings

RETRY_BACKOFF_MAX_SECONDS = 60
# Real messages nest about six levels deep (envelope, list, message, contexts, params). Celery
# pickles decoded arguments for the pool, and pickle runs out of stack a few hundred down.
MAX_NESTING = 64
# kombu sweeps the unacked index this often; with throttle 1 a killed worker's messages are
# back on the queue within visibility_timeout + this, well inside the +30 s we promise.
UNACKED_RESTORE_INTERVAL_SECONDS = 5


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings, each with the reason it is set."""
    transport_options = {
        # How soon an unacknowledged message is redelivered after its worker dies.
        "visibility_timeout": settings.visibility_timeout_seconds,
        "unacked_restore_interval": UNACKED_RESTORE_INTERVAL_SECONDS,
        "unacked_restore_throttle": 1,
        # What this app publishes on Redis carries its JSON body as JSON text, not base64:
        # a fifth fewer bytes to move, store in the unacked hash and decode (a 100-message
        # batch is ~250 KB instead of ~310 KB). Each message names its encoding, so base64
        # ones from other publishers are still read.
        "body_encoding": "utf-8",
    }
    config: dict[str, Any] = {
        "broker_url": settings.broker_url,
        # JSON only, never pickle: a message is data, not code.
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        # Outcomes live in our store; Celery results would be a second, weaker copy.
        "task_ignore_result": True,
        "task_default_queue": settings.queue,
        "task_default_routing_key": settings.queue,
        # Ack after the outcome is recorded; a crash mid-task means redelivery, never loss.
        "task_acks_late": True,
        # A pool child killed mid-task (OOM, kill -9) requeues its message; redeliveries are
        # bounded by EVIDENCE_MAX_DELIVERIES in the task so a poison message cannot loop.
        "task_reject_on_worker_lost": True,
        # Small prefetch: fewer unacked messages stranded (until visibility timeout) when a
        # worker dies, while still keeping the pool fed between round trips.
        "worker_prefetch_multiplier": 4,
        "broker_transport_options": transport_options,
        # Celery also reads the visibility timeout from the result backend's options.
        "result_backend_transport_options": transport_options,
        # On broker connection loss, cancel running tasks: their messages are redelivered
        # anyway, and finishing them would record outcomes whose acks can no longer land.
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
        # Never: a deduplicated redelivery would hide the very nondeterminism we report.
        "worker_deduplicate_successful_tasks": False,
        # stdout carries our JSON lines; Celery must not wrap prints into its own logger.
        "worker_redirect_stdouts": False,
        "worker_hijack_root_logger": False,
        "worker_consumer": "worker.app:EvidenceConsumer",
        # prefork, but each child's next task already waits in its pipe: no idle gap between
        # our short tasks (worker/pool.py). `--pool solo` on the command line still wins.
        "worker_pool": "worker.pool:PrefetchingTaskPool",
    }
    broker_ssl = broker_tls_options(settings)
    if broker_ssl is not None:
        config["broker_use_ssl"] = broker_ssl
    return config


def broker_tls_options(settings: Settings) -> dict[str, Any] | None:
    """broker_use_ssl for a rediss:// or amqps:// broker, in its transport's key names.

    Never set for plain URLs: kombu would then speak TLS to a plain server. ssl_* query
    parameters on a rediss:// URL replace this dict as a whole (kombu does not merge them).
    """
    scheme = settings.broker_url.split("://", 1)[0]
    if scheme == "rediss":
        return settings.redis_tls_options()
    if scheme == "amqps":
        return settings.amqp_tls_options()
    return None


def create_app(settings: Settings | None = None) -> Celery:
    settings = settings or load_settings()
    celery = Celery("evidence_coverage", include=["worker.tasks"])
    celery.conf.update(celery_config(settings))
    return celery


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
            from worker.tasks import body_limit, reject_undeliverable

            task_name = (message.headers or {}).get("task")
            size = len(message.body or b"")
            limit = body_limit(task_name)
            if size > limit:
                reject_undeliverable(
                    message, f"message is {size} bytes, over the {limit}-byte limit"
                )
                return None
            problem = self._envelope_problem(task_name, message)
            if problem is not None:
                reject_undeliverable(message, problem)
                return None
            return on_task_received(message)

        return guarded

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
        from worker.tasks import reject_undeliverable

        reject_undeliverable(message, f"invalid message body: {exc}")

    # Celery's own handlers for the cases below log the raw body (answer and context text
    # included) and drop the message without a record; ours record it and dead-letter it.

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        """A disallowed content type (pickle) or a malformed task envelope."""
        from worker.tasks import reject_undeliverable

        reject_undeliverable(message, f"invalid task message: {exc}")

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        from worker.tasks import reject_undeliverable

        name = (message.headers or {}).get("task")
        reject_undeliverable(message, f"unknown task {name!r}")

    def on_unknown_message(self, body: Any, message: Any) -> None:
        from worker.tasks import reject_undeliverable

        reject_undeliverable(message, "not a task message: it has no task header")


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _configure_logging(**_: Any) -> None:
    """Celery's own log lines go through structlog too, so stdout is one format."""
    from worker.logging import configure_stdlib_logging

    settings = load_settings()
    configure_stdlib_logging(settings.log_format, schema=settings.log_schema)


@signals.worker_ready.connect  # type: ignore[untyped-decorator]
def _quiet_shutdown_notice(sender: Any, **_: Any) -> None:
    """Celery's SIGTERM handler writes `worker: Warm shutdown (MainProcess)` to stdout, a
    plain-text line in a JSON stream; with JSON logs, the same handler without that line."""
    if load_settings().log_format != "json":
        return
    from celery.apps.worker import install_worker_term_handler

    install_worker_term_handler(sender.controller, verbose=False)


app = create_app()
