"""`evidence-worker report` over time: rows, the valid-only mean and alerts per UTC day, the
hashes alerts name with the commands that open them, invalid reasons grouped by template."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run
from tests.unit.report.factories import (
    FAQ,
    OLD_RECORDS,
    PAYMENTS,
    alert,
    drift_alert,
    invalid,
    lines,
    notes_of,
    record,
    rejected,
    report_of,
    version,
)
from worker.cli import main
from worker.report.aggregate import Report, build_report
from worker.report.alert_places import AlertHash
from worker.report.html import render_html
from worker.report.text import render_text

D1, D2, D3 = "2026-12-01", "2026-12-02", "2026-12-03"


def at(day: str, clock: str = "12:00:00") -> str:
    """An ISO 8601 UTC time on `day`, as record lines carry it."""
    return f"{day}T{clock}Z"


DayRow = tuple[str, int, int, int, float | None, int, int]


def days_of(report: Report, contract_version: str | None) -> list[DayRow]:
    """(day, rows, valid, invalid, mean, nondeterminism alerts, drift alerts) per day."""
    return [
        (
            day.day.isoformat(),
            day.records,
            day.valid,
            day.invalid,
            day.mean,
            day.nondeterminism_alerts,
            day.contract_drift_alerts,
        )
        for day in version(report, contract_version).days
    ]


def raised(line: dict[str, Any], day: str) -> dict[str, Any]:
    """An alert line raised on `day`."""
    return {**line, "raised_at": at(day, "10:00:00")}


# Per day ---------------------------------------------------------------------------------


def test_records_spanning_three_days_are_counted_per_day() -> None:
    """Each UTC day gets its rows, valid and invalid rows and the mean of its valid values."""
    report = report_of(
        record(value=1.0, recorded_at=at(D1, "00:00:00")),
        record(value=0.5, status="fail", recorded_at=at(D1, "23:59:59.999999")),
        invalid(recorded_at=at(D1)),
        record(value=0.25, status="fail", recorded_at=at(D2)),
        invalid(recorded_at=at(D3)),
        invalid(recorded_at=at(D3)),
    )

    assert days_of(report, FAQ) == [
        (D1, 3, 2, 1, 0.75, 0, 0),
        (D2, 1, 1, 0, 0.25, 0, 0),
        (D3, 2, 0, 2, None, 0, 0),
    ]
    span = report.span
    assert (span.field, span.first_day, span.last_day, span.days, span.undated) == (
        "recorded_at",
        date(2026, 12, 1),
        date(2026, 12, 3),
        3,
        0,
    )


def test_a_day_of_invalid_rows_has_no_mean_never_zero() -> None:
    """A day whose rows are all invalid has mean None; its invalid rows are counted apart, and
    a valid 0.0 on another day is a mean of 0.0, not a missing one."""
    report = report_of(
        invalid(recorded_at=at(D1)),
        invalid("supported_claim_ids contains unknown IDs: x", recorded_at=at(D1)),
        record(value=0.0, status="fail", recorded_at=at(D2)),
        invalid(recorded_at=at(D2)),
    )

    assert days_of(report, FAQ) == [(D1, 2, 0, 2, None, 0, 0), (D2, 2, 1, 1, 0.0, 0, 0)]
    assert "  2026-12-01  2     0      2        -       0               0" in render_text(report)


def test_records_on_one_day_get_no_per_day_section() -> None:
    """All records on one UTC day: no per-day table, and the text says which day it was."""
    report = report_of(
        record(recorded_at=at(D1, "00:00:01")),
        record(value=0.5, status="fail", recorded_at=at(D1, "23:59:59")),
        rejected(recorded_at=at(D1)),
    )

    assert [v.days for v in report.contract_versions] == [[], []]
    text = render_text(report).splitlines()
    assert text[1] == "days (UTC, by recorded_at): 2026-12-01 only (no per-day table)"
    assert not [line for line in text if "per day" in line]
    assert 'class="timeline"' not in render_html(report)


def test_records_without_times_are_counted_apart_never_placed_on_a_day() -> None:
    """Records written before records carried times are on no day; they still count in the
    version's aggregates, and the report says how many there are."""
    report = report_of(
        record(value=0.5, status="fail"),
        record(value=1.0, recorded_at=at(D1)),
        record(value=1.0, recorded_at=at(D3)),
    )

    assert days_of(report, FAQ) == [(D1, 1, 1, 0, 1.0, 0, 0), (D3, 1, 1, 0, 1.0, 0, 0)]
    assert (version(report, FAQ).undated, report.span.undated, report.span.days) == (1, 1, 2)
    assert version(report, FAQ).groups[0].valid.count == 3
    text = render_text(report).splitlines()
    assert text[1] == (
        "days (UTC, by recorded_at): 2026-12-01 to 2026-12-03, 2 with records; records "
        "without recorded_at 1 (written before records carried times: on no day)"
    )
    assert "  without recorded_at: 1 row (written before records carried times: on no day)" in (
        text
    )


