"""The three near-misses of issue 13 (a parser rollout, contract drift, a moved threshold) and
every other SPEC §9 finding, from contracts/examples/triage-rows.jsonl: through a real Celery
worker on a real Redis, through `score` on SQLite and through `gate --baseline-policy`, each
row ending with the owner and the findings a person would act on, and `explain` printing what
docs/triage.md's "Why did this row fail?" shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from contracts.record_models import CONTRACT_DRIFT, SCORED
from tests.conftest import EXAMPLES, ROOT
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import STORE_URL, Worker, send_scores

pytestmark = pytest.mark.integration

start_worker = harness.start_worker
publisher = harness.publisher
queue = harness.queue

ROWS = EXAMPLES / "triage-rows.jsonl"
POLICY = EXAMPLES / "policy.toml"
BASELINE = EXAMPLES / "policy-2026-11.toml"
CONSOLE_SCRIPT = Path(sys.executable).parent / "evidence-worker"

# (case ID, status, owner, contract_drift, [(claim, finding, document IDs)]) per row, in file
# order, under policy 2026-12-01.
EXPECTED: list[tuple[str, str, str | None, bool, list[tuple[str, str, list[str]]]]] = [
    (
        "parser-rollout-101",
        "fail",
        "attribution",
        False,
        [
            ("refund-method", "cited_document_not_retrieved", ["policy/returns#method"]),
            ("refund-window", "cited_document_not_retrieved", ["policy/returns#window"]),
            ("support-channel", "cited_document_not_retrieved", ["help/contact#chat"]),
        ],
    ),
    (
        "retrieval-miss-102",
        "fail",
        "retrieval",
        False,
        [("transfer-limit", "evidence_not_retrieved", ["limits/transfers#daily"])],
    ),
    (
        "answer-ignored-103",
        "fail",
        "product",
        False,
        [("shipping-cost", "not_cited", ["shipping/rates#standard"])],
    ),
    ("refund-drift-104", "pass", None, False, []),
    (
        "refund-drift-104",
        "fail",
        "evaluation-data",
        True,
        [("refund-exceptions", "not_cited", []), ("refund-receipt", "not_cited", [])],
    ),
    (
        "span-invalid-105",
        "fail",
        "attribution",
        False,
        [("refund-method", "cited_span_invalid", ["policy/returns#method"])],
    ),
    (
        "cited-not-supported-106",
        "fail",
        "attribution",
        False,
        [("refund-method", "cited_not_supported", ["policy/returns#method"])],
    ),
    (
        "no-citations-107",
        "fail",
        "attribution",
        False,
        [("refund-method", "attribution_artifact_missing", [])],
    ),
    (
        "stray-citations-108",
        "pass",
        None,
        False,
        [
            ("refund-speed", "citation_unknown_claim", ["policy/returns#method"]),
            ("refund-method", "supported_without_citation", []),
        ],
    ),
    (
        "threshold-moved-109",
        "fail",
        "product",
        False,
        [("dispute-window", "not_cited", ["help/disputes#window"])],
    ),
]


def documented_explain() -> str:
    """docs/triage.md's output of `explain --case parser-rollout-101`."""
    page = (ROOT / "docs" / "triage.md").read_text("utf-8")
    start = page.index("```text\ncase: parser-rollout-101\n") + len("```text\n")
    return page[start : page.index("```", start)]


def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in ROWS.read_text("utf-8").splitlines()]


def triaged(records: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            record["case_id"],
            record["status"],
            record["owner"],
            record["contract_drift"],
            [(f["claim_id"], f["finding"], f["document_ids"]) for f in record["findings"]],
        )
        for record in records
    ]


