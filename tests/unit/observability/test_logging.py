"""worker.observability.logging: one JSON line per event, led by timestamp/level/event, raw text
redacted."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from contracts import METRIC_VERSION, RAGAS_VERSION, Alert, AlertRecord, Attempt, CoverageRecord
from contracts.record_models import ScoreRecord
from tests import factories
from worker.observability.logging import (
    PER_MESSAGE_LOGGERS,
    LogSchema,
    configure_logging,
    configure_stdlib_logging,
    emit_alert,
    emit_record,
    get_logger,
    write_line,
)

HASH = "f4a60bffff38ff313c11ab8913e01295481e46a154e779215d15bb8a87825a44"
WHEN = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def score_record(**overrides: Any) -> ScoreRecord:
    fields: dict[str, Any] = {
        "event": "evidence_coverage.scored",
        "case_id": "refund-002",
        "input_hash": HASH,
        "contract_version": "support-faq/2026-10",
        "metric_version": METRIC_VERSION,
        "ragas_version": RAGAS_VERSION,
        "worker_version": "0.1.0",
        "value": 2 / 3,
        "reason": "supported=2; required=3; missing=refund-method",
        "status": "fail",
        "policy_group": "default",
        "policy_version": "2026-12-01",
        "threshold": 0.85,
        "blocking": True,
        "owner": "product",
        "cache": "miss",
        "task_id": "task-1",
        **overrides,
    }
    return ScoreRecord(**fields)


def attempt(case_id: str, supported: list[str], value: float, reason: str) -> Attempt:
    return factories.attempt(
        case_id=case_id,
        task_id=f"task-{case_id}",
        supported_claim_ids=supported,
        value=value,
        reason=reason,
        recorded_at=WHEN,
    )


def alert() -> Alert:
    return Alert(
        input_hash=HASH,
        first=attempt(
            "refund-002",
            ["refund-window", "support-channel"],
            2 / 3,
            "supported=2; required=3; missing=refund-method",
        ),
        observed=attempt(
            "refund-002-retry",
            ["refund-window"],
            1 / 3,
            "supported=1; required=3; missing=refund-method,support-channel",
        ),
        raised_at=WHEN,
    )


@pytest.fixture
def stream() -> io.StringIO:
    """A real JSON configuration writing to a buffer instead of stdout."""
    buffer = io.StringIO()
    configure_logging(stream=buffer)
    return buffer


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_the_logger_follows_each_new_configuration() -> None:
    """get_logger() is bound once per configuration: a new stream or capture_logs takes over,
    and the earlier configuration's stream gets nothing more."""
    first, second = io.StringIO(), io.StringIO()
    configure_logging(stream=first)
    emit_record(score_record(case_id="one"))
    assert get_logger() is get_logger()
    configure_logging(stream=second)
    emit_record(score_record(case_id="two"))
    with capture_logs() as logs:
        emit_record(score_record(case_id="three"))
    emit_record(score_record(case_id="four"))

    assert [line["case_id"] for line in lines_of(first)] == ["one"]
    assert [line["case_id"] for line in lines_of(second)] == ["two", "four"]
    assert [entry["case_id"] for entry in logs] == ["three"]


# With capture_logs: what is logged, at which level -----------------------------------------


def test_emit_record_logs_every_record_field() -> None:
    """emit_record logs the record's event with all its other fields unchanged."""
    record = score_record()
    with capture_logs() as logs:
        emit_record(record)

    assert logs == [
        {
            **record.model_dump(mode="json", exclude={"event"}),
            "event": "evidence_coverage.scored",
            "log_level": "info",
        }
    ]


@pytest.mark.parametrize(
    ("overrides", "level"),
    [
        pytest.param({}, "info", id="scored"),
        pytest.param({"cache": "hit"}, "info", id="hit"),
        pytest.param({"status": "invalid", "value": None, "threshold": None}, "info", id="invalid"),
        pytest.param({"cache": "conflict"}, "warning", id="conflict"),
        pytest.param(
            {"event": "evidence_coverage.rejected", "input_hash": None, "cache": None},
            "warning",
            id="rejected",
        ),
    ],
)
def test_emit_record_level(overrides: dict[str, Any], level: str) -> None:
    """Scored records are info; rejected and conflicting ones are warnings."""
    with capture_logs() as logs:
        emit_record(score_record(**overrides))

    assert [entry["log_level"] for entry in logs] == [level]


def test_emit_record_adds_context_fields() -> None:
    """Keyword context passed to emit_record lands on the same line."""
    with capture_logs() as logs:
        emit_record(score_record(), retries=2)

    assert logs[0]["retries"] == 2


