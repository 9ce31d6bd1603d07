"""Log lines ingest unmapped: published JSON Schema, OpenTelemetry fields, ECS on request."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import ecs_logging
import pytest
from jsonschema import Draft202012Validator

from contracts import AttributionResult
from contracts.record_models import NONDETERMINISM
from tests.conftest import FIXED_NOW, ROOT
from tests.ecs import ecs_conflicts, leaves
from worker.errors import ConfigurationError
from worker.observability.logging import (
    EcsRenderer,
    LogSchema,
    configure_logging,
    configure_stdlib_logging,
    ecs_fields,
    emit_alert,
    emit_record,
    get_logger,
    write_line,
)
from worker.pipeline.scoring import process, rejected_record
from worker.settings import Settings, load_settings
from worker.stores.sqlite.sqlite_store import SQLiteStore

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


def envelope_as_ours(document: dict[str, Any]) -> dict[str, Any]:
    """An ECS document with its envelope named as in the default schema again."""
    ours = {
        key: value
        for key, value in document.items()
        if key not in {"@timestamp", "log.level", "message", "ecs.version"}
        and key not in {"event", "log", "service", "trace", "ecs"}
    }
    return {
        "timestamp": document["@timestamp"],
        "level": document["log.level"],
        "event": document["event"]["action"],
        **ours,
    }


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
    """Scored, rejected, conflicting and alert lines each validate against contracts/schemas/;
    an ECS document does once its envelope is named as in the default schema again."""
    lines = emitted(schema)
    if schema == "ecs":
        lines = [envelope_as_ours(document) for document in lines]

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


def test_every_line_carries_opentelemetry_severity_and_service(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
) -> None:
    """severity_text/severity_number follow the OTel data model; service.name names the worker."""
    lines = emitted("otel")

    assert [
        (line["level"], line["severity_text"], line["severity_number"]) for line in lines
    ] == SEVERITIES
    assert {line["service.name"] for line in lines} == {"evidence-coverage-worker"}


def test_our_own_keys_still_lead(emitted: Callable[[LogSchema], list[dict[str, Any]]]) -> None:
    """timestamp, level, event are the first three keys of the default schema's lines."""
    for line in emitted("otel"):
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


def test_ecs_documents_lead_with_timestamp_level_and_message(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
) -> None:
    """ecs-logging's order: @timestamp, log.level, message (the event name) come first."""
    documents = emitted("ecs")
    for document in documents:
        assert list(document)[:3] == ["@timestamp", "log.level", "message"]
        assert datetime.fromisoformat(document["@timestamp"]).utcoffset() is not None
        assert document["event"]["action"] == document["message"]
    assert [document["log.level"] for document in documents] == [
        level for level, _, _ in SEVERITIES
    ]


def test_ecs_documents_name_the_event_dataset_logger_service_and_version(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
) -> None:
    """event.action holds our event name; the rest of the envelope is ECS's own."""
    for document in emitted("ecs"):
        assert document["event"] == {"action": document["message"], "dataset": "evidence_coverage"}
        assert document["log"] == {"logger": "evidence_coverage"}
        assert document["service"] == {"name": "evidence-coverage-worker"}
        assert document["ecs.version"] == ecs_logging.ECS_VERSION
        assert {"timestamp", "level", "severity_text", "logger"}.isdisjoint(document)


def test_ecs_adds_trace_id_only_when_known(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
) -> None:
    """trace.id appears on the line whose message had a trace_id, and on no other."""
    lines = emitted("ecs")

    assert [line.get("trace", {}).get("id") for line in lines] == [TRACE_ID, None, None, None]
    assert lines[0]["trace_id"] == TRACE_ID


def test_the_events_own_keys_win() -> None:
    """A key the caller logs (here OTel's service.name) is never overwritten by schema fields."""
    stream = io.StringIO()
    configure_logging(stream=stream, schema="otel")
    get_logger().info("evidence_coverage.debug", **{"service.name": "kept as logged"})

    (line,) = lines_of(stream)
    assert (line["service.name"], line["event"]) == ("kept as logged", "evidence_coverage.debug")


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
    """Celery's and kombu's stdlib records get the OTel fields too."""
    stream = io.StringIO()
    configure_stdlib_logging(stream=stream, schema="otel")
    logging.getLogger("kombu.connection").error("broker connection lost")

    (line,) = lines_of(stream)
    assert (line["severity_text"], line["severity_number"], line["level"]) == (
        "ERROR",
        17,
        "error",
    )
    assert (line["event"], line["service.name"], line["logger"]) == (
        "broker connection lost",
        "evidence-coverage-worker",
        "kombu.connection",
    )