def console(
    *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it, with no EVIDENCE_* from the machine."""
    clean = {key: value for key, value in os.environ.items() if not key.startswith("EVIDENCE_")}
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *map(str, args)],
        cwd=ROOT,
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_score_on_sqlite_names_each_rows_owner(tmp_path: Path) -> None:
    """`score` on the examples: every finding and owner, the drift alert once, exit 2; then
    `alerts --kind contract_drift` lists exactly that drift."""
    store = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    run = console("score", ROWS, "--policy", POLICY, "--store", store)

    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert triaged([line for line in lines if line["event"] == SCORED]) == EXPECTED
    (drift,) = [line for line in lines if line["event"] == CONTRACT_DRIFT]
    assert (drift["case_id"], drift["contract_version"]) == (
        "refund-drift-104",
        "support-faq/2026-10",
    )
    assert (drift["added_claim_ids"], drift["removed_claim_ids"]) == (
        ["refund-exceptions", "refund-receipt"],
        [],
    )
    assert run.returncode == 2, run.stderr
    assert "1 row with contract drift (1 new alert)" in run.stderr

    alerts = console("alerts", "--kind", "contract_drift", "--store", store)
    listed = [json.loads(line) for line in alerts.stdout.splitlines()]
    assert [(a["kind"], a["case_id"], a["added_claim_ids"]) for a in listed] == [
        ("contract_drift", "refund-drift-104", ["refund-exceptions", "refund-receipt"])
    ]
    assert alerts.returncode == 2, alerts.stderr

    explained = console(
        "explain", "--case", "parser-rollout-101", "--policy", POLICY, "--store", store
    )
    assert (explained.stdout, explained.returncode) == (documented_explain(), 1), explained.stderr

    drifted = console("explain", "--case", "refund-drift-104", "--policy", POLICY, "--store", store)
    assert "owner: evaluation-data (contract drift: case refund-drift-104 had another" in (
        drifted.stdout
    )
    assert drifted.stdout.endswith(
        "case refund-drift-104 has 1 older input hash: evidence-worker show --case "
        "refund-drift-104 lists them all\n"
    )
    assert drifted.returncode == 2, drifted.stderr

    again = console("score", ROWS, "--policy", POLICY, "--store", store)
    assert [json.loads(line)["event"] for line in again.stdout.splitlines()].count(
        CONTRACT_DRIFT
    ) == 0  # a known drift is not alerted twice
    assert again.returncode == 2  # and the run still met it


def test_worker_on_redis_names_each_rows_owner(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    key_prefix: str,
) -> None:
    """The same rows through a real worker (one process, so in file order) on a real Redis:
    the same owners and findings, one ERROR drift line, the drift in `alerts --kind`."""
    worker = start_worker(queue, pool="solo", env={"EVIDENCE_POLICY_FILE": str(POLICY)})
    worker.wait_ready()
    send_scores(publisher(), queue, rows())

    records = worker.wait_for(len(EXPECTED), events=[SCORED])
    assert triaged(records) == EXPECTED
    (drift,) = worker.events(CONTRACT_DRIFT)
    assert (drift["case_id"], drift["level"]) == ("refund-drift-104", "error")

    alerts = console(
        "alerts",
        "--kind",
        "contract_drift",
        "--store",
        STORE_URL,
        env={"EVIDENCE_KEY_PREFIX": key_prefix},
    )
    listed = [json.loads(line) for line in alerts.stdout.splitlines()]
    assert [(a["kind"], a["case_id"]) for a in listed] == [("contract_drift", "refund-drift-104")]

    explained = console(
        "explain",
        "--case",
        "parser-rollout-101",
        "--store",
        STORE_URL,
        env={"EVIDENCE_KEY_PREFIX": key_prefix, "EVIDENCE_POLICY_FILE": str(POLICY)},
    )  # the policy from the environment, as the worker had it
    assert (explained.stdout, explained.returncode) == (documented_explain(), 1), explained.stderr


def test_gate_with_the_baseline_policy_names_the_release_rule() -> None:
    """Only threshold-moved-109 changes status between the two example policies: 0.8 passed
    2026-11-01's 0.75 and fails 2026-12-01's 0.85, so its owner is the release rule; every
    other row has score's owner and findings."""
    run = console("gate", ROWS, "--policy", POLICY, "--baseline-policy", BASELINE)

    lines = [json.loads(line) for line in run.stdout.splitlines()]
    changed = [
        (line["case_id"], line["owner"], line["policy_change"])
        for line in lines
        if "policy_change" in line
    ]
    assert changed == [
        (
            "threshold-moved-109",
            "release-rule",
            {
                "baseline_version": "2026-11-01",
                "baseline_status": "pass",
                "baseline_threshold": 0.75,
            },
        )
    ]
    # gate and score name the same owner and findings for every row (the drift seen within
    # gate's input); only the moved threshold's owner is the release rule's, with a baseline.
    moved = {"threshold-moved-109": "release-rule"}
    assert triaged(lines) == [
        (case, status, moved.get(case, owner), drift, found)
        for case, status, owner, drift, found in EXPECTED
    ]
    assert run.returncode == 2  # contract drift, as score exits for it
    assert run.stderr.endswith(
        "1 row with contract drift; policy 2026-12-01; "
        "1 row changed status against baseline policy 2026-11-01; exit 2\n"
    ), run.stderr