def test_emit_alert_is_an_error_named_nondeterminism() -> None:
    """emit_alert logs one ERROR event evidence_coverage.nondeterminism with both attempts."""
    with capture_logs() as logs:
        emit_alert(alert(), line=4)

    assert len(logs) == 1
    entry = logs[0]
    assert (entry["event"], entry["log_level"], entry["input_hash"], entry["line"]) == (
        "evidence_coverage.nondeterminism",
        "error",
        HASH,
        4,
    )
    assert (entry["first"]["case_id"], entry["observed"]["case_id"]) == (
        "refund-002",
        "refund-002-retry",
    )
    assert entry["decision"] == "kept_first"


# With the real configuration: the rendered JSON line --------------------------------------


def test_emit_record_writes_one_json_line(stream: io.StringIO) -> None:
    """One record is exactly one newline-terminated JSON line."""
    emit_record(score_record())

    assert stream.getvalue().count("\n") == 1
    assert stream.getvalue().endswith("}\n")
    assert len(lines_of(stream)) == 1


def test_line_leads_with_timestamp_level_event(stream: io.StringIO) -> None:
    """The first three keys are timestamp, level and event, in that order."""
    emit_record(score_record())

    line = lines_of(stream)[0]
    assert list(line)[:3] == ["timestamp", "level", "event"]
    assert (line["level"], line["event"]) == ("info", "evidence_coverage.scored")


def test_timestamp_is_iso8601_utc(stream: io.StringIO) -> None:
    """The timestamp is ISO 8601 in UTC, ending in Z or +00:00, and close to now."""
    before = datetime.now(UTC)
    emit_record(score_record())
    after = datetime.now(UTC)

    timestamp = lines_of(stream)[0]["timestamp"]
    assert timestamp.endswith(("Z", "+00:00"))
    parsed = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    assert parsed.utcoffset() == timedelta(0)
    assert before <= parsed <= after


def test_record_line_validates_as_coverage_record(stream: io.StringIO) -> None:
    """The rendered record line is a valid published CoverageRecord with the same values."""
    record = score_record()
    emit_record(record)

    published = CoverageRecord.model_validate(lines_of(stream)[0])
    # The OpenTelemetry fields are extras beside the record's own (tests/unit/test_log_schema.py).
    collector_fields = {"severity_text", "severity_number", "service.name"}
    assert published.model_dump(exclude={"timestamp", "level", *collector_fields}) == (
        record.model_dump()
    )


def test_alert_line_validates_as_alert_record(stream: io.StringIO) -> None:
    """The rendered alert line is a valid AlertRecord at level error."""
    emit_alert(alert())

    line = lines_of(stream)[0]
    published = AlertRecord.model_validate(line)
    assert (published.level, published.event) == ("error", "evidence_coverage.nondeterminism")
    assert list(line)[:3] == ["timestamp", "level", "event"]
    assert published.observed.supported_claim_ids == ["refund-window"]


@pytest.mark.parametrize("field", ["answer", "contexts", "text", "prompt", "body"])
def test_raw_text_fields_are_redacted(field: str, stream: io.StringIO) -> None:
    """A raw-text field passed to the logger is replaced by '[redacted]'."""
    secret = "Items may be returned within 30 days of delivery."
    get_logger().info("evidence_coverage.debug", **{field: secret}, case_id="refund-001")

    line = lines_of(stream)[0]
    assert line[field] == "[redacted]"
    assert line["case_id"] == "refund-001"
    assert secret not in stream.getvalue()


def test_redaction_covers_nested_structures(stream: io.StringIO) -> None:
    """A whole contexts list is redacted, not just strings at the top level."""
    contexts = [{"document_id": "policy/returns#window", "text": "Items may be returned."}]
    get_logger().warning("evidence_coverage.debug", contexts=contexts)

    assert lines_of(stream)[0]["contexts"] == "[redacted]"
    assert "Items may be returned." not in stream.getvalue()


def test_bound_context_is_merged(stream: io.StringIO) -> None:
    """Context bound with bind_contextvars appears on the record line."""
    structlog.contextvars.bind_contextvars(task_name="evidence_coverage.score", retries=1)
    emit_record(score_record())

    line = lines_of(stream)[0]
    assert (line["task_name"], line["retries"]) == ("evidence_coverage.score", 1)


def test_record_fields_win_over_bound_context(stream: io.StringIO) -> None:
    """A bound case_id never overrides the record's own case_id."""
    structlog.contextvars.bind_contextvars(case_id="stale-case")
    emit_record(score_record())

    assert lines_of(stream)[0]["case_id"] == "refund-002"


def test_console_format_is_not_json() -> None:
    """The console renderer writes a human line naming the event, not JSON."""
    buffer = io.StringIO()
    configure_logging("console", stream=buffer)
    emit_record(score_record())

    text = buffer.getvalue()
    assert "evidence_coverage.scored" in text
    assert not text.lstrip().startswith("{")


