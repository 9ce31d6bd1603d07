"""worker.observability.structlog_lines.RecordLines: a batch's record lines written as
whole-line chunks of at most PIPE_BUF bytes (that each line is the chain's, byte for byte:
tests/unit/seams/test_structlog_lines.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import structlog
from structlog.testing import capture_logs

from contracts.record_models import ScoreRecord
from tests.unit.observability.test_logging import score_record
from worker.observability.logging import RAW_TEXT_FIELDS, configure_logging
from worker.observability.structlog_lines import PIPE_BUF, RecordLines


@pytest.fixture(autouse=True)
def _clean_contextvars() -> Iterator[None]:
    structlog.contextvars.clear_contextvars()
    yield
    structlog.contextvars.clear_contextvars()


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
    from worker.pipeline.alert_delivery import AlertSink
    from worker.pipeline.scoring import Delivery
    from worker.pipeline.service import Service
    from worker.settings import Settings
    from worker.stores.redis.redis_store import RedisStore

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