def test_a_file_written_before_records_carried_times_still_reports() -> None:
    """The record file of a store written before this change (tests/fixtures) reads as it did:
    every record undated, no days, no days line."""
    report = build_report(
        enumerate(OLD_RECORDS.read_bytes().splitlines(), start=1), source="records.jsonl"
    )

    assert (report.records, report.unreadable) == (12, 0)
    span = report.span
    assert (span.first_day, span.last_day, span.days, span.undated) == (None, None, 0, 12)
    assert all(v.days == [] for v in report.contract_versions)
    assert not render_text(report).splitlines()[1].startswith("days")


def test_days_are_utc_days() -> None:
    """A time with an offset is put on its UTC day; one without an offset is read as UTC."""
    report = report_of(
        record(recorded_at="2026-12-01T22:00:00Z"),
        record(value=0.5, status="fail", recorded_at="2026-12-01T23:30:00-02:00"),
        record(value=0.0, status="fail", recorded_at="2026-12-02T00:30:00+02:00"),
        record(value=0.25, status="fail", recorded_at="2026-12-02T08:00:00"),
    )

    assert days_of(report, FAQ) == [(D1, 2, 2, 0, 0.5, 0, 0), (D2, 2, 2, 0, 0.375, 0, 0)]


def test_contract_versions_are_never_mixed_in_a_day() -> None:
    """Each contract version has its own days and means; the axis is the whole file's."""
    report = report_of(
        record(value=1.0, recorded_at=at(D1)),
        record(value=0.0, status="fail", contract_version=PAYMENTS, recorded_at=at(D1)),
        record(value=0.5, status="fail", recorded_at=at(D3)),
    )

    assert days_of(report, FAQ) == [(D1, 1, 1, 0, 1.0, 0, 0), (D3, 1, 1, 0, 0.5, 0, 0)]
    assert days_of(report, PAYMENTS) == [(D1, 1, 1, 0, 0.0, 0, 0)]


def test_rejected_records_are_counted_per_day_apart() -> None:
    """Rejected records (their rejection time) have their own days, all invalid, no mean."""
    report = report_of(
        record(recorded_at=at(D1)), rejected(recorded_at=at(D1)), rejected(recorded_at=at(D2))
    )

    assert days_of(report, None) == [(D1, 1, 0, 1, None, 0, 0), (D2, 1, 0, 1, None, 0, 0)]
    assert days_of(report, FAQ) == [(D1, 1, 1, 0, 1.0, 0, 0)]


def test_alerts_of_both_kinds_are_counted_on_the_day_they_were_raised() -> None:
    """Alerts are placed in a version as the report places them (hash, else a drift alert's
    version) and on their raised_at day; a day with alerts and no rows is listed too."""
    report = report_of(
        record(input_hash="1" * 64, recorded_at=at(D1)),
        record(input_hash="2" * 64, recorded_at=at(D2)),
        raised(alert("1" * 64), D2),
        raised(alert("1" * 64), D2),
        raised(drift_alert("2" * 64), D3),
        raised(drift_alert("8" * 64), D3),  # no record here: placed by its contract version
        raised(alert("9" * 64), D1),  # placed nowhere: only the headline counts it
        alert("1" * 64),  # no raised_at: counted for the version, on no day
    )

    assert days_of(report, FAQ) == [
        (D1, 1, 1, 0, 1.0, 0, 0),
        (D2, 1, 1, 0, 1.0, 2, 0),
        (D3, 0, 0, 0, None, 0, 2),
    ]
    assert (version(report, FAQ).nondeterminism_alerts, report.nondeterminism_alerts) == (3, 4)


