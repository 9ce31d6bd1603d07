"""What `evidence-worker score` writes per row: published shapes, no raw text, and a bad row
rejected on its own line while the run goes on."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run
from tests.unit.cli.factories import (
    EXAMPLE_FILE,
    EXAMPLE_POLICY,
    assert_published_shapes,
    example_rows,
)


def raw_texts(rows: list[dict[str, Any]]) -> set[str]:
    texts = {row["answer"] for row in rows}
    texts |= {context["text"] for row in rows for context in row["contexts"]}
    return texts | {row["grader"]["prompt"] for row in rows}


# Published shapes and privacy ------------------------------------------------------------


def test_every_stdout_line_matches_a_published_schema(score: Callable[..., Run]) -> None:
    """Every line of both example runs validates as a CoverageRecord or an AlertRecord; the
    second run meets the known conflict again and raises no second alert."""
    for lines, run in (
        (11, score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)),
        (10, score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)),
    ):
        assert len(run.lines) == lines
        assert_published_shapes(run)


def test_records_share_the_documented_field_set(score: Callable[..., Run]) -> None:
    """Every record carries the SPEC §6 fields, led by timestamp, level, event."""
    spec_fields = {
        "timestamp", "level", "event", "case_id", "input_hash", "contract_version",
        "metric_version", "ragas_version", "value", "reason", "status", "policy_group",
        "policy_version", "threshold", "blocking", "owner", "cache", "task_id",
        "duration_ms", "trace_id",
    }  # fmt: skip
    for record in score(EXAMPLE_FILE).records:
        assert spec_fields <= record.keys()
        assert list(record)[:3] == ["timestamp", "level", "event"]
        assert (record["metric_version"], record["ragas_version"]) == (
            "evidence_coverage/1",
            "0.4.3",
        )


def test_stdout_never_contains_answer_context_or_prompt_text(score: Callable[..., Run]) -> None:
    """No raw answer, context or grader prompt text from the example reaches stdout."""
    out = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY).out
    texts = raw_texts(example_rows())

    assert len(texts) == 14  # 6 answers, 7 contexts, 1 prompt
    assert [text for text in texts if text in out] == []


def test_rejected_row_reason_does_not_echo_raw_text(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A context sent with the wrong shape is rejected without quoting its text."""
    secret = "Confidential passage: card ends 4242"
    run = score(write_jsonl([message_dict(contexts=secret, answer=7)]))

    assert run.records[0]["reason"] == (
        "schema: answer: Input should be a valid string; contexts: Input should be a valid array"
    )
    assert secret not in run.out
    assert_published_shapes(run)


# Bad rows: reported per line, processing continues --------------------------------------


def _line_without(field: str, message_dict: Callable[..., dict[str, Any]]) -> str:
    row = message_dict()
    del row[field]
    return json.dumps(row)


@pytest.mark.parametrize(
    ("make_line", "reason"),
    [
        pytest.param(
            lambda m: b'{"case_id": "refund-001", ',
            "invalid JSON: EOF while parsing a value at line 1 column 26",
            id="malformed-json",
        ),
        pytest.param(
            lambda m: json.dumps(m(extra_field=1)),
            "schema: extra_field: Extra inputs are not permitted",
            id="unknown-field",
        ),
        pytest.param(
            lambda m: _line_without("grader", m),
            "schema: grader: Field required",
            id="missing-field",
        ),
        pytest.param(
            lambda m: json.dumps(m(blocking="yes")),
            "schema: blocking: Input should be a valid boolean",
            id="wrong-type",
        ),
        pytest.param(
            lambda m: b'{"case_id": "refund-\xff"}',
            "message is not valid UTF-8 (invalid start byte at byte 20)",
            id="non-utf8",
        ),
        pytest.param(
            lambda m: "[1, 2]",
            "schema: message: Input should be an object",
            id="not-an-object",
        ),
    ],
)
def test_bad_line_is_rejected_and_run_continues(
    make_line: Callable[[Callable[..., dict[str, Any]]], str | bytes],
    reason: str,
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A bad line becomes one rejected record with its line number; the next line is scored."""
    path = write_jsonl([make_line(message_dict), message_dict(case_id="refund-002")])
    run = score(path)

    assert run.code == 2
    bad, good = run.records
    assert (bad["line"], bad["event"], bad["status"], bad["owner"]) == (
        1,
        "evidence_coverage.rejected",
        "invalid",
        "evaluation-data",
    )
    assert bad["reason"] == reason
    assert (good["line"], good["case_id"], good["status"]) == (2, "refund-002", "scored")
    assert run.summary == (
        "score: 2 rows: invalid 1, scored 1; 1 rejected before scoring; cache miss 1; "
        "report-only (no policy); exit 2"
    )
    assert_published_shapes(run)


def test_malformed_json_reason_names_json(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A truncated line in the middle of a file reports its own line number as invalid JSON."""
    run = score(write_jsonl([message_dict(), "{not json", message_dict(case_id="refund-002")]))

    assert [(r["line"], r["status"]) for r in run.records] == [
        (1, "scored"),
        (2, "invalid"),
        (3, "scored"),
    ]
    assert run.records[1]["reason"].startswith("invalid JSON")
    assert run.records[1]["case_id"] is None


def test_rejected_row_keeps_its_case_id(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A schema-invalid but parseable row is still routed by its case_id."""
    record = score(write_jsonl([message_dict(case_id="refund-077", blocking="no")])).records[0]

    assert (record["case_id"], record["input_hash"], record["cache"]) == (
        "refund-077",
        None,
        None,
    )


def test_unknown_policy_group_is_invalid(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A row naming a group the policy lacks is invalid and the reason names the group."""
    run = score(write_jsonl([message_dict(policy_group="legal")]), "--policy", EXAMPLE_POLICY)

    assert run.code == 2
    record = run.records[0]
    assert (record["status"], record["value"], record["owner"], record["policy_group"]) == (
        "invalid",
        None,
        "evaluation-data",
        "legal",
    )
    assert record["reason"] == (
        "policy_group 'legal' is not defined in policy 2026-12-01 (groups: default,disclosure)"
    )
