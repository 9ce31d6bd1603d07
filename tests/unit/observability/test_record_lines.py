"""worker.observability.logging.RecordLines: a batch's record lines, each the very line the
chain writes for emit_record(), written as whole-line chunks of at most PIPE_BUF bytes."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from contracts.records import REJECTED, ScoreRecord
from contracts.triage import Finding
from tests.unit.observability.test_logging import score_record
from worker.observability.logging import (
    PIPE_BUF,
    RAW_TEXT_FIELDS,
    RecordLines,
    configure_logging,
    emit_record,
)

STAMP = re.compile(r'^(\{"timestamp": ?)"[^"]+"')
FINDING = Finding(
    claim_id="refund-method",
    finding="not_cited",
    owner="product",
    document_ids=["doc-1"],
    evidence_retrieved=True,
)

RECORDS: dict[str, ScoreRecord] = {
    "scored": score_record(),
    "passing": score_record(value=1.0, status="pass", owner=None, threshold=0.5),
    "conflict": score_record(cache="conflict", observed_value=0.5, observed_reason="other"),
    "findings": score_record(
        findings=[FINDING, FINDING],
        missing_claim_ids=["refund-method"],
        produced_at=datetime(2026, 12, 1, 8, 0, tzinfo=UTC),
        recorded_at=datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC),
        trace_id="0af7651916cd43dd8448eb211c80319c",
        warnings=["trace_id is not 32 hex digits"],
        line=7,
    ),
    "rejected": score_record(
        event=REJECTED,
        input_hash=None,
        contract_version=None,
        value=None,
        reason="schema: case_id is required",
        status="invalid",
        owner="evaluation-data",
        cache=None,
    ),
    "non-ascii": score_record(case_id="reembolso-ñ-001 ✓", reason="falta «método»"),
    "lone surrogate": score_record(case_id="case-\udc80"),
}
CONTEXTS: dict[str, dict[str, Any]] = {
    "none": {},
    "duration": {"duration_ms": 1.25},
    "raw text named": {"duration_ms": 0.5, "answer": "secret", "contexts": ["secret"]},
    "redacted text": {"answer_redacted": "[EMAIL] asked", "contexts_redacted": []},
    "a record field": {"task_id": "task-from-context"},
}


@pytest.fixture(autouse=True)
def _clean_contextvars() -> Iterator[None]:
    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


def chain_line(record: ScoreRecord, context: dict[str, Any]) -> str:
    """The line the configured chain writes for the record (emit_record), timestamp blanked."""
    stream = io.StringIO()
    configure_logging(stream=stream)
    emit_record(record, **context)
    return STAMP.sub(r'\1""', stream.getvalue())


def batch_lines(pairs: list[tuple[ScoreRecord, dict[str, Any]]]) -> str:
    stream = io.StringIO()
    configure_logging(stream=stream)
    lines = RecordLines()
    for record, context in pairs:
        lines.add(record, **context)
    lines.flush()
    return "".join(STAMP.sub(r'\1""', line) for line in stream.getvalue().splitlines(True))


@pytest.mark.parametrize("context", CONTEXTS.values(), ids=list(CONTEXTS))
@pytest.mark.parametrize("record", RECORDS.values(), ids=list(RECORDS))
def test_each_line_is_the_chains_line(record: ScoreRecord, context: dict[str, Any]) -> None:
    """Same keys, same order, same values, same spelling as emit_record() through the chain,
    with the task's context variables bound as the worker binds them."""
    structlog.contextvars.bind_contextvars(
        task_id="task-9", task_name="evidence_coverage.score_batch", retries=0, redelivered=False
    )
    expected = chain_line(record, context)

    assert batch_lines([(record, context)]) == expected


def test_a_batch_is_its_lines_in_order() -> None:
    """Every record of a batch, in order, each line as the chain writes it."""
    pairs = [(record, {"duration_ms": 2.0}) for record in RECORDS.values()] * 3
    expected = "".join(chain_line(record, context) for record, context in pairs)

    assert batch_lines(pairs) == expected


def test_the_records_own_fields_carry_no_raw_text_name() -> None:
    """RecordLines redacts raw-text names in the context only: a record field of such a name
    would be written unredacted."""
    assert RAW_TEXT_FIELDS.isdisjoint(ScoreRecord.model_fields)


def test_the_lines_of_a_batch_share_one_timestamp() -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    before = datetime.now(UTC)
    lines = RecordLines()
    for _ in range(3):
        lines.add(score_record())
    lines.flush()
    after = datetime.now(UTC)

    stamps = {json.loads(line)["timestamp"] for line in stream.getvalue().splitlines()}
    assert len(stamps) == 1
    stamp = datetime.fromisoformat(stamps.pop().replace("Z", "+00:00"))
    assert before <= stamp <= after


