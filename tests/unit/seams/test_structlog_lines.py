"""worker/observability/structlog_lines.py against structlog: every record shape under every
context shape (keyword context and bound context variables), rendered by structlog's
configured chain (emit_record through configure_logging's processors and WriteLogger) and
by RecordLines, with the clock frozen, must be the same bytes."""

from __future__ import annotations

import io
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timezone
from typing import Any

import pytest
import structlog

from contracts.record_models import REJECTED, ScoreRecord
from contracts.triage import Finding
from tests.unit.observability.test_logging import score_record
from worker.observability import logging as worker_logging
from worker.observability import structlog_lines
from worker.observability.logging import configure_logging, emit_record
from worker.observability.structlog_lines import RecordLines

CHECKED_AGAINST = structlog_lines.CHECKED_AGAINST

NOW = datetime(2026, 12, 7, 9, 30, 15, 123456, tzinfo=UTC)
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
    "graded": score_record(grader_name="g", grader_version="1", grader_model="m", value=0.0),
    "conflict": score_record(cache="conflict", observed_value=0.5, observed_reason="other"),
    "drift": score_record(contract_drift=True, missing_claim_ids=[], duration_ms=0.125),
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
        policy_group=None,
        policy_version=None,
        threshold=None,
        blocking=None,
    ),
    "non-ascii": score_record(case_id="reembolso-ñ-001 ✓ 😀", reason='falta «método» "q" \\'),
    "lone surrogate": score_record(case_id="case-\udc80"),
    "huge line number": score_record(line=2**70),
    "control characters": score_record(reason="line\nbreak\ttab\x00nul"),
}

# Keyword context, as the service passes it to emit_record / RecordLines.add.
CONTEXTS: dict[str, dict[str, Any]] = {
    "none": {},
    "duration": {"duration_ms": 1.25},
    "raw text named": {"duration_ms": 0.5, "answer": "secret", "contexts": ["secret"]},
    "redacted text": {"answer_redacted": "[EMAIL] asked", "contexts_redacted": []},
    "a record field": {"task_id": "task-from-context", "value": None},
    "exc_info": {"exc_info": True},
    "not JSON": {"when": datetime(2026, 1, 1, tzinfo=UTC), "ids": {3, 4}},
    "huge int": {"count": 2**64},
    "lone surrogate": {"note": "x\ud800"},
    "int keys": {"counts": {1: "one"}},
    "nan": {"ratio": float("nan"), "limit": float("inf")},
    "nested": {"grader": {"params": {"temperature": 0.1, "stop": ["a", None, True]}}},
    "a head key": {"severity_text": "NOTICE"},
}

# Context variables bound before the batch (bind_contextvars), as tasks bind them.
BOUND: dict[str, dict[str, Any]] = {
    "none": {},
    "task": {
        "task_id": "task-9",
        "task_name": "evidence_coverage.score_batch",
        "retries": 0,
        "redelivered": False,
    },
    "raw text named": {"body": "secret", "task_id": "task-9"},
    "a record field": {"case_id": "from-contextvars", "duration_ms": 9.0},
    "not JSON": {"since": datetime(2026, 1, 1, tzinfo=UTC)},
    "a head key": {"level": "debug"},
    "exc_info": {"exc_info": True},
}

# The shapes that take the chain per line: the fast path's spelling would differ.
TAKE_THE_CHAIN = {"a head key", "exc_info"}


class Frozen(datetime):
    """datetime with now() at a set instant."""

    instant = NOW

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return cls.instant if tz is None else cls.instant.astimezone(tz)


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Frozen]]:
    """One clock for structlog's TimeStamper and for RecordLines."""
    stamper_module = types.SimpleNamespace(datetime=Frozen, timezone=timezone)
    monkeypatch.setattr(structlog.processors, "datetime", stamper_module)
    monkeypatch.setattr(structlog_lines, "datetime", Frozen)
    structlog.contextvars.clear_contextvars()
    yield Frozen
    structlog.contextvars.clear_contextvars()
    Frozen.instant = NOW


