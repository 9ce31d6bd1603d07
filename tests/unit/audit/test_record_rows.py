"""`records`' rows (SPEC §11): a first attempt and a policy in, the record row out, decided
as `explain` decides it; the filters; the CSV cells; the lines `report --store` reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contracts import METRIC_VERSION, RAGAS_VERSION, Alert, Attempt, parse_policy
from contracts.record_models import ContractDriftAlert
from contracts.triage import Finding
from tests import factories
from tests.conftest import FIXED_NOW
from tests.factories import TWO_THIRDS_REASON
from worker.audit.record_rows import (
    FIELDS,
    RecordQuery,
    Selection,
    csv_cells,
    report_lines,
    row_of,
)

HASH = "9f" * 32
POLICY = parse_policy(
    'version = "2026-12-01"\n[groups.default]\nmin_coverage = 0.85\n'
    "[groups.disclosure]\nrequire_all = true\n"
)
NOT_CITED = Finding(claim_id="refund-method", finding="not_cited", owner="product", document_ids=[])
UNKNOWN_REASON = "supported_claim_ids contains unknown IDs: old-c1"


GRADER = {
    "grader_name": "claim-attributor",
    "grader_version": "3.2.0",
    "grader_model": "gpt-4o-mini-2024-07-18",
}


def kept(**fields: Any) -> Attempt:
    """The base attempt (refund-method missing, not cited) as the worker records it now."""
    values: dict[str, Any] = {
        "contract_version": "support-faq/2026-10",
        "worker_version": "0.1.0",
        "citations": [],
        "missing_claim_ids": ["refund-method"],
        "findings": [NOT_CITED],
        "retrieved_document_ids": ["kb-1"],
        "policy_group": "default",
        **GRADER,
        **fields,
    }
    return factories.attempt(**values)


def expected_row(**fields: Any) -> dict[str, Any]:
    """The row of kept() failing policy 2026-12-01, with overrides."""
    return {
        "event": "evidence_coverage.scored",
        "case_id": "refund-001",
        "input_hash": HASH,
        "contract_version": "support-faq/2026-10",
        "metric_version": METRIC_VERSION,
        "ragas_version": RAGAS_VERSION,
        "worker_version": "0.1.0",
        **GRADER,
        "value": 2 / 3,
        "reason": TWO_THIRDS_REASON,
        "status": "fail",
        "policy_group": "default",
        "policy_version": "2026-12-01",
        "threshold": 0.85,
        "owner": "product",
        "cache": "miss",
        "missing_claim_ids": ["refund-method"],
        "findings": [
            {
                "claim_id": "refund-method",
                "finding": "not_cited",
                "owner": "product",
                "document_ids": [],
                "evidence_retrieved": None,
            }
        ],
        "contract_drift": False,
        "task_id": "task-1",
        "recorded_at": "2026-12-01T12:00:00Z",
        **fields,
    }


def test_a_failing_first_outcome_is_its_record_row_under_the_policy() -> None:
    """Status, threshold and owner are the policy's now; the rest is what the store kept;
    the fields are FIELDS, in the record line's order."""
    row = row_of(HASH, kept(), POLICY)

    assert row == expected_row()
    assert tuple(row) == FIELDS


def test_a_first_kept_before_graders_were_named_has_null_grader_fields() -> None:
    """A first attempt an earlier version stored names no grader: its row says null."""
    row = row_of(HASH, kept(grader_name=None, grader_version=None, grader_model=None), POLICY)

    assert row == expected_row(grader_name=None, grader_version=None, grader_model=None)


def test_without_a_policy_a_valid_row_is_scored_and_has_no_owner() -> None:
    """Report-only, as `score` without a policy: no threshold, no policy version."""
    assert row_of(HASH, kept(), None) == expected_row(
        status="scored", policy_version=None, threshold=None, owner=None
    )


def test_a_row_that_passes_has_no_owner_but_keeps_its_findings() -> None:
    """1.0 passes 0.85; its findings (none missing) stay."""
    first = kept(
        value=1.0,
        reason="supported=3; required=3; missing=none",
        supported_claim_ids=factories.REQUIRED,
        missing_claim_ids=[],
        findings=[],
    )
    assert row_of(HASH, first, POLICY) == expected_row(
        value=1.0,
        reason="supported=3; required=3; missing=none",
        status="pass",
        owner=None,
        missing_claim_ids=[],
        findings=[],
    )


def test_an_invalid_row_is_owned_by_evaluation_data_and_not_triaged() -> None:
    """The metric's invalid row: no value, no missing IDs, no findings."""
    first = kept(value=None, reason=UNKNOWN_REASON, missing_claim_ids=None, findings=[])
    assert row_of(HASH, first, POLICY) == expected_row(
        value=None,
        reason=UNKNOWN_REASON,
        status="invalid",
        threshold=None,
        owner="evaluation-data",
        missing_claim_ids=None,
        findings=[],
    )