class Writes(io.StringIO):
    """A stream that keeps what each flush wrote: one write() to the file descriptor each."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []
        self._since = 0

    def flush(self) -> None:
        value = self.getvalue()
        if len(value) > self._since:
            self.flushed.append(value[self._since :])
            self._since = len(value)


def test_lines_go_out_in_whole_line_chunks_of_at_most_pipe_buf_bytes() -> None:
    """A prefork child's write of at most PIPE_BUF bytes is never interleaved with another's:
    each write holds whole lines, at most PIPE_BUF bytes unless it is one longer line."""
    stream = Writes()
    configure_logging(stream=stream)
    lines = RecordLines()
    records = [score_record(case_id=f"case-{n}", reason="r" * (n * 37)) for n in range(120)]
    records.append(score_record(case_id="long", reason="x" * 9000))
    for record in records:
        lines.add(record)
    lines.flush()

    written = [json.loads(line)["case_id"] for line in stream.getvalue().splitlines()]
    assert written == [record.case_id for record in records]
    assert 1 < len(stream.flushed) < len(records)
    for chunk in stream.flushed:
        assert chunk.endswith("\n")
        if chunk.count("\n") > 1:
            assert len(chunk.encode()) <= PIPE_BUF
    assert stream.flushed[-1].count("\n") == 1  # the 9,000-character line goes alone
    assert len(stream.flushed[-1].encode()) > PIPE_BUF


def test_nothing_is_written_before_flush() -> None:
    stream = Writes()
    configure_logging(stream=stream)
    lines = RecordLines()
    lines.add(score_record())

    assert stream.getvalue() == ""
    lines.flush()
    assert stream.getvalue().count("\n") == 1


@pytest.mark.parametrize(
    "configure",
    [
        pytest.param(lambda s: configure_logging(stream=s, schema="ecs"), id="ecs"),
        pytest.param(lambda s: configure_logging("console", stream=s), id="console"),
        pytest.param(lambda s: configure_logging(stream=s, span_ids=True), id="span ids"),
    ],
)
def test_other_configurations_take_the_chain(configure: Any) -> None:
    """ECS, the console and span IDs: each line is emit_record()'s, written at once."""
    expected = io.StringIO()
    configure(expected)
    emit_record(score_record(), duration_ms=1.0)

    stream = io.StringIO()
    configure(stream)
    lines = RecordLines()
    lines.add(score_record(), duration_ms=1.0)
    written_at_once = stream.getvalue()
    lines.flush()

    stamp = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|\+00:00)?")
    assert stamp.sub("T", written_at_once) == stamp.sub("T", expected.getvalue())
    assert stream.getvalue() == written_at_once


def test_a_context_field_named_as_a_head_key_takes_the_chain() -> None:
    """The chain gives `severity_text` in the context the head's place with the context's
    value: that line is the chain's, after the lines before it."""
    stream = io.StringIO()
    configure_logging(stream=stream)
    lines = RecordLines()
    lines.add(score_record(case_id="before"))
    lines.add(score_record(case_id="odd"), severity_text="NOTICE")
    lines.add(score_record(case_id="after"))
    lines.flush()

    written = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["case_id"] for line in written] == ["before", "odd", "after"]
    assert [line["severity_text"] for line in written] == ["INFO", "NOTICE", "INFO"]


def test_capture_logs_sees_each_record() -> None:
    """A test's capture_logs replaces the chain: RecordLines hands each record to it."""
    configure_logging(stream=io.StringIO())
    with capture_logs() as captured:
        lines = RecordLines()
        lines.add(score_record(case_id="one"))
        lines.add(score_record(case_id="two", cache="conflict"))
        lines.flush()

    assert [(entry["case_id"], entry["log_level"]) for entry in captured] == [
        ("one", "info"),
        ("two", "warning"),
    ]


def test_a_records_alert_lines_follow_its_own_line() -> None:
    """Service: the lines of a batch with a conflict and a rejection come in message order,
    each alert right after its record's line."""
    import fakeredis

    from contracts import AttributionResult
    from worker.pipeline.alerts import AlertSink
    from worker.pipeline.scoring import Delivery
    from worker.pipeline.service import Service
    from worker.settings import Settings
    from worker.stores.redis import RedisStore

    stream = io.StringIO()
    configure_logging(stream=stream)
    store = RedisStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="lines")
    service = Service(settings=Settings(), policy=None, store=store, alerts=AlertSink())

    def body(case_id: str, supported: list[str], answer: str = "The answer.") -> str:
        return AttributionResult.model_validate(
            {
                "schema_version": 1,
                "case_id": case_id,
                "contract_version": "support-faq/2026-10",
                "required_claim_ids": ["a", "b"],
                "supported_claim_ids": supported,
                "answer": answer,
                "contexts": [{"document_id": "doc-1", "text": "passage"}],
                "grader": {"name": "g", "version": "1", "model": "m", "prompt": "p", "params": {}},
            }
        ).model_dump_json()

    bodies = [
        body("one", ["a"]),
        body("two", ["a", "b"]),
        '{"case_id": "bad"}',
        body("three", ["b"], "Another."),
    ]
    service.handle([(text, Delivery(task_id="task-1")) for text in bodies])
    service.close()

    events = [
        (line["event"], line.get("case_id"))
        for line in map(json.loads, stream.getvalue().splitlines())
    ]
    assert events == [
        ("evidence_coverage.scored", "one"),
        ("evidence_coverage.scored", "two"),
        ("evidence_coverage.nondeterminism", None),
        ("evidence_coverage.rejected", "bad"),
        ("evidence_coverage.scored", "three"),
    ]
