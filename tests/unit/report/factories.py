"""Record lines as `score` and the worker write them, and the lookups the report tests
share: built here once, for aggregation, the command, its HTML and its days."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import ROOT
from worker.report.aggregate import GroupReport, Report, VersionReport, build_report

PREFIX = "Error executing metric evidence_coverage: "
FAQ, PAYMENTS = "support-faq/2026-10", "payments-disclosures/2026-11"


def record(**overrides: Any) -> dict[str, Any]:
    """A record line as score and the worker emit it: a passing default-group row."""
    return {
        "timestamp": "2026-12-02T18:15:50.505055Z",
        "level": "info",
        "event": "evidence_coverage.scored",
        "case_id": "case-1",
        "input_hash": "a" * 64,
        "contract_version": FAQ,
        "metric_version": "evidence_coverage/1",
        "ragas_version": "0.4.3",
        "worker_version": "0.1.0",
        "value": 1.0,
        "reason": "supported=3; required=3; missing=none",
        "status": "pass",
        "policy_group": "default",
        "policy_version": "2026-12-01",
        "threshold": 0.85,
        "blocking": True,
        "owner": None,
        "cache": "miss",
        "missing_claim_ids": [],
        "findings": [],
        "contract_drift": False,
        **overrides,
    }


def invalid(
    reason: str = "required_claim_ids must not be empty", **overrides: Any
) -> dict[str, Any]:
    """A metric-invalid record: no value, owned by evaluation-data."""
    fields = {"value": None, "status": "invalid", "owner": "evaluation-data"}
    fields |= {"missing_claim_ids": None, "threshold": None}
    return record(reason=PREFIX + reason, **{**fields, **overrides})


def rejected(**overrides: Any) -> dict[str, Any]:
    """A schema-rejected record: never reached the metric, so no contract version or group."""
    return record(
        event="evidence_coverage.rejected",
        input_hash=None,
        contract_version=None,
        policy_group=None,
        value=None,
        reason="schema: answer: Field required",
        status="invalid",
        threshold=None,
        blocking=None,
        owner="evaluation-data",
        cache=None,
        missing_claim_ids=None,
        **overrides,
    )


def alert(input_hash: str) -> dict[str, Any]:
    """A nondeterminism alert line (only the fields the report reads matter)."""
    return {"level": "error", "event": "evidence_coverage.nondeterminism", "input_hash": input_hash}


def lines(*rows: dict[str, Any] | str) -> list[tuple[int, bytes]]:
    """Number rows as read_jsonl does; dicts are JSON-encoded, strings kept as they are."""
    return [
        (number, (row if isinstance(row, str) else json.dumps(row)).encode())
        for number, row in enumerate(rows, start=1)
    ]


def report_of(*rows: dict[str, Any] | str) -> Report:
    return build_report(lines(*rows), source="records.jsonl")


def version(report: Report, contract_version: str | None) -> VersionReport:
    (found,) = [v for v in report.contract_versions if v.contract_version == contract_version]
    return found


def group(report: Report, contract_version: str | None, policy_group: str | None) -> GroupReport:
    (found,) = [
        g for g in version(report, contract_version).groups if g.policy_group == policy_group
    ]
    return found


# Records written before triage: no missing_claim_ids, no findings.
OLD_RECORDS = ROOT / "tests" / "fixtures" / "store-28e2bf7" / "records.jsonl"
SPARSE = "coverage takes at most 3 values here: a pass/fail rule with the missing IDs says more"
FINDING_OWNERS = {
    "not_cited": "product",
    "evidence_not_retrieved": "retrieval",
    "cited_span_invalid": "attribution",
    "supported_without_citation": "attribution",
}


def finding(claim_id: str, name: str) -> dict[str, Any]:
    """A finding as records carry it."""
    return {
        "claim_id": claim_id,
        "finding": name,
        "owner": FINDING_OWNERS[name],
        "document_ids": ["kb-1"],
    }


def failed(missing: list[str], *findings: tuple[str, str], **overrides: Any) -> dict[str, Any]:
    """A failed row missing `missing`, with (claim_id, finding) pairs as its findings."""
    return record(
        value=0.5,
        status="fail",
        reason="supported=3; required=6; missing=" + ",".join(sorted(missing)),
        owner="product",
        missing_claim_ids=sorted(missing),
        findings=[finding(claim_id, name) for claim_id, name in findings],
        **overrides,
    )


def drift_alert(input_hash: str, contract_version: str = FAQ) -> dict[str, Any]:
    """A contract_drift alert line (only the fields the report reads matter)."""
    return {
        "level": "error",
        "event": "evidence_coverage.contract_drift",
        "kind": "contract_drift",
        "case_id": "case-1",
        "contract_version": contract_version,
        "input_hash": input_hash,
    }


def notes_of(text: str, group_name: str) -> list[str]:
    """The notes the text report gives under `group_name`, without their indent and name."""
    prefix = f"  {group_name}: "
    return [line.removeprefix(prefix) for line in text.splitlines() if line.startswith(prefix)]