@pytest.fixture
def chain_taken(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The case IDs of the records RecordLines handed to emit_record (the chain)."""
    taken: list[str | None] = []

    def counted(record: ScoreRecord, **context: Any) -> None:
        taken.append(record.case_id)
        emit_record(record, **context)

    monkeypatch.setattr(structlog_lines, "emit_record", counted)
    return taken


def chain_lines(pairs: list[tuple[ScoreRecord, dict[str, Any]]]) -> str:
    """What structlog's configured chain writes: emit_record() for each record."""
    stream = io.StringIO()
    configure_logging(stream=stream)
    for record, context in pairs:
        emit_record(record, **context)
    return stream.getvalue()


def fast_lines(pairs: list[tuple[ScoreRecord, dict[str, Any]]]) -> str:
    """What RecordLines writes for the same records, in the same configuration."""
    stream = io.StringIO()
    configure_logging(stream=stream)
    lines = RecordLines()
    for record, context in pairs:
        lines.add(record, **context)
    lines.flush()
    return stream.getvalue()


@pytest.mark.parametrize("bound", list(BOUND))
@pytest.mark.parametrize("context", list(CONTEXTS))
@pytest.mark.parametrize("record", list(RECORDS))
def test_each_line_is_the_chain_s_line(
    record: str, context: str, bound: str, chain_taken: list[str | None]
) -> None:
    """The same bytes as emit_record() through structlog's chain, and the fast path taken
    unless a field is named as a head key or exc_info."""
    structlog.contextvars.bind_contextvars(**BOUND[bound])
    pairs = [(RECORDS[record], CONTEXTS[context])]
    expected = chain_lines(pairs)

    assert fast_lines(pairs) == expected
    takes_chain = context in TAKE_THE_CHAIN or bound in TAKE_THE_CHAIN
    assert chain_taken == ([RECORDS[record].case_id] if takes_chain else [])


@pytest.mark.parametrize("bound", list(BOUND))
@pytest.mark.parametrize("context", list(CONTEXTS))
def test_a_batch_is_the_chain_s_lines_in_order(
    context: str, bound: str, chain_taken: list[str | None]
) -> None:
    """Every record shape in one batch, twice over: the chain's lines, in order."""
    structlog.contextvars.bind_contextvars(**BOUND[bound])
    pairs = [(record, CONTEXTS[context]) for record in RECORDS.values()] * 2

    assert fast_lines(pairs) == chain_lines(pairs)


@pytest.mark.parametrize(
    "instant",
    [NOW, NOW.replace(microsecond=0), datetime(2026, 2, 28, 23, 59, 59, 999999, tzinfo=UTC)],
    ids=["microseconds", "whole second", "end of day"],
)
def test_the_timestamp_is_spelled_as_the_time_stamper_spells_it(
    instant: datetime, frozen: type[Frozen]
) -> None:
    """TimeStamper(fmt="iso", utc=True)'s text for the same instant, with or without
    microseconds."""
    frozen.instant = instant
    pairs: list[tuple[ScoreRecord, dict[str, Any]]] = [
        (RECORDS["scored"], {}),
        (RECORDS["conflict"], {}),
    ]

    assert fast_lines(pairs) == chain_lines(pairs)


def test_the_chain_spelled_is_the_one_configure_logging_builds() -> None:
    """The fast path stands in for exactly these processors, in this order: a change to the
    chain (a processor added, moved or replaced) must come with a change to RecordLines."""
    configure_logging(stream=io.StringIO())
    chain = worker_logging.record_chain()

    assert chain is not None
    assert tuple(structlog.get_config()["processors"]) == chain
    assert [getattr(step, "__name__", type(step).__name__) for step in chain] == [
        "merge_contextvars",
        "add_log_level",
        "TimeStamper",
        "drop_raw_text",
        "OtelFields",
        "lead_with_when_and_what",
        "exception_fields",
        "JSONRenderer",
    ]


def render_both(configure: Callable[[io.StringIO], None]) -> tuple[str, str]:
    chain, fast = io.StringIO(), io.StringIO()
    configure(chain)
    emit_record(RECORDS["scored"], duration_ms=1.0)
    configure(fast)
    lines = RecordLines()
    lines.add(RECORDS["scored"], duration_ms=1.0)
    lines.flush()
    return chain.getvalue(), fast.getvalue()


@pytest.mark.parametrize(
    "configure",
    [
        pytest.param(lambda s: configure_logging(stream=s, schema="ecs"), id="ecs"),
        pytest.param(lambda s: configure_logging("console", stream=s), id="console"),
        pytest.param(lambda s: configure_logging(stream=s, span_ids=True), id="span ids"),
    ],
)
def test_other_configurations_are_the_chain_s_lines(
    configure: Callable[[io.StringIO], None], chain_taken: list[str | None]
) -> None:
    """ECS, the console and span IDs: RecordLines hands the record to the chain."""
    chain, fast = render_both(configure)

    assert fast == chain
    assert chain_taken == [RECORDS["scored"].case_id]
