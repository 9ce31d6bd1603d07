"""`evidence-worker score` over the example file: the record, reason, decision and alert of
each line, worked out by hand, and what a second run over the same store gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Run
from tests.unit.cli.factories import EXAMPLE_FILE, EXAMPLE_POLICY, TWO_THIRDS, example_rows, hash_of

# (line, case_id, event, status, value, cache) for the example file on a fresh store.
EXAMPLE_FIRST_RUN = [
    (1, "refund-001", "evidence_coverage.scored", "pass", 1.0, "miss"),
    (2, "refund-002", "evidence_coverage.scored", "fail", TWO_THIRDS, "miss"),
    (3, "refund-002-rerun", "evidence_coverage.scored", "fail", TWO_THIRDS, "hit"),
    (4, "refund-002-retry", "evidence_coverage.scored", "fail", TWO_THIRDS, "conflict"),
    (5, "transfer-fee-007", "evidence_coverage.scored", "fail", 0.5, "miss"),
    (6, "transfer-fee-008", "evidence_coverage.scored", "pass", 1.0, "miss"),
    (7, "refund-003", "evidence_coverage.rejected", "invalid", None, None),
    (8, "warranty-011", "evidence_coverage.scored", "invalid", None, "miss"),
    (9, "warranty-012", "evidence_coverage.scored", "invalid", None, "miss"),
    (10, "shipping-020", "evidence_coverage.scored", "fail", 0.25, "miss"),
]


def test_example_file_exits_3_for_its_nondeterminism(score: Callable[..., Run]) -> None:
    """The example file holds one conflicting re-run, so score exits 3."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert run.code == 3
    assert run.summary == (
        "score: 10 rows: fail 5, invalid 3, pass 2; 1 rejected before scoring; "
        "cache conflict 1, hit 1, miss 7; 1 nondeterminism alert; policy 2026-12-01; exit 3"
    )


def test_example_file_gives_expected_record_per_line(score: Callable[..., Run]) -> None:
    """Each example line yields one record with the status, value and cache computed by hand."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert [
        (r["line"], r["case_id"], r["event"], r["status"], r["value"], r["cache"])
        for r in run.records
    ] == EXAMPLE_FIRST_RUN


def test_example_file_reasons_explain_each_record(score: Callable[..., Run]) -> None:
    """Reasons are the metric's exact texts, the schema error, or the Ragas-prefixed invalid."""
    reasons = {
        r["case_id"]: r["reason"] for r in score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY).records
    }

    assert reasons["refund-001"] == "supported=3; required=3; missing=none"
    assert reasons["refund-002"] == "supported=2; required=3; missing=refund-method"
    assert reasons["refund-002-retry"] == "supported=2; required=3; missing=refund-method"
    assert reasons["transfer-fee-007"] == "supported=1; required=2; missing=transfer-fee"
    assert reasons["refund-003"] == (
        "schema: supported_claim_ids: Field required; "
        "supported_claims: Extra inputs are not permitted"
    )
    assert reasons["warranty-011"].endswith(
        "supported_claim_ids contains unknown IDs: warranty-claims-old"
    )
    assert reasons["warranty-012"].endswith(
        "required_claim_ids contains duplicate claim IDs: warranty-term"
    )
    assert reasons["shipping-020"] == (
        "supported=1; required=4; missing=ship-cost,ship-region,ship-tracking"
    )


