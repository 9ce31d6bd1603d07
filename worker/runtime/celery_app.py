"""The Celery app factory: `create_app(settings)`, and the delivery settings for an idempotent task.

Every message ends in exactly one record: scored, or rejected and dead-lettered. Messages
that never reach a task (undecodable or oversize bodies) are caught by the consumer
(worker/runtime/consumer.py). `create_app` builds an app from the Settings it is given and
nothing else: importing this module, or calling it, reads no environment and starts nothing.
worker/app.py (the `celery -A` target) is the one place that builds the app from the
environment and connects the worker's signal handlers (worker/runtime/signals.py). The app
registers the tasks (worker/runtime/tasks.py) when it is finalized, which the worker and beat do
as they start, so a publisher's app never imports the scoring path; it builds the process's
service (worker/pipeline/service.py) on first use, and the tasks and the consumer reach both
through it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from celery import Celery

from worker.constants import RECONCILE
from worker.errors import ConfigurationError
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.runtime import health
from worker.settings import Settings, window_warning

if TYPE_CHECKING:
    from worker.pipeline.service import Service

# kombu sweeps the unacked index this often; with throttle 1 a killed worker's messages are
# back on the queue within visibility_timeout + this, well inside the +30 s we promise.
UNACKED_RESTORE_INTERVAL_SECONDS = 5
REDIS_SCHEMES = ("redis://", "rediss://", "sentinel://")
AMQP_SCHEMES = ("amqp://", "amqps://")


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings, each with the reason it is set."""
    transport_options = {
        # How soon an unacknowledged message is redelivered after its worker dies.
        "visibility_timeout": settings.visibility_timeout_seconds,
        "unacked_restore_interval": UNACKED_RESTORE_INTERVAL_SECONDS,
        "unacked_restore_throttle": 1,
        # What this app publishes on Redis carries its JSON body as JSON text, not base64:
        # fewer bytes to move, store in the unacked hash and decode. Each message names its
        # encoding, so base64 ones from other publishers are still read.
        "body_encoding": "utf-8",
    }
    if settings.broker_url.startswith(REDIS_SCHEMES):
        transport_options.update(redis_connection_options(settings))
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
        "worker_consumer": "worker.runtime.consumer:EvidenceConsumer",
        # prefork, but each child's next task already waits in its pipe: no idle gap between
        # our short tasks (worker/runtime/pool.py). `--pool solo` on the command line still wins.
        "worker_pool": "worker.runtime.pool:PrefetchingTaskPool",
        # For `celery -A worker.app beat`: count the publish ledger's messages that were
        # never recorded (a gauge and a WARNING line; `evidence-worker reconcile` repairs).
        "beat_schedule": {
            "evidence-reconcile": {
                "task": RECONCILE,
                "schedule": float(settings.reconcile_every_seconds),
                "kwargs": {"older_than_seconds": settings.reconcile_older_than_seconds},
            }
        },
    }
    if settings.broker_url.startswith(AMQP_SCHEMES):
        config.update(amqp_config(transport_options))
    broker_ssl = broker_tls_options(settings)
    if broker_ssl is not None:
        config["broker_use_ssl"] = broker_ssl
    return config


def redis_connection_options(settings: Settings) -> dict[str, Any]:
    """kombu Redis transport options that bound every wait on the broker.

    kombu leaves Redis sockets without a timeout: a broker that stops answering without
    closing the connection (a dropped reply, a half-open socket after a NAT or failover)
    makes a synchronous command wait forever. In the worker those commands (the heartbeat
    event's PUBLISH every 2 s, acks, the unacked sweep) run in the event loop, so one lost
    reply stopped all consuming, silently. With a socket timeout the command fails, Celery
    logs the lost connection and reconnects (the heartbeat, which Celery would resend
    forever, is sent once: worker/runtime/consumer.py BoundedHeart). The BRPOP the consumer waits
    on is read only when readable, so no socket timeout covers it: kombu's health check
    (5.7+) drops it once its reply is overdue by brpop_timeout + health_check_interval, and
    redis-py pings a connection idle that long before reusing it.
    """
    timeout = settings.broker_socket_timeout_seconds
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        # Keepalive finds a peer that vanished (host gone, no RST) on idle connections.
        "socket_keepalive": True,
        "socket_keepalive_options": TCP_KEEPALIVE_OPTIONS,
        "health_check_interval": settings.broker_health_check_seconds,
    }