def log_a_lost_broker_connection(schema: LogSchema) -> io.StringIO:
    """kombu's ERROR line with the exception it carries, as configure_stdlib_logging writes it."""
    stream = io.StringIO()
    configure_stdlib_logging(stream=stream, schema=schema)
    try:
        raise ConnectionResetError("connection reset by peer")
    except ConnectionResetError:
        logging.getLogger("kombu.connection").error("broker connection lost", exc_info=True)
    return stream


@pytest.mark.usefixtures("restore_root_logger")
def test_a_stdlib_error_is_an_ecs_document_with_its_logger_and_error_fields() -> None:
    """In ECS, Celery's logger is log.logger and an exception is error.type, error.message and
    error.stack_trace (ECS's names for OTel's exception.*)."""
    stream = log_a_lost_broker_connection("ecs")

    (document,) = lines_of(stream)
    assert (document["log.level"], document["message"], document["log"]) == (
        "error",
        "broker connection lost",
        {"logger": "kombu.connection"},
    )
    error = document["error"]
    assert (error["type"], error["message"]) == ("ConnectionResetError", "connection reset by peer")
    assert error["stack_trace"].startswith("Traceback (most recent call last):\n")
    assert not any(key.startswith("exception") for key in document)
    assert ecs_conflicts(document) == []


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


def test_every_field_of_every_ecs_document_has_its_ecs_type(
    emitted: Callable[[LogSchema], list[dict[str, Any]]], capfd: pytest.CaptureFixture[str]
) -> None:
    """Records, alerts and a signal handler's notice index into ECS's mappings unmapped: every
    ECS field we emit has ECS's type, and nothing of ours sits where ECS has a field."""
    documents = emitted("ecs")
    write_line("worker: Warm shutdown (MainProcess)", logger="celery.apps.worker")
    documents.append(json.loads(capfd.readouterr().out))

    assert {path for document in documents for path, _ in leaves(document)} >= {
        "@timestamp",
        "log.level",
        "log.logger",
        "message",
        "event.action",
        "event.dataset",
        "service.name",
        "trace.id",
        "ecs.version",
    }
    for document in documents:
        assert ecs_conflicts(document) == [], document["message"]


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (
            {"event": "evidence_coverage.scored"},
            "event: ECS maps it as an object, the line has 'evidence_coverage.scored'",
        ),
        ({"log": {"level": 9}}, "log.level: ECS maps it as keyword, the line has 9"),
        ({"trace": {"id": {"x": "y"}}}, "trace.id.x: under an ECS field that is not an object"),
        ({"event": {"verdict": "pass"}}, "event.verdict: not an ECS field, inside ECS's field set"),
        ({"@timestamp": "yesterday"}, None),
    ],
)
def test_the_ecs_check_catches_what_elasticsearch_would_refuse(
    document: dict[str, Any], problem: str | None
) -> None:
    """The checker itself: the old flat `event` string and the other conflicts are caught."""
    if problem is None:
        with pytest.raises(ValueError, match="Invalid isoformat"):
            ecs_conflicts(document)
    else:
        assert ecs_conflicts(document) == [problem]


@pytest.mark.usefixtures("restore_root_logger")
def test_ecs_documents_are_what_ecs_logging_writes_field_for_field(
    emitted: Callable[[LogSchema], list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """EcsRenderer is Elastic's ecs-logging formatter, faster: for records, alerts, a stdlib
    error with its traceback and a signal handler's notice, both write the same document."""
    seen: list[tuple[str, dict[str, Any]]] = []
    render = EcsRenderer.__call__

    def recording(self: EcsRenderer, logger: Any, method: str, event: Any) -> str:
        seen.append((method, dict(event)))
        return render(self, logger, method, event)

    monkeypatch.setattr(EcsRenderer, "__call__", recording)
    emitted("ecs")
    log_a_lost_broker_connection("ecs")
    write_line("worker: Warm shutdown (MainProcess)", logger="celery.apps.worker")
    capfd.readouterr()

    assert len(seen) == 6
    for method, event in seen:
        ours = json.loads(render(EcsRenderer(), None, method, dict(event)))
        theirs = ecs_logging.StructlogFormatter()(None, method, ecs_fields(method, dict(event)))
        assert ours == json.loads(theirs), event["event"]
        assert list(ours)[:3] == list(json.loads(theirs))[:3]
