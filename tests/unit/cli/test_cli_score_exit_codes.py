"""`evidence-worker score`'s policy modes (report-only, threshold, policy file) and the exit
code each outcome gives, from stdin as from a file."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CITED_SUPPORTED, Run
from tests.unit.cli.factories import EXAMPLE_POLICY, TWO_THIRDS


def test_report_only_without_policy(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """With no policy, valid rows are `scored` with no threshold, no policy version, exit 0."""
    path = write_jsonl([message_dict(), message_dict(case_id="refund-009", answer="Other.")])
    run = score(path)

    assert run.code == 0
    assert [
        (r["status"], r["value"], r["threshold"], r["policy_version"], r["owner"])
        for r in run.records
    ] == [("scored", TWO_THIRDS, None, None, None)] * 2
    assert run.summary == ("score: 2 rows: scored 2; cache miss 2; report-only (no policy); exit 0")


def test_min_evidence_coverage_env_defines_the_policy(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MIN_EVIDENCE_COVERAGE=0.5 gives policy version env:0.5 and threshold 0.5."""
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", "0.5")
    run = score(write_jsonl([message_dict()]))

    record = run.records[0]
    assert (record["status"], record["policy_version"], record["threshold"]) == (
        "pass",
        "env:0.5",
        0.5,
    )
    assert run.code == 0


def test_policy_file_env_defines_the_policy(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EVIDENCE_POLICY_FILE is used when no option names a policy."""
    monkeypatch.setenv("EVIDENCE_POLICY_FILE", str(EXAMPLE_POLICY))
    run = score(write_jsonl([message_dict()]))

    record = run.records[0]
    assert (record["status"], record["policy_version"], record["threshold"]) == (
        "fail",
        "2026-12-01",
        0.85,
    )


def test_min_coverage_option_overrides_environment(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--min-coverage wins over MIN_EVIDENCE_COVERAGE."""
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", "0.5")
    record = score(write_jsonl([message_dict()]), "--min-coverage", "0.9").records[0]

    assert (record["status"], record["threshold"], record["policy_version"]) == (
        "fail",
        0.9,
        "cli:0.9",
    )


def test_blocking_failure_exits_1(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A valid blocking row below policy exits 1 and is routed to its owner: product, when the
    supported claims are cited and the missing one is not (SPEC §9's not_cited)."""
    cited = message_dict(citations=CITED_SUPPORTED)
    run = score(write_jsonl([cited, message_dict(case_id="no-citations")]), "--min-coverage", "0.9")

    assert run.code == 1
    assert [
        (r["status"], r["owner"], [f["finding"] for f in r["findings"]]) for r in run.records
    ] == [
        ("fail", "product", ["not_cited"]),
        ("fail", "attribution", ["attribution_artifact_missing"]),
    ]


def test_non_blocking_failure_does_not_change_exit_code(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A non-blocking row below policy is reported as fail but exits 0."""
    run = score(write_jsonl([message_dict(blocking=False)]), "--min-coverage", "0.9")

    assert run.code == 0
    assert [(r["status"], r["blocking"]) for r in run.records] == [("fail", False)]


def test_non_blocking_invalid_row_does_not_change_exit_code(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A non-blocking metric-invalid row is reported as invalid but exits 0."""
    row = message_dict(blocking=False, supported_claim_ids=["old-c1"])
    run = score(write_jsonl([row]), "--min-coverage", "0.5")

    assert run.code == 0
    assert [(r["status"], r["blocking"]) for r in run.records] == [("invalid", False)]


def test_invalid_row_without_alert_exits_2(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """One rejected row among valid passing rows exits 2."""
    path = write_jsonl([message_dict(), message_dict(case_id="refund-002", extra=1)])
    run = score(path, "--min-coverage", "0.5")

    assert run.code == 2
    assert [r["status"] for r in run.records] == ["pass", "invalid"]
    assert run.alerts == []


def test_invalid_outranks_failure(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A blocking fail and a metric-invalid row together exit 2, not 1."""
    path = write_jsonl(
        [
            message_dict(),
            message_dict(case_id="refund-002", answer="Other.", supported_claim_ids=["old-c1"]),
        ]
    )
    run = score(path, "--min-coverage", "0.9")

    assert run.code == 2
    assert [r["status"] for r in run.records] == ["fail", "invalid"]


def test_stdin_dash_is_read(
    cli: Callable[..., Run],
    store_url: str,
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`score -` reads JSON lines from stdin."""
    body = (json.dumps(message_dict()) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    run = cli("score", "-", "--store", store_url)

    assert run.code == 0
    assert [(r["line"], r["case_id"], r["status"]) for r in run.records] == [
        (1, "refund-001", "scored")
    ]


def test_empty_stdin_is_named_as_stdin(
    cli: Callable[..., Run], store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty stdin exits 2 with a message that says stdin, not '-'."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    run = cli("score", "-", "--store", store_url)

    assert run.code == 2
    assert run.err == "evidence-worker: stdin contains no messages\n"


def test_blank_lines_are_skipped_but_counted(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """Blank lines produce no record; `line` is still the physical line number."""
    run = score(write_jsonl(["", message_dict(), "   ", message_dict(case_id="refund-002")]))

    assert [(r["line"], r["case_id"]) for r in run.records] == [
        (2, "refund-001"),
        (4, "refund-002"),
    ]
