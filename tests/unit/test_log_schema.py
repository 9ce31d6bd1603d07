"""Log lines ingest unmapped: published JSON Schema, OpenTelemetry fields, ECS on request."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from contracts import AttributionResult
from contracts.records import NONDETERMINISM
from tests.conftest import FIXED_NOW, ROOT
from worker.errors import ConfigurationError
from worker.logging import (
    LogSchema,
    configure_logging,
    configure_stdlib_logging,
    emit_alert,
    emit_record,
    get_logger,
)
from worker.scoring import process, rejected_record
from worker.settings import Settings, load_settings
from worker.stores.sqlite import SQLiteStore

SCHEMAS = ROOT / "contracts" / "schemas"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PRODUCED_AT = "2026-12-01T09:30:00+02:00"  # 07:30 UTC
OTEL_FIELDS = {"severity_text", "severity_number", "service.name"}
ECS_FIELDS = {"@timestamp", "log.level", "message", "ecs.version"}


def validator(name: str) -> Draft202012Validator:
    """A validator for one published schema file, itself checked as a 2020-12 schema."""
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


COVERAGE_RECORD = validator("coverage-record.schema.json")
ALERT_RECORD = validator("alert-record.schema.json")


def published_errors(line: dict[str, Any]) -> list[str]:
    """Every way `line` breaks the schema published for its event; empty when it validates."""
    schema = ALERT_RECORD if line["event"] == NONDETERMINISM else COVERAGE_RECORD
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in schema.iter_errors(line)]


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.fixture
def emitted(
    tmp_path: Path, message: Callable[..., AttributionResult]
) -> Callable[[LogSchema], list[dict[str, Any]]]:
    """Emit, in one schema, the lines of a first score, a rejection and a conflicting re-score.

    The re-score keeps the inputs (so the input hash) and changes the grader's verdict, which
    is what a nondeterministic judge looks like: a warning record plus an ERROR alert line.
    """

    def emit(schema: LogSchema) -> list[dict[str, Any]]:
        stream = io.StringIO()
        configure_logging(stream=stream, schema=schema)
        store = SQLiteStore(tmp_path / f"{schema}.sqlite3")
        try:
            first = process(
                message(trace_id=TRACE_ID, produced_at=PRODUCED_AT),
                store=store,
                policy=None,
                clock=clocked,
            )
            emit_record(first.record)
            emit_record(
                rejected_record(
                    "schema: case_id: Field required", body={"answer": "x"}, recorded_at=FIXED_NOW
                )
            )
            again = process(
                message(supported_claim_ids=["refund-window"]),
                store=store,
                policy=None,
                clock=clocked,
            )
            emit_record(again.record)
            assert again.alert is not None
            emit_alert(again.alert)
        finally:
            store.close()
        return lines_of(stream)

    return emit


def clocked() -> datetime:
    return FIXED_NOW


LINES = ["scored", "rejected", "conflict", "alert"]
# (level, severity_text, severity_number) per line, in emission order.
SEVERITIES = [
    ("info", "INFO", 9),
    ("warning", "WARNING", 13),
    ("warning", "WARNING", 13),
    ("error", "ERROR", 17),
]


@pytest.mark.parametrize("schema", ["otel", "ecs"])
def test_every_line_validates_against_its_published_schema(
    schema: LogSchema, emitted: Callable[[LogSchema], list[dict[str, Any]]]
) -> None:
    """Scored, rejected, conflicting and alert lines each validate against contracts/schemas/."""
    lines = emitted(schema)

    assert [line["event"] for line in lines] == [
        "evidence_coverage.scored",
        "evidence_coverage.rejected",
        "evidence_coverage.scored",
        "evidence_coverage.nondeterminism",
    ]
    assert lines[2]["cache"] == "conflict"
    for name, line in zip(LINES, lines, strict=True):
        assert published_errors(line) == [], name


@pytest.mark.parametrize("schema", ["otel", "ecs"])
def test_record_lines_carry_their_times_as_iso_utc_text(
    schema: LogSchema, emitted: Callable[[LogSchema], list[dict[str, Any]]]
) -> None:
    """produced_at (the message's, in UTC; null when it has none) and recorded_at (the
    store's clock; a rejection's time) are ISO 8601 text ending in Z, like timestamp."""
    scored, rejected, conflict, _ = emitted(schema)

    assert [
        (line["produced_at"], line["recorded_at"]) for line in (scored, rejected, conflict)
    ] == [
        ("2026-12-01T07:30:00Z", "2026-12-01T12:00:00Z"),
        (None, "2026-12-01T12:00:00Z"),
        (None, "2026-12-01T12:00:00Z"),
    ]


@pytest.mark.parametrize("schema", ["otel", "ecs"])
def test_every_line_carries_opentelemetry_severity_and_service(
    schema: LogSchema, emitted: Callable[[LogSchema], list[dict[str, Any]]]
) -> None:
    """severity_text/severity_number follow the OTel data model; service.name names the worker."""
    lines = emitted(schema)

    assert [
        (line["level"], line["severity_text"], line["severity_number"]) for line in lines
    ] == SEVERITIES
    assert {line["service.name"] for line in lines} == {"evidence-coverage-worker"}


@pytest.mark.parametrize("schema", ["otel", "ecs"])
def test_our_own_keys_still_lead(
    schema: LogSchema, emitted: Callable[[LogSchema], list[dict[str, Any]]]
) -> None:
    """timestamp, level, event stay the first three keys whatever the schema."""
    for line in emitted(schema):
        assert list(line)[:3] == ["timestamp", "level", "event"]


def test_otel_keeps_trace_id_and_adds_no_ecs_fields(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
) -> None:
    """The default schema keeps trace_id (OTel's own name) and adds none of ECS's fields."""
    lines = emitted("otel")

    assert lines[0]["trace_id"] == TRACE_ID
    for line in lines:
        assert ECS_FIELDS.isdisjoint(line), line["event"]
        assert "trace.id" not in line


def test_ecs_adds_timestamp_level_message_and_version(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
) -> None:
    """With ecs, @timestamp, log.level and message mirror timestamp, level and event."""
    for line in emitted("ecs"):
        assert (line["@timestamp"], line["log.level"], line["message"], line["ecs.version"]) == (
            line["timestamp"],
            line["level"],
            line["event"],
            "8.11.0",
        )
        assert datetime.fromisoformat(line["@timestamp"]).utcoffset() is not None


def test_ecs_adds_trace_id_only_when_known(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
) -> None:
    """trace.id appears on the line whose message had a trace_id, and on no other."""
    lines = emitted("ecs")

    assert [line.get("trace.id") for line in lines] == [TRACE_ID, None, None, None]


def test_the_events_own_keys_win() -> None:
    """A key the caller logs (here ECS's message) is never overwritten by the schema fields."""
    stream = io.StringIO()
    configure_logging(stream=stream, schema="ecs")
    get_logger().info("evidence_coverage.debug", message="kept as logged")

    (line,) = lines_of(stream)
    assert (line["message"], line["event"]) == ("kept as logged", "evidence_coverage.debug")


def test_console_format_adds_no_collector_fields() -> None:
    """The console renderer is for people: no severity_number or service.name noise."""
    stream = io.StringIO()
    configure_logging("console", stream=stream, schema="ecs")
    get_logger().info("evidence_coverage.debug", case_id="refund-001")

    text = stream.getvalue()
    assert "case_id=refund-001" in text
    for name in ("severity_number", "service.name", "ecs.version"):
        assert name not in text


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    yield
    root.handlers[:], root.level = saved


@pytest.mark.usefixtures("restore_root_logger")
def test_stdlib_lines_get_the_same_fields() -> None:
    """Celery's and kombu's stdlib records get the OTel and ECS fields too."""
    stream = io.StringIO()
    configure_stdlib_logging(stream=stream, schema="ecs")
    logging.getLogger("kombu.connection").error("broker connection lost")

    (line,) = lines_of(stream)
    assert (line["severity_text"], line["severity_number"], line["log.level"]) == (
        "ERROR",
        17,
        "error",
    )
    assert (line["message"], line["service.name"]) == (
        "broker connection lost",
        "evidence-coverage-worker",
    )


def test_log_schema_defaults_to_otel() -> None:
    """With EVIDENCE_LOG_SCHEMA unset the worker logs the OTel field set."""
    assert Settings().log_schema == "otel"


def test_log_schema_reads_evidence_log_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """EVIDENCE_LOG_SCHEMA=ecs selects the ECS field set."""
    monkeypatch.setenv("EVIDENCE_LOG_SCHEMA", "ecs")

    assert load_settings().log_schema == "ecs"


def test_unknown_log_schema_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown schema name fails at start-up, naming the variable."""
    monkeypatch.setenv("EVIDENCE_LOG_SCHEMA", "gelf")

    with pytest.raises(ConfigurationError, match=r"^EVIDENCE_LOG_SCHEMA: "):
        load_settings()
