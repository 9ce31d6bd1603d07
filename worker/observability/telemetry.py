"""OpenTelemetry export, optional: on with the `otel` extra and OTEL_EXPORTER_OTLP_ENDPOINT.

Per process that runs tasks: a tracer and a logger provider exporting OTLP over HTTP (the
standard OTEL_* variables configure them; the service name defaults to ours), Celery's own
instrumentation (a span per task, continuing the trace whose W3C `traceparent` the task
message's headers carry) and one `gen_ai.evaluation.result` event per record, in that span,
named as OpenTelemetry's GenAI conventions name an evaluation's result, with our provenance
under `evidence_coverage.*`. Without the extra or the endpoint nothing of OpenTelemetry is
imported and nothing changes.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from contracts.metric import METRIC_NAME
from contracts.record_models import REJECTED, ScoreRecord
from worker.constants import LOGGER_NAME, SERVICE_NAME

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.trace import TracerProvider

ENDPOINT_VARIABLES: Final = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
)
EVALUATION_EVENT: Final = "gen_ai.evaluation.result"
FLUSH_MILLIS: Final = 5_000  # a worker's shutdown waits at most this long for its exports
# OpenTelemetry's SeverityNumber for a record's level (structlog's names).
SEVERITY: Final = {"info": 9, "warning": 13}


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process should export: an OTLP endpoint is set and the extra installed."""
    if not any(environ.get(name) for name in ENDPOINT_VARIABLES):
        return False
    return importlib.util.find_spec("opentelemetry.sdk") is not None


def evaluation_attributes(record: ScoreRecord) -> dict[str, str | float | bool]:
    """A record as a gen_ai.evaluation.result event's attributes: the convention's own
    (score value only for a valid row, label the decision, explanation the reason,
    error.type for a row that has no value) and our provenance, None values left out."""
    attributes: dict[str, Any] = {
        "gen_ai.evaluation.name": METRIC_NAME,
        "gen_ai.evaluation.score.value": record.value,
        "gen_ai.evaluation.score.label": record.status,
        "gen_ai.evaluation.explanation": record.reason,
        # Who graded (SPEC §10): proposed in OpenTelemetry's GenAI semantic conventions (PR
        # #359), not yet in them; the model, which they do not name, under ours.
        "gen_ai.evaluation.evaluator.name": record.grader_name,
        "gen_ai.evaluation.evaluator.version": record.grader_version,
        "error.type": ("rejected" if record.event == REJECTED else "invalid")
        if record.status == "invalid"
        else None,
        "evidence_coverage.case_id": record.case_id,
        "evidence_coverage.input_hash": record.input_hash,
        "evidence_coverage.contract_version": record.contract_version,
        "evidence_coverage.metric_version": record.metric_version,
        "evidence_coverage.policy_version": record.policy_version,
        "evidence_coverage.policy_group": record.policy_group,
        "evidence_coverage.threshold": record.threshold,
        "evidence_coverage.owner": record.owner,
        "evidence_coverage.cache": record.cache,
        "evidence_coverage.contract_drift": record.contract_drift,
        "evidence_coverage.grader_model": record.grader_model,
    }
    return {name: value for name, value in attributes.items() if value is not None}


_active: Telemetry | None = None


def active() -> Telemetry | None:
    """This process's telemetry, once start() ran here (OpenTelemetry's providers are
    process-wide too)."""
    return _active


class Telemetry:
    """The process's providers, and the event each record is exported as."""

    def __init__(self, tracer_provider: TracerProvider, logger_provider: LoggerProvider) -> None:
        from opentelemetry._logs import SeverityNumber

        self.pid = os.getpid()
        self.tracer_provider = tracer_provider
        self.logger_provider = logger_provider
        self._logger = logger_provider.get_logger(LOGGER_NAME)
        self._severity = {level: SeverityNumber(number) for level, number in SEVERITY.items()}

    def evaluation(self, record: ScoreRecord) -> None:
        """One gen_ai.evaluation.result event, in the current span (the task's)."""
        self._logger.emit(
            event_name=EVALUATION_EVENT,
            severity_number=self._severity[record.log_level],
            severity_text=record.log_level.upper(),
            attributes=evaluation_attributes(record),
        )

    def shutdown(self) -> None:
        """Export what is buffered (a warm shutdown must not drop the last spans and events)."""
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        global _active  # noqa: PLW0603 - the process's one, as OpenTelemetry's providers are
        _active = None
        CeleryInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
        self.tracer_provider.force_flush(FLUSH_MILLIS)
        self.logger_provider.force_flush(FLUSH_MILLIS)
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


def start(environ: Mapping[str, str] = os.environ) -> Telemetry:
    """Providers exporting OTLP over HTTP, installed as the process's own, and Celery
    instrumented; once per process (the solo pool's main process hears both worker_init and
    worker_process_init). Call it after the pool forks: the batch processors' threads do not
    survive a fork."""
    global _active  # noqa: PLW0603 - the process's one, as OpenTelemetry's providers are
    if _active is not None and _active.pid == os.getpid():
        return _active
    from opentelemetry import _logs, trace
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Resource.create lets attributes given here win over OTEL_SERVICE_NAME: ours is only
    # the default.
    given = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": SERVICE_NAME}
    resource = Resource.create(given)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    trace.set_tracer_provider(tracer_provider)
    _logs.set_logger_provider(logger_provider)
    CeleryInstrumentor().instrument(tracer_provider=tracer_provider)  # type: ignore[no-untyped-call]
    _active = Telemetry(tracer_provider, logger_provider)
    return _active


class SpanIds:
    """structlog processor: the current span's `span_id`, and its `trace_id` where the line
    has none, so a line and its span are found from each other."""

    def __init__(self) -> None:
        from opentelemetry import trace  # once, not on every line

        self._current_span = trace.get_current_span

    def __call__(self, _logger: Any, _method: str, event_dict: Any) -> Any:
        context = self._current_span().get_span_context()
        if context.is_valid:
            event_dict["span_id"] = format(context.span_id, "016x")
            if not event_dict.get("trace_id"):
                event_dict["trace_id"] = format(context.trace_id, "032x")
        return event_dict
