"""The worker's Celery signal handlers, connected by `connect(app)` where the worker starts.

worker/app.py (the `celery -A` target) calls `connect` once it has built the app; nothing is
connected by importing a module, so a test, a publisher or `evidence-worker` that builds its
own app runs none of these. Handlers that need the app take it from their signal's sender where
Celery sends one (the worker), or from `connect`'s closure where it does not (logging set-up
and pool processes). Each handler has a dispatch_uid: connecting again changes nothing, and the
first app connected is the one they serve.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from billiard.process import current_process  # type: ignore[import-untyped]
from celery import signals

from worker.errors import ConfigurationError
from worker.observability import metrics, telemetry
from worker.runtime import gc_tuning, kombu_json, termination

if TYPE_CHECKING:
    from celery.utils.dispatch import Signal

    from worker.runtime.celery_app import EvidenceApp

CONFIGURATION_EXIT_CODE = 2  # as the command line's configuration errors
DISPATCH_PREFIX = "evidence_coverage."


def exit_unusable(problem: str) -> NoReturn:
    """End the process with one line on stderr (Celery would print a traceback and carry on)."""
    print(f"evidence-worker: configuration error: {problem}", file=sys.stderr, flush=True)
    raise SystemExit(CONFIGURATION_EXIT_CODE)


def connect(app: EvidenceApp) -> None:
    """Connect the worker's handlers to Celery's signals, for `app`."""
    for signal, handler in _handlers(app):
        # Strong references: the closures below would otherwise be collected at once.
        signal.connect(handler, weak=False, dispatch_uid=DISPATCH_PREFIX + handler.__name__)


def _handlers(app: EvidenceApp) -> list[tuple[Signal, Callable[..., None]]]:
    def configure_logging(**_: Any) -> None:
        """Celery's own log lines go through structlog too, so stdout is one format."""
        from worker.observability.logging import configure_stdlib_logging

        configure_stdlib_logging(
            app.settings.log_format,
            schema=app.settings.log_schema,
            span_ids=telemetry.configured(),
        )

    def export_metrics_in_pool_process(**_: Any) -> None:
        export_metrics_at_zero(app)

    def hold_sigterm_in_pool_process(**_: Any) -> None:
        # Not where the solo pool runs tasks, in the main process: there SIGTERM is Celery's
        # warm shutdown, which waits for the task anyway.
        if current_process().name != "MainProcess":
            termination.install()

    def space_out_collections_in_pool_process(**_: Any) -> None:
        # Not in the main process, where the solo pool sends this too: Celery's own loop
        # there makes many cycles (worker/runtime/gc_tuning.py).
        if current_process().name != "MainProcess":
            gc_tuning.space_out()

    def close_service(pid: int | None = None, **_: Any) -> None:
        app.close_service()
        metrics.forget_process(pid or os.getpid())
        _stop_telemetry()

    return [
        (signals.setup_logging, configure_logging),
        (signals.celeryd_init, notices_as_json_lines),
        (signals.celeryd_after_setup, banner_as_json_line),
        (signals.celeryd_after_setup, warn_of_an_ended_window),
        (signals.worker_init, refuse_unusable_configuration),
        (signals.worker_init, decode_json_with_orjson),
        (signals.worker_init, serve_metrics),
        (signals.worker_init, start_telemetry_without_pool_processes),
        (signals.worker_process_init, export_metrics_in_pool_process),
        (signals.worker_process_init, start_telemetry_in_pool_process),
        (signals.worker_process_init, hold_sigterm_in_pool_process),
        (signals.worker_process_init, space_out_collections_in_pool_process),
        (signals.worker_process_shutdown, close_service),
        (signals.worker_shutdown, remove_metrics_dir),
    ]


def decode_json_with_orjson(**_: Any) -> None:
    """Task bodies decoded by orjson where it reads them as kombu does (kombu_json), in the
    main process before the pool forks, so in every pool process too."""
    kombu_json.install()


def refuse_unusable_configuration(sender: Any, **_: Any) -> None:
    """Before `ready`: a policy or store the first message would die on stops the worker now,
    with one line, instead of a worker that reports ready and fails every message."""
    try:
        sender.app.check_configuration()
    except ConfigurationError as error:
        exit_unusable(str(error))


def serve_metrics(sender: Any, **_: Any) -> None:
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
        exit_unusable(metrics.SINGLE_PROCESS_PROBLEM)
    try:
        metrics.prepare(port)
    except OSError as error:
        exit_unusable(f"{metrics.MULTIPROC_ENV} cannot be used for metrics: {error}")
    metrics.serve(port, sender.app.settings.metrics_host)
    if not forks_pool_processes(sender.pool_cls):
        export_metrics_at_zero(sender.app)


def export_metrics_at_zero(app: EvidenceApp) -> None:
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


def notices_as_json_lines(instance: Any, **_: Any) -> None:
    """Celery's worker writes its notices (Ctrl-C, warm and cold shutdown, restart) as plain
    text on stdout from its signal handlers, which it installs and re-installs at several
    points of start-up and shutdown; with JSON logs, the one function they all write through
    writes a JSON line instead, whenever the signal comes."""
    if instance.app.settings.log_format != "json":
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


def banner_as_json_line(sender: str, instance: Any, **_: Any) -> None:
    """Celery's banner is a dozen plain-text lines on stdout; with JSON logs, its facts are one
    line and the banner is off (with or without --quiet). With console logs the same facts are
    one console line, after the banner or, with --quiet (the Procfile's), instead of it."""
    settings = instance.app.settings
    from celery import __version__ as celery_version

    from worker.observability.logging import get_logger
    from worker.runtime.pool import forks_pool_processes
    from worker.settings import masked_url

    if settings.log_format == "json":
        instance.quiet = True
    pool = instance.pool_cls
    get_logger().info(
        "evidence_coverage.worker_starting",
        hostname=sender,
        celery_version=celery_version,
        broker=masked_url(settings.broker_url),
        store=instance.app.store_description(),
        queues=sorted(instance.app.amqp.queues.consume_from),
        concurrency=instance.concurrency,
        pool="prefork" if forks_pool_processes(pool) else pool.__module__.rsplit(".", 1)[-1],
    )


def warn_of_an_ended_window(instance: Any, **_: Any) -> None:
    """One warning at start-up, once logging is configured, when the policy's observation
    window has ended (SPEC §12): decisions no longer carry its previous rule."""
    instance.app.log_ended_window()


def start_telemetry_in_pool_process(**_: Any) -> None:
    """With the otel extra and an OTLP endpoint, each pool process exports its task spans and
    evaluation events (worker/observability/telemetry.py); its exporters' threads start after
    the fork."""
    if telemetry.configured():
        telemetry.start()


def start_telemetry_without_pool_processes(sender: Any, **_: Any) -> None:
    """`--pool solo` runs tasks in the main process: telemetry starts there instead."""
    from worker.runtime.pool import forks_pool_processes

    if telemetry.configured() and not forks_pool_processes(sender.pool_cls):
        telemetry.start()


def _stop_telemetry() -> None:
    exporting = telemetry.active()
    if exporting is not None:
        exporting.shutdown()


def remove_metrics_dir(**_: Any) -> None:
    metrics.cleanup()
    _stop_telemetry()
