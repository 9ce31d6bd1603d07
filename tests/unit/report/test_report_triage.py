"""`evidence-worker report`'s triage (SPEC §9 "Report"): owners, missing claims with their
dominant finding, the sparse-coverage warning, alerts and thresholds per group, old records."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.report.factories import (
    FAQ,
    OLD_RECORDS,
    PAYMENTS,
    SPARSE,
    alert,
    drift_alert,
    failed,
    finding,
    group,
    invalid,
    notes_of,
    record,
    report_of,
    version,
)
from worker.report.aggregate import build_report
from worker.report.text import render_text


def test_every_owner_is_listed_per_group_with_zeros_and_no_owner_apart() -> None:
    """All five owners appear in every group, in one order; rows with no owner are apart."""
    report = report_of(
        record(),
        record(owner="release-rule", status="fail", value=0.5),
        record(owner="retrieval", status="fail", value=0.5),
        record(owner="retrieval", status="fail", value=0.5),
        record(policy_group="disclosure", owner="attribution", status="fail", value=0.5),
        invalid(policy_group="disclosure"),
        record(policy_group="disclosure", owner=None, status="pass"),
        record(policy_group="disclosure", owner=None, status="pass"),
    )

    default, disclosure = version(report, FAQ).groups
    assert list(default.owners.items()) == [
        ("attribution", 0),
        ("retrieval", 2),
        ("product", 0),
        ("evaluation-data", 0),
        ("release-rule", 1),
    ]
    assert default.no_owner == 1
    assert disclosure.owners == {
        "attribution": 1,
        "retrieval": 0,
        "product": 0,
        "evaluation-data": 1,
        "release-rule": 0,
    }
    assert disclosure.no_owner == 2
    assert notes_of(render_text(report), "disclosure")[0] == (
        "owners: attribution 1, retrieval 0, product 0, evaluation-data 1, release-rule 0; "
        "no owner 2"
    )


def test_top_missing_claims_carry_their_dominant_finding_with_ties_by_name() -> None:
    """Five claims, most rows first (ties by ID); the dominant finding is the most frequent
    one for that claim in those rows, ties by name; findings elsewhere do not count."""
    report = report_of(
        failed(["b", "a"], ("a", "not_cited"), ("b", "not_cited")),
        failed(["b", "a"], ("a", "not_cited"), ("b", "evidence_not_retrieved")),
        failed(["a", "b"], ("a", "evidence_not_retrieved"), ("b", "cited_span_invalid")),
        failed(["c", "d"], ("c", "evidence_not_retrieved"), ("d", "not_cited")),
        failed(["c", "e", "f"]),
        failed(["g"], ("g", "not_cited")),
        # "a" is not missing here: its finding must not count for it, nor for anyone.
        record(findings=[finding("a", "supported_without_citation")]),
        # A finding naming another claim than the missing one is not the missing one's.
        failed(["d"], ("a", "evidence_not_retrieved")),
    )

    claims = group(report, FAQ, "default").missing_claims
    assert [(c.claim_id, c.rows, c.finding, c.finding_count) for c in claims] == [
        ("a", 3, "not_cited", 2),
        ("b", 3, "cited_span_invalid", 1),
        ("c", 2, "evidence_not_retrieved", 1),
        ("d", 2, "not_cited", 1),
        ("e", 1, None, 0),
    ]
    assert notes_of(render_text(report), "default")[1:6] == [
        "missing x3: a (dominant finding: not_cited (2 of 3 rows))",
        "missing x3: b (dominant finding: cited_span_invalid (1 of 3 rows))",
        "missing x2: c (dominant finding: evidence_not_retrieved (1 of 2 rows))",
        "missing x2: d (dominant finding: not_cited (1 of 2 rows))",
        "missing x1: e (dominant finding: no finding recorded)",
    ]


def test_missing_claims_are_per_group_and_per_version() -> None:
    """A claim missing in two groups is counted in each, never summed across versions."""
    report = report_of(
        failed(["x"], ("x", "not_cited")),
        failed(["x"], ("x", "not_cited"), policy_group="disclosure"),
        failed(["x"], ("x", "evidence_not_retrieved"), contract_version=PAYMENTS),
    )

    summaries = [
        [(c.claim_id, c.rows, c.finding) for c in group(report, v, g).missing_claims]
        for v, g in ((FAQ, "default"), (FAQ, "disclosure"), (PAYMENTS, "default"))
    ]
    assert summaries == [
        [("x", 1, "not_cited")],
        [("x", 1, "not_cited")],
        [("x", 1, "evidence_not_retrieved")],
    ]


def two_claims(value: float, status: str = "fail") -> dict[str, Any]:
    supported = round(value * 2)
    missing = "none" if supported == 2 else "c2"
    return record(
        value=value, status=status, reason=f"supported={supported}; required=2; missing={missing}"
    )


def test_sparse_warning_when_every_valid_row_has_at_most_two_required_claims() -> None:
    """Rows of one or two required claims (and invalid ones, which have no count): warned."""
    report = report_of(
        two_claims(1.0, "pass"),
        two_claims(0.5),
        record(value=1.0, reason="supported=1; required=1; missing=none"),
        invalid(),
    )

    summary = group(report, FAQ, "default")
    assert (summary.max_required_claims, summary.sparse_coverage) == (2, True)
    assert f"  default: WARNING: {SPARSE}" in render_text(report).splitlines()


@pytest.mark.parametrize(
    "third",
    [
        pytest.param(record(value=1.0, reason="supported=3; required=3; missing=none"), id="3"),
        pytest.param(record(value=0.5, reason="coverage is 0.5"), id="unknown-count"),
    ],
)
def test_no_sparse_warning_when_one_row_has_three_claims_or_cannot_say(
    third: dict[str, Any],
) -> None:
    """One valid row with three required claims, or whose count is unknown, lifts it."""
    report = report_of(two_claims(1.0, "pass"), two_claims(0.5), third)

    summary = group(report, FAQ, "default")
    assert summary.sparse_coverage is False
    assert SPARSE not in render_text(report)


def test_no_sparse_warning_for_a_group_without_valid_rows() -> None:
    """Invalid rows carry no required count: nothing to warn about."""
    summary = group(report_of(invalid(), invalid()), FAQ, "default")

    assert (summary.max_required_claims, summary.sparse_coverage) == (None, False)


def test_both_alert_kinds_are_counted_per_group_version_and_in_the_headline() -> None:
    """Alerts are placed through their hash (group), a drift alert without a record through
    its contract version (version only); the rest are counted as with no record here."""
    report = report_of(
        record(input_hash="1" * 64, cache="conflict"),
        record(input_hash="2" * 64, contract_drift=True, owner="evaluation-data"),
        record(input_hash="3" * 64, policy_group="disclosure"),
        record(input_hash="4" * 64, contract_version=PAYMENTS),
        alert("1" * 64),
        alert("1" * 64),
        alert("3" * 64),
        alert("9" * 64),
        drift_alert("2" * 64),
        drift_alert("8" * 64),  # its record is elsewhere: the version still counts it
        drift_alert("7" * 64, contract_version="unknown/1"),
    )

    counts = [
        (g.policy_group, g.nondeterminism_alerts, g.contract_drift_alerts)
        for g in version(report, FAQ).groups
    ]
    assert counts == [("default", 2, 1), ("disclosure", 1, 0)]
    faq, payments = version(report, FAQ), version(report, PAYMENTS)
    assert (faq.nondeterminism_alerts, faq.contract_drift_alerts) == (3, 2)
    assert (payments.nondeterminism_alerts, payments.contract_drift_alerts) == (0, 0)
    assert (report.nondeterminism_alerts, report.unmatched_nondeterminism_alerts) == (4, 1)
    assert (report.contract_drift_alerts, report.unmatched_contract_drift_alerts) == (3, 1)
    text = render_text(report).splitlines()
    assert text[0].endswith(
        "; nondeterminism alerts 4 (1 with no record in this file)"
        "; contract drift alerts 3 (1 with no record in this file)"
    )
    assert (
        f"contract version {FAQ}: records 3; nondeterminism alerts 3; contract drift alerts 2"
        in text
    )
    assert "  default: alerts: nondeterminism 2, contract drift 1" in text
    assert report.skipped == {
        "evidence_coverage.contract_drift": 3,
        "evidence_coverage.nondeterminism": 4,
    }


def test_thresholds_are_collected_per_group() -> None:
    """Each group keeps the distinct thresholds its rows were decided under, sorted."""
    report = report_of(
        record(threshold=0.9),
        record(threshold=0.85),
        record(threshold=0.9),
        record(policy_group="disclosure", threshold=1),
        record(policy_group="report-only", status="scored", threshold=None, policy_version=None),
    )

    assert [g.thresholds for g in version(report, FAQ).groups] == [[0.85, 0.9], [1.0], []]
    assert notes_of(render_text(report), "disclosure")[-2] == "threshold 1.0"


def test_old_records_report_without_triage_fields() -> None:
    """Records written before triage (no missing_claim_ids, findings) still report: their
    missing claims are "not recorded", never "none"; the reason still gives the count."""
    with OLD_RECORDS.open("rb") as handle:
        report = build_report(enumerate(handle, start=1), source="old")

    assert (report.records, report.unreadable) == (12, 0)
    summaries = {
        (g.contract_version, g.policy_group): (
            g.owners["product"],
            g.owners["evaluation-data"],
            g.no_owner,
            g.missing_claims,
            g.rows_without_triage,
            g.sparse_coverage,
        )
        for v in report.contract_versions
        for g in v.groups
    }
    assert summaries == {
        (PAYMENTS, "default"): (1, 0, 0, [], 1, False),
        (PAYMENTS, "disclosure"): (1, 0, 1, [], 2, True),
        (FAQ, "default"): (3, 2, 2, [], 5, False),
        (None, None): (0, 2, 0, [], 0, False),
    }
    notes = notes_of(render_text(report), "default")
    assert "missing claims not recorded on 5 valid rows (written before triage)" in notes
    assert (report.nondeterminism_alerts, version(report, FAQ).nondeterminism_alerts) == (2, 2)
