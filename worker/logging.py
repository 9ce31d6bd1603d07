"""structlog, configured once: one JSON line per event on stdout (console renderer locally).

Each JSON line carries our own keys (`timestamp`, `level`, `event`, the record's fields) and the
names collectors expect, so Loki, an OpenTelemetry collector or Elasticsearch take it unmapped:
`severity_text`, `severity_number` and `service.name` always (`otel`, the default), plus
`@timestamp`, `log.level`, `message`, `ecs.version` and `trace.id` with EVIDENCE_LOG_SCHEMA=ecs.
Dotted names are flat keys: Elasticsearch expands them into ECS's nested fields, and Loki's
json parser turns them into service_name and the like. ECS reserves `event` for an object;
the shipper moves ours to event.action (deploy/logging/vector.toml).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import MutableMapping
from typing import Any, Final, Literal, TextIO

import orjson
import structlog

from contracts import ScoreRecord
from contracts.records import ALERT_EVENTS, AnyAlert, ContractDriftAlert, iso_utc
from contracts.triage import findings_json

# Fields that could carry raw answer or context text; dropped from every log line.
RAW_TEXT_FIELDS = frozenset({"answer", "contexts", "text", "prompt", "body"})
PER_MESSAGE_LOGGERS = ("celery.app.trace", "celery.worker.strategy")

LogSchema = Literal["otel", "ecs"]
SERVICE_NAME = "evidence-coverage-worker"
ECS_VERSION = "8.11.0"
# OpenTelemetry log data model SeverityNumber, by structlog level name; 0 is UNSPECIFIED.
SEVERITY_NUMBERS = {"debug": 5, "info": 9, "warning": 13, "error": 17, "critical": 21}


def drop_raw_text(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Never let raw answer/context text reach a log line, whoever logs it."""
    for field in RAW_TEXT_FIELDS.intersection(event_dict):
        event_dict[field] = "[redacted]"
    return event_dict


