"""`compare --store`, `calibrate --store` and `records --format csv` on every store a URL names:
SQLite, a real Redis and the Redis Cluster (SPEC §11, §12; issue 37's safe CSV). The store is
filled through its own record() with fixed attempts, so every count is exact."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests import factories
from tests.conftest import FIXED_NOW, Run
from tests.integration import store_factories
from worker.audit.safe_csv import restored
from worker.stores import ResultStore

pytestmark = pytest.mark.integration

REQUIRED = ["c1", "c2", "c3", "c4"]
POLICY = ("--min-coverage", "0.75")
UNKNOWN_REASON = "supported_claim_ids contains unknown IDs: old-c1"
INJECTIONS = ['=HYPERLINK("x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\t=1+1", "\r=1"]


def attempt(seconds: int, case_id: str, supported: int | None) -> Any:
    """`case_id` with `supported` of 4 claims supported (None: invalid), `seconds` in."""
    if supported is None:
        fields: dict[str, Any] = {
            "value": None,
            "reason": UNKNOWN_REASON,
            "supported_claim_ids": ["old-c1"],
            "findings": [],
        }
    else:
        missing = REQUIRED[supported:]
        fields = {
            "value": supported / 4,
            "reason": f"supported={supported}; required=4; missing={','.join(missing) or 'none'}",
            "supported_claim_ids": REQUIRED[:supported],
            "missing_claim_ids": missing,
            "findings": [],
        }
    return factories.attempt(
        case_id=case_id,
        task_id=f"task-{case_id}-{seconds}",
        contract_version="support-faq/2026-10",
        required_claim_ids=REQUIRED,
        policy_group="default",
        recorded_at=FIXED_NOW + timedelta(seconds=seconds),
        **fields,
    )


store_url = store_factories.store_url


def fill(store: ResultStore) -> None:
    """One first outcome per class, a case scored twice under two hashes, and a case whose
    inputs repeat an earlier case's (a hit: no first outcome of its own)."""
    for number, (seconds, case_id, supported) in enumerate(
        [
            (10, "rescored", 1),  # its newer hash (below) stands
            (20, "both-pass", 4),
            (30, "both-fail", 1),
            (40, "old-pass", 2),
            (50, "old-fail", 3),
            (60, "invalid", None),
            (70, "new-only", 4),
            (80, "rescored", 4),
        ],
        start=1,
    ):
        store.record(f"{number:064x}", attempt(seconds, case_id, supported), now=FIXED_NOW)
    store.record(f"{2:064x}", attempt(90, "hit-case", 4), now=FIXED_NOW)  # both-pass's inputs


LEGACY = [
    {"case_id": "rescored", "score": 0.9},
    {"case_id": "both-pass", "score": 0.9},
    {"case_id": "both-fail", "score": 0.1},
    {"case_id": "old-pass", "score": 0.8},
    {"case_id": "old-fail", "score": 0.6},
    {"case_id": "invalid", "score": 0.9},
    {"case_id": "old-only", "score": 0.5},
    {"case_id": "hit-case", "score": 0.95},
]


def test_compare_counts_every_class_over_the_store(
    store_url: tuple[ResultStore, str], cli: Callable[..., Run], tmp_path: Path
) -> None:
    """The store's first outcomes (a case's newest hash standing; a case only the case index
    names read from its hash) beside the legacy file: the exact count of every class, the
    store named on stderr, exit 1."""
    store, url = store_url
    fill(store)
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_text("".join(json.dumps(row) + "\n" for row in LEGACY))

    run = cli("compare", "--store", url, "--legacy", legacy, "--legacy-threshold", "0.7", *POLICY)

    assert run.code == 1
    assert [(line["case_id"], line["class"]) for line in run.lines] == [
        ("old-pass", "legacy_pass_new_fail"),
        ("old-fail", "legacy_fail_new_pass"),
        ("invalid", "new_invalid"),
        ("new-only", "unmatched"),
        ("old-only", "unmatched"),
    ]
    summary, note = run.err.splitlines()
    assert summary.startswith(
        "compare: 9 rows: both_pass 3, both_fail 1, legacy_pass_new_fail 1, "
        "legacy_fail_new_pass 1, new_invalid 1, unmatched 2; store redis"
        if not url.startswith("sqlite")
        else "compare: 9 rows: both_pass 3, both_fail 1, legacy_pass_new_fail 1, "
        f"legacy_fail_new_pass 1, new_invalid 1, unmatched 2; store {url}"
    )
    assert note == (
        "compare: 1 invalid row counted apart: a threshold chosen before they are repaired is "
        "chosen on the wrong population (owner evaluation-data)"
    )


def test_calibrate_writes_the_sheet_from_the_store(
    store_url: tuple[ResultStore, str], cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Candidates 0.5 and 0.75, band 0.25: the rows of each band on their side, each with the
    explain command naming this store; the same call twice, the same bytes."""
    store, url = store_url
    fill(store)
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    argv = ("calibrate", "--store", url, *POLICY, "--candidates", "0.5,0.75", "--band", "0.25")

    run = cli(*argv, "--sheet", first)
    cli(*argv, "--sheet", second)

    rows = list(csv.reader(io.StringIO(first.read_text(), newline="")))[1:]
    assert sorted((r[0], r[1], r[2]) for r in rows) == [
        ("0.5", "above", "old-pass"),
        ("0.5", "below", "both-fail"),
        ("0.5", "below", "rescored"),
        ("0.75", "above", "old-fail"),
        ("0.75", "below", "old-pass"),
    ]
    assert all(f" --store {url} --min-coverage 0.75" in r[11] for r in rows)
    assert first.read_bytes() == second.read_bytes()
    assert run.err.splitlines()[1].startswith("calibrate: 1 invalid row counted apart")


def test_records_csv_neutralises_formula_cells(
    store_url: tuple[ResultStore, str], cli: Callable[..., Run]
) -> None:
    """records --format csv read back with the csv module: no cell starts a formula, and the
    case IDs come back exactly once restored."""
    store, url = store_url
    for number, case_id in enumerate(INJECTIONS, start=1):
        store.record(f"{number:064x}", attempt(number, case_id, 2), now=FIXED_NOW)

    run = cli("records", "--store", url, *POLICY, "--format", "csv")

    rows = list(csv.reader(io.StringIO(run.out, newline="")))
    for row in rows:
        for cell in row:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    assert [restored(row[1]) for row in rows[1:]] == INJECTIONS
