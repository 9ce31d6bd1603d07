"""The Celery app: `celery -A worker.app worker`. Delivery settings for an idempotent task.

Every message ends in exactly one record: scored, or rejected and dead-lettered. Messages
that never reach a task (undecodable or oversize bodies) are caught by the consumer
(worker/runtime/consumer.py). The app carries the process's settings, read once, and builds the
process's service (worker/pipeline/service.py) on first use; the tasks (worker/runtime/tasks.py)
and the
consumer reach both through it, and nothing here imports them.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from celery import Celery, signals

from worker.constants import RECONCILE
from worker.errors import ConfigurationError
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.observability import metrics, telemetry
from worker.runtime import health
from worker.settings import Settings, load_settings

if TYPE_CHECKING:
    from worker.pipeline.service import Service

CONFIGURATION_EXIT_CODE = 2  # as the command line's configuration errors
# kombu sweeps the unacked index this often; with throttle 1 a killed worker's messages are
# back on the queue within visibility_timeout + this, well inside the +30 s we promise.
UNACKED_RESTORE_INTERVAL_SECONDS = 5
REDIS_SCHEMES = ("redis://", "rediss://", "sentinel://")
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")


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
    queue of the same name cannot become a quorum queue (PRECONDITION_FAILED; see README).
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
        super().__init__("evidence_coverage", include=["worker.runtime.tasks"])
        self.settings = settings
        self.conf.update(celery_config(settings))
        self._service: Service | None = None
        self._service_pid = 0

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

    def close_service(self) -> None:
        if self._service is not None and self._service_pid == os.getpid():
            self._service.close()
        self._service = None


def create_app(settings: Settings | None = None) -> EvidenceApp:
    return EvidenceApp(settings or load_settings())


def _exit_unusable(problem: str) -> NoReturn:
    print(f"evidence-worker: configuration error: {problem}", file=sys.stderr, flush=True)
    raise SystemExit(CONFIGURATION_EXIT_CODE)


def _app_from_environment() -> EvidenceApp:
    """The app `celery -A worker.app` loads; a bad setting ends the process with one line
    (Celery would print the import's traceback and carry on as if nothing happened)."""
    try:
        return create_app()
    except ConfigurationError as error:
        _exit_unusable(str(error))


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _configure_logging(**_: Any) -> None:
    """Celery's own log lines go through structlog too, so stdout is one format."""
    from worker.observability.logging import configure_stdlib_logging

    configure_stdlib_logging(
        app.settings.log_format,
        schema=app.settings.log_schema,
        span_ids=telemetry.configured(),
    )


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _refuse_unusable_configuration(sender: Any, **_: Any) -> None:
    """Before `ready`: a policy or store the first message would die on stops the worker now,
    with one line, instead of a worker that reports ready and fails every message."""
    try:
        sender.app.check_configuration()
    except ConfigurationError as error:
        _exit_unusable(str(error))


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _serve_metrics(sender: Any, **_: Any) -> None:
    """The main process serves all pool processes' metrics, when a port is configured.

    worker_init runs in the main process before the pool forks, so the multiprocess dir made
    or emptied here is what every child writes to. A pool that runs tasks in this process
    has no pool process to start (Celery's threads pool sends no worker_process_init; solo
    sends one as it is built, which then finds the service made): its counters are exported
    at 0 here.
    """
    from worker.runtime.pool import forks_pool_processes

    port = sender.app.settings.metrics_port
    if port is None:
        return
    if metrics.single_process_storage():
        _exit_unusable(metrics.SINGLE_PROCESS_PROBLEM)
    try:
        metrics.prepare(port)
    except OSError as error:
        _exit_unusable(f"{metrics.MULTIPROC_ENV} cannot be used for metrics: {error}")
    metrics.serve(port)
    if not forks_pool_processes(sender.pool_cls):
        _export_metrics_at_zero()


@signals.worker_process_init.connect  # type: ignore[untyped-decorator]
def _export_metrics_at_zero(**_: Any) -> None:
    """With metrics on, a pool process builds its service (and so its counters, every known
    label set at 0) when it starts rather than at its first message: a counter that first
    appears at 1 is invisible to increase(), so the first alert after a restart would page
    nobody. Building it can only fail as the first message would (the store was checked at
    worker_init): then the service is built on first use, as without metrics. Also called at
    worker_init by a worker whose pool has no processes of its own."""
    if app.settings.metrics_port is None:
        return
    try:
        app.service()
    except Exception as error:  # the first task reports it again, with its context
        from worker.observability.logging import get_logger

        get_logger().warning(
            "evidence_coverage.metrics_not_ready",
            problem=str(error),
            why="the counters appear with the first message this process handles",
        )


@signals.celeryd_init.connect  # type: ignore[untyped-decorator]
def _notices_as_json_lines(**_: Any) -> None:
    """Celery's worker writes its notices (Ctrl-C, warm and cold shutdown, restart) as plain
    text on stdout from its signal handlers, which it installs and re-installs at several
    points of start-up and shutdown; with JSON logs, the one function they all write through
    writes a JSON line instead, whenever the signal comes."""
    if app.settings.log_format != "json":
        return
    import celery.apps.worker

    plain = celery.apps.worker.safe_say

    def say(message: str, f: Any = sys.__stderr__) -> None:
        if f is not sys.__stdout__:
            plain(message, f)
            return
        from worker.observability.logging import write_line

        write_line(message.strip(), logger="celery.apps.worker")

    celery.apps.worker.safe_say = say


@signals.celeryd_after_setup.connect  # type: ignore[untyped-decorator]
def _banner_as_json_line(sender: str, instance: Any, **_: Any) -> None:
    """Celery's banner is a dozen plain-text lines on stdout; with JSON logs, its facts are one
    line and the banner is off (with or without --quiet)."""
    if app.settings.log_format != "json":
        return
    from celery import __version__ as celery_version

    from worker.observability.logging import get_logger
    from worker.runtime.pool import forks_pool_processes
    from worker.settings import masked_url

    instance.quiet = True
    pool = instance.pool_cls
    get_logger().info(
        "evidence_coverage.worker_starting",
        hostname=sender,
        celery_version=celery_version,
        broker=masked_url(app.settings.broker_url),
        queues=sorted(instance.app.amqp.queues.consume_from),
        concurrency=instance.concurrency,
        pool="prefork" if forks_pool_processes(pool) else pool.__module__.rsplit(".", 1)[-1],
    )


@signals.worker_process_init.connect  # type: ignore[untyped-decorator]
def _start_telemetry_in_pool_process(**_: Any) -> None:
    """With the otel extra and an OTLP endpoint, each pool process exports its task spans and
    evaluation events (worker/observability/telemetry.py); its exporters' threads start after the
    fork."""
    if telemetry.configured():
        telemetry.start()


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _start_telemetry_without_pool_processes(sender: Any, **_: Any) -> None:
    """`--pool solo` runs tasks in the main process: telemetry starts there instead."""
    from worker.runtime.pool import forks_pool_processes

    if telemetry.configured() and not forks_pool_processes(sender.pool_cls):
        telemetry.start()


@signals.worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _close_service(pid: int | None = None, **_: Any) -> None:
    app.close_service()
    metrics.forget_process(pid or os.getpid())
    _stop_telemetry()


def _stop_telemetry() -> None:
    exporting = telemetry.active()
    if exporting is not None:
        exporting.shutdown()


@signals.worker_shutdown.connect  # type: ignore[untyped-decorator]
def _remove_metrics_dir(**_: Any) -> None:
    metrics.cleanup()
    _stop_telemetry()


app = _app_from_environment()