def test_example_file_decisions_carry_policy_threshold_and_owner(
    score: Callable[..., Run],
) -> None:
    """Every record names the policy version, its group's threshold, blocking and the owner."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert [
        (r["case_id"], r["policy_group"], r["threshold"], r["blocking"], r["owner"])
        for r in run.records
    ] == [
        ("refund-001", "default", 0.85, True, None),
        ("refund-002", "default", 0.85, True, "attribution"),
        ("refund-002-rerun", "default", 0.85, True, "attribution"),
        ("refund-002-retry", "default", 0.85, True, "attribution"),
        ("transfer-fee-007", "disclosure", 1.0, True, "attribution"),
        ("transfer-fee-008", "disclosure", 1.0, True, None),
        ("refund-003", None, None, None, "evaluation-data"),
        ("warranty-011", "default", None, True, "evaluation-data"),
        ("warranty-012", "default", None, True, "evaluation-data"),
        ("shipping-020", "default", 0.85, False, "attribution"),
    ]
    assert {r["policy_version"] for r in run.records} == {"2026-12-01"}


def test_example_file_conflict_keeps_first_and_reports_observed(
    score: Callable[..., Run],
) -> None:
    """The conflicting re-run carries the first outcome and its own as observed_*."""
    rows = example_rows()
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    retry = run.records[3]

    assert retry["input_hash"] == hash_of(rows[1])
    assert retry["level"] == "warning"
    assert retry["value"] == TWO_THIRDS
    assert retry["observed_value"] == 1 / 3
    assert retry["observed_reason"] == (
        "supported=1; required=3; missing=refund-method,support-channel"
    )


def test_example_file_raises_exactly_one_alert(score: Callable[..., Run]) -> None:
    """One ERROR nondeterminism line names the hash, both case IDs and both lists."""
    rows = example_rows()
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert len(run.alerts) == 1
    alert = run.alerts[0]
    assert alert["level"] == "error"
    assert alert["input_hash"] == hash_of(rows[1])
    assert alert["decision"] == "kept_first"
    assert alert["line"] == 4
    assert (alert["first"]["case_id"], alert["observed"]["case_id"]) == (
        "refund-002",
        "refund-002-retry",
    )
    assert alert["first"]["supported_claim_ids"] == ["refund-window", "support-channel"]
    assert alert["observed"]["supported_claim_ids"] == ["refund-window"]


def test_example_file_alert_follows_its_conflicting_record(score: Callable[..., Run]) -> None:
    """The alert line comes right after the record of the attempt that disagreed."""
    events = [(line["event"], line.get("case_id")) for line in score(EXAMPLE_FILE).lines]

    assert events[3:5] == [
        ("evidence_coverage.scored", "refund-002-retry"),
        ("evidence_coverage.nondeterminism", None),
    ]


def test_example_file_has_exactly_one_rejected_line(score: Callable[..., Run]) -> None:
    """Only the line with a misspelt field is rejected; it is kept in line order."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    rejected = [r for r in run.records if r["event"] == "evidence_coverage.rejected"]

    assert [(r["line"], r["case_id"], r["input_hash"]) for r in rejected] == [
        (7, "refund-003", None)
    ]


def test_second_run_of_example_gives_no_miss(score: Callable[..., Run]) -> None:
    """Re-running the same file confirms every outcome: hits, and the known conflict again."""
    score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    second = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert [(r["case_id"], r["cache"]) for r in second.records] == [
        ("refund-001", "hit"),
        ("refund-002", "hit"),
        ("refund-002-rerun", "hit"),
        ("refund-002-retry", "conflict"),
        ("transfer-fee-007", "hit"),
        ("transfer-fee-008", "hit"),
        ("refund-003", None),
        ("warranty-011", "hit"),
        ("warranty-012", "hit"),
        ("shipping-020", "hit"),
    ]
    assert second.code == 3


def test_second_run_of_example_keeps_first_outcomes(score: Callable[..., Run]) -> None:
    """Status, value and reason of every record are the same on the second run."""

    def outcomes(run: Run) -> list[tuple[Any, ...]]:
        return [(r["case_id"], r["status"], r["value"], r["reason"]) for r in run.records]

    first = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    second = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert outcomes(second) == outcomes(first)


def test_second_run_of_example_reports_hits_as_observed(score: Callable[..., Run]) -> None:
    """A hit's observed_* equal its canonical value and reason."""
    score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    first_line = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY).records[0]

    assert (first_line["observed_value"], first_line["observed_reason"]) == (
        1.0,
        "supported=3; required=3; missing=none",
    )