def test_reconfiguring_moves_output_to_the_new_stream() -> None:
    """A later configure_logging call redirects lines even after loggers were used."""
    first, second = io.StringIO(), io.StringIO()
    configure_logging(stream=first)
    emit_record(score_record())
    configure_logging(stream=second)
    emit_record(score_record(case_id="refund-003"))

    assert [line["case_id"] for line in lines_of(first)] == ["refund-002"]
    assert [line["case_id"] for line in lines_of(second)] == ["refund-003"]


def exception_of(line: dict[str, Any], schema: LogSchema) -> tuple[str, str, str]:
    """(type, message, stack) from OpenTelemetry's exception.* or ECS's error object."""
    if schema == "ecs":
        error = line["error"]
        return error["type"], error["message"], error["stack_trace"]
    return line["exception.type"], line["exception.message"], line["exception.stacktrace"]


@pytest.mark.parametrize("schema", ["otel", "ecs"])
def test_our_own_error_line_s_exception_is_in_the_schema_s_exception_fields(
    schema: LogSchema,
) -> None:
    """A line of ours with exc_info (a task failing on a bug): its type, message and frames
    as text, never the exception's repr."""
    stream = io.StringIO()
    configure_logging(stream=stream, schema=schema)
    try:
        raise KeyError("refund-method")
    except KeyError as error:
        get_logger().error("evidence_coverage.task_failed", exc_info=error)

    (line,) = lines_of(stream)
    kind, message, stack = exception_of(line, schema)
    assert (kind, message) == ("KeyError", "'refund-method'")
    assert stack.startswith("Traceback (most recent call last):\n")
    assert stack.endswith("KeyError: 'refund-method'\n")
    assert "exc_info" not in line


# stdlib logging (Celery, kombu) through the same pipeline ---------------------------------


@pytest.fixture
def stdlib_stream() -> Iterator[io.StringIO]:
    """configure_stdlib_logging into a buffer; the root logger and levels are restored after."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    saved_levels = {name: logging.getLogger(name).level for name in PER_MESSAGE_LOGGERS}
    buffer = io.StringIO()
    configure_stdlib_logging(stream=buffer)
    yield buffer
    root.handlers[:], root.level = saved[0], saved[1]
    for name, level in saved_levels.items():
        logging.getLogger(name).setLevel(level)


def test_a_stdlib_error_s_traceback_is_in_opentelemetry_exception_fields(
    stdlib_stream: io.StringIO,
) -> None:
    """Celery's "Unrecoverable error" carries exc_info: the JSON line must say where."""

    def fail() -> None:
        raise AttributeError("'NoneType' object has no attribute 'hostname'")

    try:
        fail()
    except AttributeError as error:
        logging.getLogger("celery.worker").critical("Unrecoverable error: %r", error, exc_info=True)

    (line,) = lines_of(stdlib_stream)
    assert "exc_info" not in line
    assert (line["exception.type"], line["exception.message"]) == (
        "AttributeError",
        "'NoneType' object has no attribute 'hostname'",
    )
    stack = line["exception.stacktrace"]
    assert stack.startswith("Traceback (most recent call last):\n")
    assert "in fail\n" in stack
    assert stack.endswith("AttributeError: 'NoneType' object has no attribute 'hostname'\n")


def test_stdlib_warning_is_a_json_line(stdlib_stream: io.StringIO) -> None:
    """A stdlib warning (e.g. kombu's) renders as one JSON line led by timestamp/level/event."""
    logging.getLogger("kombu.connection").warning("broker connection lost")

    (line,) = lines_of(stdlib_stream)
    assert list(line)[:3] == ["timestamp", "level", "event"]
    assert (line["level"], line["event"], line["logger"]) == (
        "warning",
        "broker connection lost",
        "kombu.connection",
    )


def test_per_message_celery_info_is_silenced(stdlib_stream: io.StringIO) -> None:
    """Celery's per-task INFO lines are dropped; the one record per message says it all."""
    for name in PER_MESSAGE_LOGGERS:
        logging.getLogger(name).info("Task received")

    assert stdlib_stream.getvalue() == ""


def test_write_line_renders_through_the_configured_processors_to_stdout_s_descriptor(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A signal handler's notice is one JSON line like any other, written to file descriptor 1."""
    configure_logging("json")

    write_line("worker: Warm shutdown (MainProcess)", logger="celery.apps.worker")

    (line,) = capfd.readouterr().out.splitlines()
    fields = json.loads(line)
    assert list(fields)[:3] == ["timestamp", "level", "event"]
    assert (fields["level"], fields["event"], fields["logger"], fields["severity_number"]) == (
        "warning",
        "worker: Warm shutdown (MainProcess)",
        "celery.apps.worker",
        13,
    )
