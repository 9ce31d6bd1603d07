"""`evidence-worker records` and `report --store` (SPEC §11) on every store a URL names:
SQLite, a real Redis and the Redis Cluster. The store is filled through its own record()
with fixed attempts, so every row, line and count is exact."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import METRIC_VERSION, RAGAS_VERSION, Attempt
from contracts.triage import Finding
from tests import factories
from tests.conftest import FIXED_NOW, Run
from tests.integration import store_factories
from worker.stores import ResultStore, describe

pytestmark = pytest.mark.integration

H1, H2, H3, H4 = ("1" * 64, "2" * 64, "3" * 64, "4" * 64)
POLICY = ("--min-coverage", "0.85")
UNKNOWN_REASON = "supported_claim_ids contains unknown IDs: old-c1"
NOT_CITED = Finding(claim_id="refund-method", finding="not_cited", owner="product", document_ids=[])
ALL = "supported=3; required=3; missing=none"


def at(seconds: int, case_id: str, **fields: Any) -> Attempt:
    """A triaged attempt (refund-method missing, not cited) recorded `seconds` after
    FIXED_NOW, with overrides."""
    values: dict[str, Any] = {
        "case_id": case_id,
        "task_id": f"task-{case_id}",
        "contract_version": "support-faq/2026-10",
        "worker_version": "0.1.0",
        "citations": [],
        "missing_claim_ids": ["refund-method"],
        "findings": [NOT_CITED],
        "retrieved_document_ids": ["kb-1"],
        "policy_group": "default",
        "recorded_at": FIXED_NOW + timedelta(seconds=seconds),
        **fields,
    }
    return factories.attempt(**values)


store_url = store_factories.store_url


def fill(store: ResultStore) -> None:
    """Four input hashes recorded out of time order, a hit and a conflict (one alert):
    refund-001 fails (product), refund-002 passes, ship-001 fails under another contract,
    refund-010 is invalid (evaluation-data)."""
    store.record(H3, at(30, "ship-001", contract_version="shipping/2026-11"), now=FIXED_NOW)
    store.record(H1, at(10, "refund-001"), now=FIXED_NOW)
    store.record(
        H4,
        at(
            40, "refund-010", value=None, reason=UNKNOWN_REASON, missing_claim_ids=None, findings=[]
        ),
        now=FIXED_NOW,
    )
    passing = {
        "value": 1.0,
        "reason": ALL,
        "supported_claim_ids": factories.REQUIRED,
        "missing_claim_ids": [],
        "findings": [],
    }
    store.record(H2, at(20, "refund-002", **passing), now=FIXED_NOW)
    store.record(H1, at(50, "refund-001-again"), now=FIXED_NOW)  # a hit
    store.record(H2, at(60, "refund-002-again", value=0.5), now=FIXED_NOW)  # a conflict


def row(input_hash: str, case_id: str, seconds: int, **fields: Any) -> dict[str, Any]:
    """A row as `records` prints it under --min-coverage 0.85: refund-method not cited."""
    return {
        "event": "evidence_coverage.scored",
        "case_id": case_id,
        "input_hash": input_hash,
        "contract_version": "support-faq/2026-10",
        "metric_version": METRIC_VERSION,
        "ragas_version": RAGAS_VERSION,
        "worker_version": "0.1.0",
        # The attempts here name no grader (as those stored before issue 26).
        "grader_name": None,
        "grader_version": None,
        "grader_model": None,
        "value": 2 / 3,
        "reason": factories.TWO_THIRDS_REASON,
        "status": "fail",
        "policy_group": "default",
        "policy_version": "cli:0.85",
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
        "task_id": f"task-{case_id}",
        "recorded_at": f"2026-12-01T12:00:{seconds:02d}Z",
        **fields,
    }


ROWS = [
    row(H1, "refund-001", 10),
    row(
        H2,
        "refund-002",
        20,
        value=1.0,
        reason=ALL,
        status="pass",
        owner=None,
        missing_claim_ids=[],
        findings=[],
    ),
    row(H3, "ship-001", 30, contract_version="shipping/2026-11"),
    row(
        H4,
        "refund-010",
        40,
        value=None,
        reason=UNKNOWN_REASON,
        status="invalid",
        threshold=None,
        owner="evaluation-data",
        missing_claim_ids=None,
        findings=[],
    ),
]


def test_records_are_the_first_outcomes_oldest_first(
    store_url: tuple[ResultStore, str], cli: Callable[..., Run]
) -> None:
    """One row per input hash, the first attempt's, decided under the policy given; the hit
    and the conflict add none; a summary line on stderr; exit 0."""
    store, url = store_url
    fill(store)

    run = cli("records", "--store", url, *POLICY)

    assert (run.code, run.lines) == (0, ROWS)
    assert run.err == (
        "records: 4 rows of 4 first outcomes read; policy cli:0.85"
        f" (store {describe(store, url)})\n"
    )


@pytest.mark.parametrize(
    ("filters", "cases"),
    [
        (["--contract", "shipping/2026-11"], ["ship-001"]),
        (["--owner", "product"], ["refund-001", "ship-001"]),
        (["--owner", "evaluation-data"], ["refund-010"]),
        (["--status", "pass"], ["refund-002"]),
        (["--status", "fail", "--contract", "support-faq/2026-10"], ["refund-001"]),
        (["--finding", "not_cited"], ["refund-001", "ship-001"]),
        (["--case-prefix", "refund-0"], ["refund-001", "refund-002", "refund-010"]),
        (["--since", "2026-12-01T12:00:20Z"], ["refund-002", "ship-001", "refund-010"]),
        (["--until", "2026-12-01T12:00:20Z"], ["refund-001"]),
        (
            ["--since", "2026-12-01T12:00:20", "--until", "2026-12-01T12:00:40"],
            ["refund-002", "ship-001"],
        ),
        (["--since", "2026-12-02"], []),
    ],
)
def test_filters_select_rows(
    store_url: tuple[ResultStore, str],
    cli: Callable[..., Run],
    filters: list[str],
    cases: list[str],
) -> None:
    """Each filter, and two combined; a time without an offset is UTC; none matching is
    still exit 0."""
    store, url = store_url
    fill(store)

    run = cli("records", "--store", url, *POLICY, *filters)

    assert (run.code, [line["case_id"] for line in run.lines]) == (0, cases)


def test_csv_is_a_header_and_one_line_per_row(
    store_url: tuple[ResultStore, str], cli: Callable[..., Run]
) -> None:
    """The record fields as columns; null empty; the lists as JSON text, quoted."""
    store, url = store_url
    fill(store)

    run = cli("records", "--store", url, *POLICY, "--format", "csv", "--case-prefix", "refund-01")

    assert run.code == 0
    assert run.out.splitlines() == [
        "event,case_id,input_hash,contract_version,metric_version,ragas_version,"
        "worker_version,grader_name,grader_version,grader_model,value,reason,status,policy_group,policy_version,threshold,owner,cache,"
        "missing_claim_ids,findings,contract_drift,task_id,recorded_at",
        f"evidence_coverage.scored,refund-010,{H4},support-faq/2026-10,{METRIC_VERSION},"
        f"{RAGAS_VERSION},0.1.0,,,,,{UNKNOWN_REASON},invalid,default,cli:0.85,,evaluation-data,"
        "miss,,[],false,task-refund-010,2026-12-01T12:00:40Z",
    ]


def test_without_a_policy_rows_are_report_only(
    store_url: tuple[ResultStore, str], cli: Callable[..., Run]
) -> None:
    """No --policy and none in the environment: valid rows are `scored`, with no owner."""
    store, url = store_url
    fill(store)

    run = cli("records", "--store", url, "--case-prefix", "refund-001")

    assert run.lines == [
        row(H1, "refund-001", 10, status="scored", policy_version=None, threshold=None, owner=None)
    ]
    assert run.err == (
        "records: 1 row of 4 first outcomes read; report-only (no policy)"
        f" (store {describe(store, url)})\n"
    )


def test_report_of_the_store_is_the_report_of_its_records(
    store_url: tuple[ResultStore, str], cli: Callable[..., Run], tmp_path: Path
) -> None:
    """report --store gives what report gives for the rows `records` prints and the alert
    lines: the same aggregation, one row per input hash; the conflict's alert is counted; it
    names its store (a file's report names none)."""
    store, url = store_url
    fill(store)
    listed = cli("records", "--store", url, *POLICY)
    (alert,) = store.alerts()
    alert_line = {"event": "evidence_coverage.nondeterminism", **alert.model_dump(mode="json")}
    records = tmp_path / "records.jsonl"
    records.write_text(listed.out + json.dumps(alert_line) + "\n")

    of_store = cli("report", "--store", url, *POLICY, "--json")
    of_file = cli("report", records, "--json")

    assert (of_store.code, of_file.code) == (0, 0)
    report, expected = json.loads(of_store.out), json.loads(of_file.out)
    assert report["source"] != expected["source"]
    assert (report["store"], expected["store"]) == (url, None)
    assert {**report, "source": None, "store": None} == {**expected, "source": None}
    assert (report["records"], report["nondeterminism_alerts"]) == (4, 1)
    groups = {
        (version["contract_version"], group["policy_group"]): group["statuses"]
        for version in report["contract_versions"]
        for group in version["groups"]
    }
    assert groups == {
        ("shipping/2026-11", "default"): {"pass": 0, "fail": 1, "invalid": 0, "scored": 0},
        ("support-faq/2026-10", "default"): {"pass": 1, "fail": 1, "invalid": 1, "scored": 0},
    }
