"""structlog, configured once: one JSON line per event on stdout (console renderer locally).

Each line carries the record's fields and the names a collector expects, so Loki, an
OpenTelemetry collector or Elasticsearch take it unmapped. `otel` (the default): our own keys
(`timestamp`, `level`, `event`) lead, beside `severity_text`, `severity_number` and
`service.name` as flat dotted keys (Loki's json parser turns them into service_name).
`ecs` (EVIDENCE_LOG_SCHEMA=ecs): an ECS document, field for field what Elastic's ecs-logging
writes, with our envelope under ECS's names (EcsRenderer).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import MutableMapping
from typing import Any, Final, Literal, TextIO

import orjson
import structlog

from contracts import ScoreRecord
from contracts.record_models import ALERT_EVENTS, AnyAlert, ContractDriftAlert, iso_utc
from contracts.triage import findings_json

# `X as X`: re-exported (PEP 484), so callers that took these names from here still can.
from worker.constants import LOGGER_NAME as LOGGER_NAME  # noqa: PLC0414
from worker.constants import SERVICE_NAME as SERVICE_NAME  # noqa: PLC0414

# Fields that could carry raw answer or context text; dropped from every log line.
RAW_TEXT_FIELDS = frozenset({"answer", "contexts", "text", "prompt", "body"})
STDOUT_FILENO = 1
PER_MESSAGE_LOGGERS = ("celery.app.trace", "celery.worker.strategy")

LogSchema = Literal["otel", "ecs"]
ECS_DATASET = "evidence_coverage"  # deploy/logging/vector.toml's data_stream.dataset
ECS_LOGGING_VERSION = "1.6.0"  # the ecs.version Elastic's ecs-logging 2.3 writes
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


class OtelFields:
    """Add OpenTelemetry's names beside ours; the event's own keys win.

    Nothing is renamed: dashboards and tests that read `timestamp`, `level`, `event` and
    `trace_id` keep working, and a collector finds the names its data model expects.
    """

    def __call__(
        self, _: Any, __: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        level = str(event_dict.get("level", "info"))
        added: dict[str, Any] = {
            "severity_text": level.upper(),
            "severity_number": SEVERITY_NUMBERS.get(level, 0),
            "service.name": SERVICE_NAME,
        }
        return {**added, **event_dict}


# Our envelope's names and their ECS twins, moved by EcsRenderer.
ECS_NAMES: Final = {
    "timestamp": "@timestamp",
    "level": "log.level",
    "logger": "log.logger",
    "exception.type": "error.type",
    "exception.message": "error.message",
    "exception.stacktrace": "error.stack_trace",
}


def ecs_fields(method: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """The event with our envelope under ECS's names, as flat dotted keys (what an ECS
    formatter is given): ECS maps `event` as an object, so the event name is `event.action`,
    with `event.dataset` the data stream's dataset; `logger` is `log.logger`; an exception is
    `error.type`, `error.message` and `error.stack_trace`; the message's trace ID is `trace.id`
    beside our `trace_id`. The record's own fields keep their names."""
    fields = {ECS_NAMES.get(key, key): value for key, value in event_dict.items()}
    fields.setdefault("log.level", method)
    fields.setdefault("log.logger", LOGGER_NAME)
    fields["event.action"] = fields.get("event")
    fields["event.dataset"] = ECS_DATASET
    fields["service.name"] = SERVICE_NAME
    if isinstance(fields.get("trace_id"), str) and fields["trace_id"]:
        fields["trace.id"] = fields["trace_id"]
    return fields


class EcsRenderer:
    """One ECS document per line: field for field what Elastic's ecs-logging (2.3) writes for
    ecs_fields() (tests/unit/test_log_schema.py renders the same events with both), leading
    with @timestamp, log.level and message, ecs.version as the version it writes, every other
    dotted name nested.

    Written here rather than calling ecs-logging's StructlogFormatter because that one spells
    the line with json.dumps(sort_keys=True) after walking every value for dotted keys, which
    tripled the cost of a record's line; this one nests only the dotted keys at the top (no
    value of ours holds one) and spells the line with the default schema's dumps().
    """

    def __call__(self, _logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        fields = ecs_fields(method, event_dict)
        document: dict[str, Any] = {
            "@timestamp": fields.pop("@timestamp"),  # shared_processors() stamps every event
            "log.level": fields.pop("log.level"),
            "message": str(fields.pop("event", None)),
            "ecs.version": ECS_LOGGING_VERSION,
        }
        for key, value in fields.items():
            if "." not in key:
                document[key] = value
                continue
            *parents, leaf = key.split(".")
            node = document
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value
        return dumps(document)


def shared_processors(
    schema: LogSchema | None = "otel", *, span_ids: bool = False
) -> list[structlog.typing.Processor]:
    """The chain before rendering; `schema=None` adds no collector fields (console, for people);
    `span_ids` adds the current OpenTelemetry span's IDs (worker/observability/telemetry.py).

    ECS names are the renderer's business (EcsRenderer): they must see exception fields that
    the stdlib chain adds after these processors."""
    chain: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        drop_raw_text,
    ]
    if span_ids:
        from worker.observability.telemetry import SpanIds

        chain.append(SpanIds())
    if schema == "ecs":
        return chain
    return [*chain, *([OtelFields()] if schema == "otel" else []), lead_with_when_and_what]