def test_a_group_the_policy_lacks_makes_the_row_invalid() -> None:
    """As `explain` and the worker decide it: the reason names the group."""
    row = row_of(HASH, kept(policy_group="legal"), POLICY)

    assert (row["status"], row["owner"], row["policy_group"], row["value"]) == (
        "invalid",
        "evaluation-data",
        "legal",
        None,
    )
    assert row["reason"] == (
        "policy_group 'legal' is not defined in policy 2026-12-01 (groups: default,disclosure)"
    )


def test_a_drifted_row_is_owned_by_evaluation_data() -> None:
    """Contract drift wins over the findings' owner, as when it was recorded."""
    row = row_of(HASH, kept(contract_drift=True, owner="evaluation-data"), POLICY)

    assert (row["status"], row["owner"], row["contract_drift"]) == (
        "fail",
        "evaluation-data",
        True,
    )


FAILING = kept()
PASSING = kept(
    case_id="refund-002",
    value=1.0,
    reason="supported=3; required=3; missing=none",
    supported_claim_ids=factories.REQUIRED,
    missing_claim_ids=[],
    findings=[],
)
OTHER_CONTRACT = kept(case_id="ship-001", contract_version="shipping/2026-11")
INVALID = kept(
    case_id="refund-010", value=None, reason=UNKNOWN_REASON, missing_claim_ids=None, findings=[]
)
FIRSTS = [("1" * 64, FAILING), ("2" * 64, PASSING), ("3" * 64, OTHER_CONTRACT), ("4" * 64, INVALID)]


@pytest.mark.parametrize(
    ("query", "cases"),
    [
        (RecordQuery(), ["refund-001", "refund-002", "ship-001", "refund-010"]),
        (RecordQuery(contract="shipping/2026-11"), ["ship-001"]),
        (RecordQuery(case_prefix="refund-00"), ["refund-001", "refund-002"]),
        (RecordQuery(status="fail"), ["refund-001", "ship-001"]),
        (RecordQuery(status="pass"), ["refund-002"]),
        (RecordQuery(owner="product"), ["refund-001", "ship-001"]),
        (RecordQuery(owner="evaluation-data"), ["refund-010"]),
        (RecordQuery(finding="not_cited"), ["refund-001", "ship-001"]),
        (RecordQuery(finding="cited_span_invalid"), []),
        (RecordQuery(status="fail", contract="support-faq/2026-10"), ["refund-001"]),
    ],
)
def test_filters_select_rows_and_combine(query: RecordQuery, cases: list[str]) -> None:
    """Every filter given must match; the order is the outcomes' order; all are read."""
    selection = Selection(query, POLICY)

    assert [row["case_id"] for row in selection.rows(FIRSTS)] == cases
    assert (selection.read, selection.selected) == (4, len(cases))


def test_csv_cells_spell_null_empty_and_lists_as_json() -> None:
    """One cell per field: text as it is, numbers and booleans as JSON writes them."""
    assert csv_cells(expected_row(threshold=None, owner=None)) == [
        "evidence_coverage.scored",
        "refund-001",
        HASH,
        "support-faq/2026-10",
        METRIC_VERSION,
        RAGAS_VERSION,
        "0.1.0",
        "claim-attributor",
        "3.2.0",
        "gpt-4o-mini-2024-07-18",
        "0.6666666666666666",
        TWO_THIRDS_REASON,
        "fail",
        "default",
        "2026-12-01",
        "",
        "",
        "miss",
        '["refund-method"]',
        '[{"claim_id":"refund-method","finding":"not_cited","owner":"product",'
        '"document_ids":[],"evidence_retrieved":null}]',
        "false",
        "task-1",
        "2026-12-01T12:00:00Z",
    ]


def test_report_lines_are_the_rows_then_the_alerts_as_log_lines() -> None:
    """Numbered from 1, as a record file's; each alert carries its event name."""
    conflict = Alert(input_hash=HASH, first=kept(), observed=kept(value=1.0), raised_at=FIXED_NOW)
    drift = ContractDriftAlert(
        case_id="refund-001",
        contract_version="support-faq/2026-10",
        first_required_claim_ids=["a"],
        required_claim_ids=["a", "b"],
        added_claim_ids=["b"],
        removed_claim_ids=[],
        first_input_hash="1" * 64,
        input_hash=HASH,
        first_task_id=None,
        task_id=None,
        raised_at=FIXED_NOW,
    )
    lines = list(report_lines([expected_row()], [conflict, drift]))

    assert [number for number, _ in lines] == [1, 2, 3]
    parsed = [json.loads(body) for _, body in lines]
    assert parsed[0] == expected_row()
    assert (parsed[1]["event"], parsed[1]["kind"], parsed[1]["input_hash"]) == (
        "evidence_coverage.nondeterminism",
        "nondeterminism",
        HASH,
    )
    assert (parsed[2]["event"], parsed[2]["added_claim_ids"]) == (
        "evidence_coverage.contract_drift",
        ["b"],
    )
