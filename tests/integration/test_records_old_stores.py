"""`records` and `report --store` read stores written before triage and before outcomes kept
their time (tests/fixtures/store-28e2bf7; its Redis outcomes have no `since` field): one row
per input hash, oldest first, the same on SQLite and Redis."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.conftest import Run
from tests.integration.test_old_stores import POLICY, old_store

__all__ = ["old_store"]  # the fixture, shared with test_old_stores

# All seven were recorded in one batch, at one time: ordered by input hash. Failing rows kept
# no findings (recorded before triage): their owner is not known (null), as `explain` says.
ROWS = [
    ("transfer-fee-008", "pass", None, "9c61d6ec"),
    ("shipping-020", "fail", None, "b6989882"),
    ("transfer-fee-007", "fail", None, "c148000d"),
    ("warranty-011", "invalid", "evaluation-data", "c5442a74"),
    ("warranty-012", "invalid", "evaluation-data", "cbf6b772"),
    ("refund-002", "fail", None, "f4a60bff"),
    ("refund-001", "pass", None, "f514f786"),
]


def test_records_reads_an_old_store(cli: Callable[..., Run], old_store: str) -> None:
    """Every first outcome once, decided under the example policy; no triage fields kept."""
    run = cli("records", "--store", old_store, "--policy", POLICY)

    assert run.code == 0, run.err
    assert [(r["case_id"], r["status"], r["owner"], r["input_hash"][:8]) for r in run.lines] == ROWS
    assert len({r["recorded_at"] for r in run.lines}) == 1  # one batch, one time
    assert {r["missing_claim_ids"] for r in run.lines} == {None}
    assert (
        run.err
        == f"records: 7 rows of 7 first outcomes read; policy 2026-12-01 (store {old_store})\n"
    )


def test_report_of_an_old_store_counts_its_rows_without_triage(
    cli: Callable[..., Run], old_store: str
) -> None:
    """Seven rows, four alerts kept; valid rows that kept no missing IDs are counted so."""
    run = cli("report", "--store", old_store, "--policy", POLICY, "--json")

    assert run.code == 0, run.err
    report = json.loads(run.out)
    assert (report["records"], report["nondeterminism_alerts"]) == (7, 4)
    groups = [g for version in report["contract_versions"] for g in version["groups"]]
    assert sum(g["rows_without_triage"] for g in groups) == 5