def dumps(value: Any, **_: Any) -> str:
    """JSON for one line: orjson (several times faster than json, and this is the hot path),
    json where orjson refuses (lone surrogates from hostile input, integers beyond 64 bits)."""
    try:
        return orjson.dumps(value, default=repr).decode()
    except TypeError:
        return json.dumps(value, default=repr)  # ASCII escapes: a lone surrogate stays writable


def _renderer(log_format: str, schema: LogSchema) -> structlog.typing.Processor:
    if log_format != "json":
        return structlog.dev.ConsoleRenderer(colors=False)
    if schema == "ecs":
        return EcsRenderer()
    return structlog.processors.JSONRenderer(serializer=dumps)


# The processors configure_logging() last set for JSON lines in the otel schema without span
# IDs: the chain RecordLines (worker/observability/structlog_lines.py) spells record lines as,
# without running it. A tuple of them, as structlog's capture_logs() swaps the processors in
# the configured list itself.
_record_chain: tuple[structlog.typing.Processor, ...] | None = None


def record_chain() -> tuple[structlog.typing.Processor, ...] | None:
    """The processors configure_logging() last set, when they were JSON lines in the otel
    schema without span IDs (the chain RecordLines spells); None after any other."""
    return _record_chain


def configure_logging(
    log_format: str = "json",
    *,
    stream: TextIO | None = None,
    cache: bool = True,
    schema: LogSchema = "otel",
    span_ids: bool = False,
) -> None:
    """Route structlog to `stream` (stdout) as JSON lines in `schema`, or a console renderer."""
    global _record_chain  # noqa: PLW0603 - one per configuration by design
    processors = [
        *shared_processors(schema if log_format == "json" else None, span_ids=span_ids),
        *([exception_fields] if log_format == "json" else []),
        _renderer(log_format, schema),
    ]
    _record_chain = (
        tuple(processors) if log_format == "json" and schema == "otel" and not span_ids else None
    )
    structlog.configure(
        processors=processors,
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
        _bound = (processors, factory, structlog.get_logger(LOGGER_NAME).bind())
    return _bound[2]


def record_fields(record: ScoreRecord) -> dict[str, Any]:
    """A record's fields but `event` as JSON values, in its field order."""
    # Every ScoreRecord field but `findings` and the two times is a JSON value already (str,
    # float, int, bool, None, lists of str), so the model's field values (its __dict__) are
    # its JSON dump, without model_dump's walk.
    fields = record.__dict__.copy()
    del fields["event"]
    # The review band's and the observation window's fields are left out where unset, as
    # ScoreRecord dumps them (SPEC §12): a record without them is spelled as it always was.
    if fields["review_band"] is None:
        del fields["review_band"]
    if fields["previous_status"] is None:
        del fields["previous_policy_version"], fields["previous_status"]
    if record.findings:  # the one field of models: dumped in one call, not one per finding
        fields["findings"] = findings_json(record.findings)
    if record.recorded_at is not None:  # ISO 8601 UTC text, as `timestamp` is written
        fields["recorded_at"] = iso_utc(record.recorded_at)
    if record.produced_at is not None:
        fields["produced_at"] = iso_utc(record.produced_at)
    return fields


def emit_record(record: ScoreRecord, **context: Any) -> None:
    """Log one message's record: info when scored, warning when rejected or conflicting.

    `context` adds fields or sets record fields known only after it was built (duration_ms).
    """
    fields = record_fields(record)
    fields.update(context)
    log = get_logger()
    method = log.info if record.log_level == "info" else log.warning
    method(record.event, **fields)


def write_line(event: str, *, level: str = "warning", **fields: Any) -> None:
    """One log line through the configured processors, written to stdout's file descriptor
    in one os.write: safe inside a signal handler, where the interrupted code may hold the
    stream's lock (a second buffered write would raise "reentrant call")."""
    event_dict: structlog.typing.EventDict = {"event": event, **fields}
    rendered: Any = event_dict
    for processor in structlog.get_config()["processors"]:
        rendered = processor(None, level, rendered)
    os.write(STDOUT_FILENO, f"{rendered}\n".encode("utf-8", "backslashreplace"))


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
    log_format: str = "json",
    *,
    stream: TextIO | None = None,
    schema: LogSchema = "otel",
    span_ids: bool = False,
) -> None:
    """Send stdlib logging (Celery's, kombu's) through the same processors and renderer."""
    configure_logging(log_format, stream=stream, schema=schema, span_ids=span_ids)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            *shared_processors(schema if log_format == "json" else None, span_ids=span_ids),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *([exception_fields] if log_format == "json" else []),
            _renderer(log_format, schema),
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