def lead_with_when_and_what(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """timestamp, level, event first: easier for people reading raw lines; parsers don't care."""
    lead: dict[str, Any] = {
        key: event_dict.pop(key) for key in ("timestamp", "level", "event") if key in event_dict
    }
    return {**lead, **event_dict}


class SchemaFields:
    """Add the OpenTelemetry (and with `ecs`, ECS) names beside ours; the event's own keys win.

    Nothing is renamed: dashboards and tests that read `timestamp`, `level`, `event` and
    `trace_id` keep working, and a collector finds the names its data model expects.
    """

    def __init__(self, schema: LogSchema = "otel") -> None:
        self.schema = schema

    def __call__(
        self, _: Any, __: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        level = str(event_dict.get("level", "info"))
        added: dict[str, Any] = {
            "severity_text": level.upper(),
            "severity_number": SEVERITY_NUMBERS.get(level, 0),
            "service.name": SERVICE_NAME,
        }
        if self.schema == "ecs":
            added |= {
                "@timestamp": event_dict.get("timestamp"),
                "log.level": level,
                "message": event_dict.get("event"),
                "ecs.version": ECS_VERSION,
            }
            if event_dict.get("trace_id"):
                added["trace.id"] = event_dict["trace_id"]
        return {**added, **event_dict}


def shared_processors(schema: LogSchema | None = "otel") -> list[structlog.typing.Processor]:
    """The chain before rendering; `schema=None` adds no collector fields (console, for people)."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        drop_raw_text,
        *([SchemaFields(schema)] if schema is not None else []),
        lead_with_when_and_what,
    ]


def dumps(value: Any, **_: Any) -> str:
    """JSON for one line: orjson (several times faster than json, and this is the hot path),
    json where orjson refuses (lone surrogates from hostile input, integers beyond 64 bits)."""
    try:
        return orjson.dumps(value, default=repr).decode()
    except TypeError:
        return json.dumps(value, default=repr)  # ASCII escapes: a lone surrogate stays writable


def _renderer(log_format: str) -> structlog.typing.Processor:
    if log_format == "json":
        return structlog.processors.JSONRenderer(serializer=dumps)
    return structlog.dev.ConsoleRenderer(colors=False)


def configure_logging(
    log_format: str = "json",
    *,
    stream: TextIO | None = None,
    cache: bool = True,
    schema: LogSchema = "otel",
) -> None:
    """Route structlog to `stream` (stdout) as JSON lines in `schema`, or a console renderer."""
    structlog.configure(
        processors=[
            *shared_processors(schema if log_format == "json" else None),
            _renderer(log_format),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        # One write() per line (message and newline together): prefork children share stdout,
        # and print()'s two writes let their lines interleave mid-record.
        logger_factory=structlog.WriteLoggerFactory(stream or sys.stdout),
        cache_logger_on_first_use=cache,
    )


_bound: tuple[object, object, Any] | None = None  # (processors, logger factory, logger)


def get_logger() -> Any:
    """The evidence_coverage logger, bound once per structlog configuration.

    structlog.get_logger() returns a new lazy proxy that builds a new logger on first use,
    on every record; this one is rebuilt only when structlog is configured anew
    (configure_logging, a test's capture_logs), which replaces the processors list.
    """
    global _bound  # noqa: PLW0603 - one per configuration by design
    config = structlog.get_config()
    processors, factory = config["processors"], config["logger_factory"]
    if _bound is None or _bound[0] is not processors or _bound[1] is not factory:
        _bound = (processors, factory, structlog.get_logger("evidence_coverage").bind())
    return _bound[2]


def emit_record(record: ScoreRecord, **context: Any) -> None:
    """Log one message's record: info when scored, warning when rejected or conflicting.

    `context` adds fields or sets record fields known only after it was built (duration_ms).
    """
    # Every ScoreRecord field but `findings` and the two times is a JSON value already (str,
    # float, int, bool, None, lists of str), so the model's field values (its __dict__) are
    # its JSON dump, without model_dump's walk.
    fields = record.__dict__.copy()
    del fields["event"]
    if record.findings:  # the one field of models: dumped in one call, not one per finding
        fields["findings"] = findings_json(record.findings)
    if record.recorded_at is not None:  # ISO 8601 UTC text, as `timestamp` is written
        fields["recorded_at"] = iso_utc(record.recorded_at)
    if record.produced_at is not None:
        fields["produced_at"] = iso_utc(record.produced_at)
    fields.update(context)
    log = get_logger()
    method = log.info if record.log_level == "info" else log.warning
    method(record.event, **fields)


# A stored attempt's excerpts (EVIDENCE_KEEP_EXCERPTS) are answer text: they stay in the store.
_NO_EXCERPTS: Final = {"citations": {"__all__": {"excerpt"}}}


def alert_fields(alert: AnyAlert) -> dict[str, Any]:
    """An alert as JSON values for a log line or the webhook: both attempts, no excerpts."""
    if isinstance(alert, ContractDriftAlert):
        return alert.model_dump(mode="json")
    return alert.model_dump(mode="json", exclude={"first": _NO_EXCERPTS, "observed": _NO_EXCERPTS})


def emit_alert(alert: AnyAlert, **context: Any) -> None:
    """An alert as its own ERROR line: a conflict's two outcomes and attempts, or a drift's
    two required sets, hashes and task IDs."""
    get_logger().error(ALERT_EVENTS[alert.kind], **alert_fields(alert), **context)


def exception_fields(
    _logger: Any, _method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """A record's exc_info (Celery's and kombu's errors carry one) as OpenTelemetry's
    exception.type, exception.message and exception.stacktrace, the traceback as text:
    rendered as JSON, the tuple itself would only say "<traceback object at 0x...>"."""
    exc_info = event.pop("exc_info", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    elif isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    if isinstance(exc_info, tuple) and exc_info[0] is not None:
        error_type, error, trace = exc_info
        event["exception.type"] = error_type.__qualname__
        event["exception.message"] = str(error)
        event["exception.stacktrace"] = "".join(
            traceback.format_exception(error_type, error, trace)
        )
    return event


def configure_stdlib_logging(
    log_format: str = "json", *, stream: TextIO | None = None, schema: LogSchema = "otel"
) -> None:
    """Send stdlib logging (Celery's, kombu's) through the same processors and renderer."""
    configure_logging(log_format, stream=stream, schema=schema)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            *shared_processors(schema if log_format == "json" else None),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([exception_fields] if log_format == "json" else []),
            _renderer(log_format),
        ],
    )
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # "Task received" / "Task succeeded" would be extra lines per message: our one record
    # per message already says it. Their warnings and errors still come through.
    for name in PER_MESSAGE_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
