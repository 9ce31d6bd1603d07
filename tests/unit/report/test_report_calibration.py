"""The report's Calibration section (SPEC §12): review rows per contract version and group,
and each observation window's changed decisions; absent when records carry neither."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from tests.conftest import Run
from tests.unit.report.factories import FAQ, PAYMENTS, group, lines, record, report_of
from worker.report.aggregate import build_report
from worker.report.html import render_html
from worker.report.text import render_text

REVIEW = record(
    value=0.83,
    status="review",
    reason="supported=83; required=100; missing=c",
    owner="release-rule",
    review_band=0.03,
)


def observed(status: str, previous: str, **overrides: object) -> dict[str, object]:
    """A row of an observation window: decided now (`status`) and under 2026-11-01."""
    return record(
        status=status,
        previous_policy_version="2026-11-01",
        previous_status=previous,
        **overrides,
    )


def test_without_review_or_window_there_is_no_section() -> None:
    """Records with neither: no calibration key in JSON, no section in text or HTML, and no
    review count among the statuses."""
    report = report_of(record(), record(status="fail", value=0.5, owner="product"))

    assert report.calibration is None
    assert "calibration" not in json.loads(report.model_dump_json())
    assert "review" not in group(report, FAQ, "default").statuses
    assert "calibration" not in render_text(report)
    assert "Calibration" not in render_html(report)


def test_review_rows_are_counted_per_contract_version_and_group() -> None:
    """Two review rows of FAQ/default, none of payments: the section lists the one group."""
    report = report_of(
        record(),
        REVIEW,
        REVIEW,
        record(contract_version=PAYMENTS, policy_group="disclosure"),
    )

    assert report.calibration is not None
    assert [r.model_dump() for r in report.calibration.review] == [
        {
            "contract_version": FAQ,
            "policy_group": "default",
            "review": 2,
            "records": 3,
            "review_bands": [0.03],
        }
    ]
    assert report.calibration.observation_windows == []


def test_review_is_a_status_of_its_own_and_a_valid_row() -> None:
    """statuses lists review when there is one; review rows enter the valid mean."""
    found = group(report_of(record(), REVIEW), FAQ, "default")

    assert found.statuses == {"pass": 1, "fail": 0, "invalid": 0, "scored": 0, "review": 1}
    assert (found.valid.count, found.valid.mean) == (2, (1.0 + 0.83) / 2)


def test_the_text_table_gains_a_review_column_and_the_section_its_lines() -> None:
    """The group table shows review after fail; the section says how many and the band."""
    text = render_text(report_of(record(), REVIEW))
    table = text.splitlines()[3:5]

    assert table[0].split()[:6] == ["group", "rows", "pass", "fail", "review", "scored"]
    assert table[1].split()[:6] == ["default", "2", "1", "0", "1", "0"]
    assert text.endswith(
        "\ncalibration:\n"
        f"  review: contract version {FAQ}, group default: 1 of 2 rows in review"
        " (review_band 0.03): a person decides (evidence-worker calibrate)"
    )


def test_a_window_counts_changed_decisions_by_previous_and_current_status() -> None:
    """Four rows under both rules, two changed: pass -> fail 1, pass -> review 1."""
    report = build_report(
        lines(
            observed("pass", "pass"),
            observed("pass", "pass"),
            observed("fail", "pass", value=0.8, owner="release-rule"),
            observed("review", "pass", value=0.84, owner="release-rule", review_band=0.03),
        ),
        source="records.jsonl",
        windows={"2026-11-01": date(2026, 12, 31)},
    )

    assert report.calibration is not None
    (window,) = report.calibration.observation_windows
    assert json.loads(window.model_dump_json()) == {
        "previous_policy_version": "2026-11-01",
        "policy_versions": ["2026-12-01"],
        "until": "2026-12-31",
        "records": 4,
        "changed": 2,
        "changes": [
            {"previous_status": "pass", "status": "fail", "rows": 1},
            {"previous_status": "pass", "status": "review", "rows": 1},
        ],
    }
    assert render_text(report).endswith(
        "  observation window: previous policy 2026-11-01 beside 2026-12-01 (ends 2026-12-31):"
        " 4 rows decided under both, 2 changed: pass -> fail 1, pass -> review 1"
    )


def test_a_window_whose_end_is_not_known_says_so() -> None:
    """A record file read without the policy: records do not carry until."""
    report = report_of(observed("pass", "pass"))

    assert report.calibration is not None
    (window,) = report.calibration.observation_windows
    assert window.until is None
    assert "(end not known here (the policy's [observe] until))" in render_text(report)


def test_the_html_page_has_the_section_with_its_tables() -> None:
    """A Calibration heading, the review table and the window's status changes."""
    page = render_html(report_of(REVIEW, observed("fail", "pass", value=0.8, owner="release-rule")))

    assert "<h2>Calibration</h2>" in page
    assert '<table class="review-rows">' in page
    assert '<table class="status-changes">' in page
    assert "<tr><td>pass</td><td>-&gt;</td><td>fail</td><td>1</td></tr>" in page


def test_report_command_takes_the_window_s_end_from_the_configured_policy(
    report_cli: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """report on a record file, EVIDENCE_POLICY_FILE naming the window: --json says until."""
    (tmp_path / "old.toml").write_text(
        'version = "2026-11-01"\n[groups.default]\nmin_coverage = 0.6\n', encoding="utf-8"
    )
    policy = tmp_path / "new.toml"
    policy.write_text(
        'version = "2026-12-01"\n[groups.default]\nmin_coverage = 0.85\n'
        '[observe]\nprevious = "old.toml"\nuntil = "2026-12-31"\n',
        encoding="utf-8",
    )
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps(observed("pass", "pass")) + "\n", encoding="utf-8")
    monkeypatch.setenv("EVIDENCE_POLICY_FILE", str(policy))
    run = report_cli(records, "--json")

    (window,) = json.loads(run.out)["calibration"]["observation_windows"]
    assert window["until"] == "2026-12-31"