def test_days_from_produced_at() -> None:
    """`--days-from produced_at` puts rows on the day upstream produced them; rows whose
    message gave no produced_at are counted apart."""
    report = build_report(
        lines(
            record(produced_at=at(D1), recorded_at=at(D3)),
            record(value=0.5, status="fail", produced_at=at(D2), recorded_at=at(D3)),
            record(value=0.0, status="fail", produced_at=None, recorded_at=at(D3)),
        ),
        source="records.jsonl",
        time_field="produced_at",
    )

    assert days_of(report, FAQ) == [(D1, 1, 1, 0, 1.0, 0, 0), (D2, 1, 1, 0, 0.5, 0, 0)]
    assert render_text(report).splitlines()[1] == (
        "days (UTC, by produced_at): 2026-12-01 to 2026-12-02, 2 with records; records "
        "without produced_at 1 (their messages gave none: on no day)"
    )


def test_cli_days_from_and_help(
    report_cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`report --days-from produced_at` reads the other time; --help names the option."""
    path = write_jsonl([record(produced_at=at(D1), recorded_at=at(D3)), record(produced_at=at(D2))])

    run = report_cli(path, "--days-from", "produced_at", "--json")

    assert run.code == 0, run.err
    assert '"field":"produced_at","first_day":"2026-12-01","last_day":"2026-12-02"' in run.out
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--help"])
    assert exit_.value.code == 0
    helped = " ".join(capsys.readouterr().out.split())
    assert "--days-from {recorded_at,produced_at}" in helped
    assert "the hashes alerts name with the show and explain commands" in helped
    assert "records without a time (written before records carried one) are counted apart" in (
        helped
    )


# Alert hashes ------------------------------------------------------------------------------


def test_alert_hashes_are_listed_with_the_commands_to_inspect_them() -> None:
    """Each hash alerts name, once per kind, first raised first, with show and explain."""
    first, second, elsewhere = "1" * 64, "2" * 64, "8" * 64
    report = report_of(
        record(input_hash=first, recorded_at=at(D1)),
        record(input_hash=second, recorded_at=at(D2)),
        raised(alert(second), D3),
        raised(alert(first), D2),
        raised(alert(first), D3),
        raised(drift_alert(elsewhere, contract_version="unknown/1"), D1),
    )

    assert report.alert_hashes == [
        AlertHash(
            kind="contract_drift",
            input_hash=elsewhere,
            contract_version=None,
            alerts=1,
            first_raised_at=datetime(2026, 12, 1, 10, tzinfo=UTC),
        ),
        AlertHash(
            kind="nondeterminism",
            input_hash=first,
            contract_version=FAQ,
            alerts=2,
            first_raised_at=datetime(2026, 12, 2, 10, tzinfo=UTC),
        ),
        AlertHash(
            kind="nondeterminism",
            input_hash=second,
            contract_version=FAQ,
            alerts=1,
            first_raised_at=datetime(2026, 12, 3, 10, tzinfo=UTC),
        ),
    ]
    text = render_text(report).splitlines()
    assert text[-3:] == [
        f"alert contract_drift x1: {elsewhere} (contract version not in this file): "
        f"evidence-worker show {elsewhere}; evidence-worker explain {elsewhere}",
        f"alert nondeterminism x2: {first} (contract version {FAQ}): "
        f"evidence-worker show {first}; evidence-worker explain {first}",
        f"alert nondeterminism x1: {second} (contract version {FAQ}): "
        f"evidence-worker show {second}; evidence-worker explain {second}",
    ]


def test_html_lists_alert_hashes_with_their_commands() -> None:
    """The page has a table of alert hashes, each with its show and explain commands."""
    hash_ = "1" * 64
    report = report_of(record(input_hash=hash_), raised(alert(hash_), D1))

    page = render_html(report)

    (table,) = re.findall(r'<table class="alert-hashes">.*?</table>', page, re.S)
    assert re.findall(r"<code>(.*?)</code>", table) == [
        f"evidence-worker show {hash_}",
        f"evidence-worker explain {hash_}",
    ]
    assert "<h2>Alerts: 1 input hashes</h2>" in page


# Invalid reasons -------------------------------------------------------------------------

DUPLICATES = "required_claim_ids contains duplicate claim IDs: "


def test_invalid_reasons_differing_only_in_their_ids_are_one_template() -> None:
    """Reasons that end in claim IDs are grouped with the IDs as <ids>: a count, how many
    different reasons, two examples (most frequent first); other reasons stay verbatim."""
    report = report_of(
        invalid(DUPLICATES + "a,b"),
        invalid(DUPLICATES + "a,b"),
        invalid(DUPLICATES + "c"),
        invalid(DUPLICATES + "x;y, z"),  # IDs may hold "," and ";": the list runs to the end
        invalid("supported_claim_ids contains duplicate claim IDs: c"),
        invalid("supported_claim_ids contains unknown IDs: old-c1"),
        invalid(),
    )

    reasons = version(report, FAQ).groups[0].invalid.top_reasons
    assert [(r.reason, r.count, r.distinct, r.examples) for r in reasons] == [
        (DUPLICATES + "<ids>", 4, 3, [DUPLICATES + "a,b", DUPLICATES + "c"]),
        ("required_claim_ids must not be empty", 1, 1, []),
        ("supported_claim_ids contains duplicate claim IDs: c", 1, 1, []),
        ("supported_claim_ids contains unknown IDs: old-c1", 1, 1, []),
    ]
    assert notes_of(render_text(report), "default")[-4] == (
        f"invalid x4: {DUPLICATES}<ids> (3 different; e.g. {DUPLICATES}a,b | {DUPLICATES}c)"
    )


def test_rejections_naming_unknown_expected_evidence_ids_are_one_template() -> None:
    """SPEC §9's schema error, whatever IDs it names, is one line of the rejected bucket."""
    reason = "schema: message: expected_evidence names unknown claim IDs: "
    report = report_of(
        {**rejected(), "reason": reason + "aa,zz"}, {**rejected(), "reason": reason + "bb"}
    )

    (only,) = version(report, None).groups[0].invalid.top_reasons
    assert (only.reason, only.count, only.examples) == (
        reason + "<ids>",
        2,
        [reason + "aa,zz", reason + "bb"],
    )


def test_html_shows_a_template_with_its_examples() -> None:
    """The page's invalid reasons list the template once, with its count and examples."""
    report = report_of(invalid(DUPLICATES + "a,b"), invalid(DUPLICATES + "c"))

    page = render_html(report)

    (item,) = re.findall(r'<ul class="invalid-reasons">(.*?)</ul>\n', page, re.S)
    assert item.strip().startswith(f"<li><strong>2</strong> × {DUPLICATES}&lt;ids&gt; ")
    assert re.findall(r"<code>(.*?)</code>", item) == [DUPLICATES + "a,b", DUPLICATES + "c"]


# The page's time series --------------------------------------------------------------------


def test_html_draws_each_day_of_each_version() -> None:
    """One timeline per contract version, a group per day with rows, the mean only where
    there are valid rows, and the same days in a table."""
    report = report_of(
        record(value=1.0, recorded_at=at(D1)),
        invalid(recorded_at=at(D1)),
        invalid(recorded_at=at(D3)),
        record(value=0.5, status="fail", contract_version=PAYMENTS, recorded_at=at(D2)),
    )

    page = render_html(report)

    timelines = re.findall(r'<svg [^>]*class="timeline"[^>]*>.*?</svg>', page, re.S)
    assert len(timelines) == 2
    days = [
        re.findall(
            r'<g class="day" data-day="([\d-]+)" data-records="(\d+)" '
            r'data-valid="(\d+)" data-invalid="(\d+)" data-mean="([^"]*)"',
            svg,
        )
        for svg in timelines
    ]
    assert days == [
        [("2026-12-02", "1", "1", "0", "0.5")],  # payments-disclosures sorts first
        [("2026-12-01", "2", "1", "1", "1.0"), ("2026-12-03", "1", "0", "1", "")],
    ]
    assert [svg.count('class="mean-point"') for svg in timelines] == [1, 1]
    assert page.count('<table class="days">') == 2
    assert "<td>2026-12-03</td><td>1</td><td>0</td><td>1</td><td>-</td>" in page


def test_html_rejected_bucket_draws_rows_without_a_mean_panel() -> None:
    """Rejected messages never reached the metric: their days show rows, no mean panel."""
    report = report_of(
        record(recorded_at=at(D1)), rejected(recorded_at=at(D1)), rejected(recorded_at=at(D2))
    )

    page = render_html(report)

    faq, rejections = re.findall(r'<svg [^>]*class="timeline"[^>]*>.*?</svg>', page, re.S)
    assert ("mean value over valid rows" in faq, "mean value over valid rows" in rejections) == (
        True,
        False,
    )
    assert rejections.count('class="invalid-bar"') == 2
    assert 'class="mean-point"' not in rejections
