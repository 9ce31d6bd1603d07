"""structlog, configured once: one JSON line per event on stdout (console renderer locally)."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

from contracts import Alert, ScoreRecord
from contracts.records import NONDETERMINISM

# Fields that could carry raw answer or context text; dropped from every log line.
RAW_TEXT_FIELDS = frozenset({"answer", "contexts", "text", "prompt", "body"})
PER_MESSAGE_LOGGERS = ("celery.app.trace", "celery.worker.strategy")


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


def shared_processors() -> list[structlog.typing.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        drop_raw_text,
        lead_with_when_and_what,
    ]


def configure_logging(
    log_format: str = "json", *, stream: TextIO | None = None, cache: bool = True
) -> None:
    """Route structlog to `stream` (stdout) as JSON lines, or a console renderer."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared_processors(), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        # One write() per line (message and newline together): prefork children share stdout,
        # and print()'s two writes let their lines interleave mid-record.
        logger_factory=structlog.WriteLoggerFactory(stream or sys.stdout),
        cache_logger_on_first_use=cache,
    )


def get_logger() -> Any:
    return structlog.get_logger("evidence_coverage")


def emit_record(record: ScoreRecord, **context: Any) -> None:
    """Log one message's record: info when scored, warning when rejected or conflicting."""
    fields = record.model_dump(mode="json", exclude={"event"})
    log = get_logger()
    method = log.info if record.log_level == "info" else log.warning
    method(record.event, **fields, **context)


def emit_alert(alert: Alert, **context: Any) -> None:
    """The nondeterminism alert as its own ERROR line: both outcomes and both attempts."""
    get_logger().error(NONDETERMINISM, **alert.model_dump(mode="json"), **context)


def configure_stdlib_logging(log_format: str = "json", *, stream: TextIO | None = None) -> None:
    """Send stdlib logging (Celery's, kombu's) through the same processors and renderer."""
    configure_logging(log_format, stream=stream)
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared_processors()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
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
