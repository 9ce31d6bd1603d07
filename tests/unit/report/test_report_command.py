"""`evidence-worker report` as a command: the table, the JSON object, stdin, and the one-line
errors for what it cannot read or write."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, Run
from tests.unit.report.factories import FAQ, PAYMENTS, alert, invalid, record, rejected
from worker.cli import main


@pytest.fixture
def records_file(write_jsonl: Callable[..., Path]) -> Path:
    """A small record file: two versions, an invalid row, a rejection, an alert, noise."""
    return write_jsonl(
        [
            record(value=1.0),
            record(
                value=0.5, status="fail", owner="product", input_hash="c" * 64, cache="conflict"
            ),
            alert("c" * 64),
            invalid("required_claim_ids must not be empty"),
            record(
                contract_version=PAYMENTS,
                policy_group="disclosure",
                value=0.5,
                status="fail",
                owner="product",
            ),
            rejected(),
            {"level": "info", "event": "Connected to redis://localhost:6379/0"},
            "{broken",
        ],
        name="records.jsonl",
    )


def test_cli_prints_a_table_per_contract_version(
    report_cli: Callable[..., Run], records_file: Path
) -> None:
    """By default the report is a table on stdout, one per version, exit 0."""
    run = report_cli(records_file)

    assert run.code == 0, run.err
    assert run.err == ""
    out = run.out.splitlines()
    assert out[0] == (
        f"report: {records_file}: records 5; skipped lines 1 "
        "(evidence_coverage.nondeterminism 1); Celery log lines 1; "
        "unreadable lines 1; nondeterminism alerts 1; contract drift alerts 0"
    )
    assert out[1] == (
        "unreadable line 8: invalid JSON: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    alerts = "nondeterminism alerts {}; contract drift alerts 0"
    faq_line = f"contract version {FAQ}: records 3; " + alerts.format(1)
    assert faq_line in out
    assert f"contract version {PAYMENTS}: records 1; " + alerts.format(0) in out
    assert "contract version (rejected before scoring): records 1; " + alerts.format(0) in out
    faq_row = out[out.index(faq_line) + 2]
    assert faq_row.split() == [
        "default",
        "3",
        "1",
        "1",
        "0",
        "1",
        "2",
        "0.7500",
        "0.5000",
        "1.0000",
        "2",
        "0",
        "1",
        "2026-12-01",
    ]
    assert "  default: invalid x1: required_claim_ids must not be empty" in out


def test_cli_json_prints_one_object_of_exact_structure(
    report_cli: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """`--json` prints one JSON object with the report's exact structure."""
    path = write_jsonl([record(value=0.5, status="fail", owner="product"), invalid(), rejected()])

    run = report_cli(path, "--json")

    assert run.code == 0
    assert len(run.out.splitlines()) == 1
    faq_default = {
        "contract_version": FAQ,
        "policy_group": "default",
        "records": 2,
        "statuses": {"pass": 0, "fail": 1, "invalid": 1, "scored": 0},
        "cache": {"miss": 2, "hit": 0, "conflict": 0},
        "valid": {"count": 1, "mean": 0.5, "min": 0.5, "max": 0.5},
        "invalid": {
            "count": 1,
            "top_reasons": [
                {
                    "reason": "required_claim_ids must not be empty",
                    "count": 1,
                    "distinct": 1,
                    "examples": [],
                }
            ],
        },
        "owners": {
            "attribution": 0,
            "retrieval": 0,
            "product": 1,
            "evaluation-data": 1,
            "release-rule": 0,
        },
        "no_owner": 0,
        "missing_claims": [],
        "rows_without_triage": 0,
        "max_required_claims": 3,
        "sparse_coverage": False,
        "thresholds": [0.85],
        "policy_versions": [{"policy_version": "2026-12-01", "count": 2}],
        "mixed_policy_versions": False,
        "nondeterminism_conflicts": 0,
        "nondeterminism_alerts": 0,
        "contract_drift_alerts": 0,
    }
    rejected_group = {
        "contract_version": None,
        "policy_group": None,
        "records": 1,
        "statuses": {"pass": 0, "fail": 0, "invalid": 1, "scored": 0},
        "cache": {"miss": 0, "hit": 0, "conflict": 0},
        "valid": {"count": 0, "mean": None, "min": None, "max": None},
        "invalid": {
            "count": 1,
            "top_reasons": [
                {
                    "reason": "schema: answer: Field required",
                    "count": 1,
                    "distinct": 1,
                    "examples": [],
                }
            ],
        },
        "owners": {
            "attribution": 0,
            "retrieval": 0,
            "product": 0,
            "evaluation-data": 1,
            "release-rule": 0,
        },
        "no_owner": 0,
        "missing_claims": [],
        "rows_without_triage": 0,
        "max_required_claims": None,
        "sparse_coverage": False,
        "thresholds": [],
        "policy_versions": [{"policy_version": "2026-12-01", "count": 1}],
        "mixed_policy_versions": False,
        "nondeterminism_conflicts": 0,
        "nondeterminism_alerts": 0,
        "contract_drift_alerts": 0,
    }
    assert json.loads(run.out) == {
        "source": str(path),
        "store": None,  # a file's report; report --store names its store
        "records": 3,
        "skipped": {},
        "log_lines": 0,
        "unreadable": 0,
        "unreadable_lines": [],
        "nondeterminism_alerts": 0,
        "unmatched_nondeterminism_alerts": 0,
        "contract_drift_alerts": 0,
        "unmatched_contract_drift_alerts": 0,
        "contract_versions": [
            {
                "contract_version": FAQ,
                "label": FAQ,
                "records": 2,
                "histogram": [0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
                "nondeterminism_alerts": 0,
                "contract_drift_alerts": 0,
                "groups": [faq_default],
                "days": [],
                "undated": 2,
            },
            {
                "contract_version": None,
                "label": "(rejected before scoring)",
                "records": 1,
                "histogram": [0] * 10,
                "nondeterminism_alerts": 0,
                "contract_drift_alerts": 0,
                "groups": [rejected_group],
                "days": [],
                "undated": 1,
            },
        ],
        "alert_hashes": [],
        "alert_hashes_not_shown": 0,
        # Records written before records carried times: on no day, never on a guessed one.
        "span": {
            "field": "recorded_at",
            "first_day": None,
            "last_day": None,
            "days": 0,
            "undated": 3,
        },
        # These records name no grader (written before they did): no Graders section.
        "graders": [],
    }


def test_cli_reads_stdin_for_dash(
    report_cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report -` reads records from stdin and names it so."""
    body = (json.dumps(record()) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))

    run = report_cli("-", "--json")

    assert run.code == 0
    assert json.loads(run.out)["source"] == "stdin"


def test_cli_missing_path_exits_2_with_one_line(
    report_cli: Callable[..., Run], tmp_path: Path
) -> None:
    """An unreadable path is a user error: one line on stderr, exit 2, nothing on stdout."""
    run = report_cli(tmp_path / "missing.jsonl")

    assert (run.code, run.out) == (2, "")
    assert (
        run.err
        == f"evidence-worker: cannot read {tmp_path / 'missing.jsonl'}: No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        pytest.param([], "(0 other lines, 0 unreadable)", id="empty"),
        pytest.param(
            [{"event": "worker ready"}, alert("a" * 64)],
            "(2 other lines, 0 unreadable)",
            id="only-other-lines",
        ),
        pytest.param(
            ["{broken", "plain text"], "(0 other lines, 2 unreadable)", id="only-unreadable"
        ),
    ],
)
def test_cli_file_without_records_exits_2(
    report_cli: Callable[..., Run], write_jsonl: Callable[..., Path], rows: list[Any], message: str
) -> None:
    """A file holding no record is a user error: one clear line, exit 2."""
    path = write_jsonl(rows)

    run = report_cli(path)

    assert (run.code, run.out) == (2, "")
    assert run.err == f"evidence-worker: {path} contains no evidence_coverage records {message}\n"


def test_cli_unwritable_html_path_exits_2(
    report_cli: Callable[..., Run], records_file: Path, tmp_path: Path
) -> None:
    """An HTML output path that cannot be written is a user error, exit 2."""
    out = tmp_path / "no-such-dir" / "report.html"

    run = report_cli(records_file, "--html", out)

    assert run.code == 2
    assert run.err == f"evidence-worker: cannot write {out}: No such file or directory\n"


def test_cli_reports_the_example_run(
    report_cli: Callable[..., Run], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The records of `score` on the example file report the hand-computed means and alert."""
    main(
        [
            "score",
            str(EXAMPLES / "attribution-results.jsonl"),
            "--store",
            f"sqlite:///{tmp_path}/s.sqlite3",
            "--policy",
            str(EXAMPLES / "policy.toml"),
        ]
    )
    records = tmp_path / "records.jsonl"
    records.write_text(capsys.readouterr().out)

    report = json.loads(report_cli(records, "--json").out)

    payments, faq, rejected_bucket = report["contract_versions"]
    assert payments["contract_version"] == PAYMENTS
    assert faq["contract_version"] == FAQ
    assert faq["nondeterminism_alerts"] == 1
    assert faq["groups"][0]["valid"] == {"count": 4, "mean": 0.75, "min": 2 / 3, "max": 1.0}
    assert faq["groups"][0]["invalid"]["count"] == 2
    assert [g["valid"]["mean"] for g in payments["groups"]] == [0.25, 0.75]
    assert rejected_bucket["records"] == 1