def amqp_config(transport_options: dict[str, Any]) -> dict[str, Any]:
    """Celery settings for a RabbitMQ broker that leave no window in which a message is lost.

    A quorum queue writes a message to disk (fsync, on a majority of nodes when clustered)
    before RabbitMQ confirms it, and is the type RabbitMQ recommends where data safety
    matters. Publisher confirms make each publish wait for that confirm, so a message the
    broker refused (a nack, a channel the broker closed) raises in the publisher instead of
    vanishing: without them basic.publish returns before the broker has seen the message.
    RabbitMQ requeues a killed worker's unacknowledged messages the moment its connection
    drops; there is no pop-then-bookkeeping step as in kombu's Redis transport.

    Celery (5.5+) turns off global QoS for a consumer of quorum queues, which RabbitMQ does
    not support for them (worker_detect_quorum_queues). ETA and countdown tasks would need a
    topic exchange for native delayed delivery; this app sends none. An existing classic
    queue of the same name cannot become a quorum queue (PRECONDITION_FAILED; see
    docs/operations.md).
    """
    return {
        # The worker's own queue, and any other queue a publisher names (create_missing):
        # both must declare one type, or whichever declares second is refused.
        "task_default_queue_type": "quorum",
        "task_create_missing_queue_type": "quorum",
        "worker_detect_quorum_queues": True,
        # Celery's default, stated because the guarantee rests on it: written to disk.
        "task_default_delivery_mode": "persistent",
        "broker_transport_options": {**transport_options, "confirm_publish": True},
    }


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


class EvidenceApp(Celery):  # type: ignore[misc]  # celery has no type hints
    """The Celery app, with this process's settings and its service."""

    def __init__(self, settings: Settings) -> None:
        super().__init__("evidence_coverage")
        self.settings = settings
        self.conf.update(celery_config(settings))
        self._service: Service | None = None
        self._service_pid = 0
        # Finalizing (the worker and beat as they start, or a first look at `app.tasks`)
        # registers the tasks on this app alone; an app that only sends never loads them.
        self.on_after_finalize.connect(_register_tasks)
        # A worker claims its queues for its store before it takes a message
        # (worker/runtime/announcement.py); an app that only sends never starts a consumer.
        self.steps["consumer"].add("worker.runtime.announcement:StoreAnnouncementStep")

    def service(self) -> Service:
        """This process's service, built on first use: after the prefork fork, and again in a
        child forked later (a store connection must not cross a fork)."""
        if self._service is None or self._service_pid != os.getpid():
            from worker.pipeline.service import Service

            self.use_service(Service.for_worker(self.settings))
        assert self._service is not None
        return self._service

    def use_service(self, service: Service | None) -> None:
        """Install a service built elsewhere (tests), or None to build one on next use."""
        self._service = service
        self._service_pid = os.getpid()

    def check_configuration(self) -> None:
        """Raise ConfigurationError for a policy, a store or a heartbeat directory the worker
        could not use. A store that does not answer now is not one: the worker starts, and its
        tasks retry."""
        from contracts import PolicyError
        from worker.errors import TransientError
        from worker.stores import open_store

        try:
            self.settings.load_policy()
        except PolicyError as error:
            raise ConfigurationError(str(error)) from None
        heartbeat = self.settings.heartbeat_file
        if heartbeat is not None and (problem := health.directory_problem(heartbeat)):
            raise ConfigurationError(problem)
        store = open_store(self.settings.result_store_url, self.settings)
        try:
            store.alerts(limit=1)  # a read: the login and the database are the server's to judge
        except TransientError:
            pass
        finally:
            store.close()

    def log_ended_window(self) -> None:
        """Log one warning when the policy's observation window ([observe], SPEC §12) has
        ended: its decisions no longer carry the previous rule, and the file should go. A
        policy that cannot be read is check_configuration()'s to report."""
        from contracts import PolicyError
        from worker.observability.logging import get_logger

        try:
            policy = self.settings.load_policy()
        except PolicyError:
            return
        ended = window_warning(policy, self.settings.policy_file, datetime.now(UTC).date())
        if ended is None or policy is None or policy.observe is None:
            return
        get_logger().warning(
            "evidence_coverage.observation_window_ended",
            message=ended.removeprefix("WARNING: "),
            policy_version=policy.version,
            previous_policy_version=policy.observe.rule.version,
            until=policy.observe.until.isoformat(),
        )

    def store_description(self) -> str:
        """The store as the start line names it (stores.describe_url()): a Redis Cluster
        says so, with its masters."""
        from worker.stores import describe_url

        return describe_url(self.settings.result_store_url, self.settings)

    def close_service(self) -> None:
        if self._service is not None and self._service_pid == os.getpid():
            self._service.close()
        self._service = None


def _register_tasks(sender: EvidenceApp, **_: Any) -> None:
    from worker.runtime.tasks import register_tasks

    register_tasks(sender)


def create_app(settings: Settings) -> EvidenceApp:
    """The app for these settings; builds nothing else (no store, no service, no handlers)."""
    return EvidenceApp(settings)
