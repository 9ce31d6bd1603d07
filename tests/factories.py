"""Values shared by the test modules: attempts, ledger entries, the records messages produce
and the Procfile's command lines."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts import METRIC_VERSION, RAGAS_VERSION, Attempt, AttributionResult, input_hash
from tests.conftest import FIXED_NOW, ROOT
from worker.pipeline.scoring import WORKER_VERSION
from worker.stores import LedgerEntry

TWO_THIRDS_REASON = "supported=2; required=3; missing=refund-method"
ONE_THIRD_REASON = "supported=1; required=3; missing=refund-method,support-channel"
# The base message has no citations: its one missing claim cannot be told apart (SPEC §9).
NO_ARTIFACT: dict[str, Any] = {
    "claim_id": "refund-method",
    "finding": "attribution_artifact_missing",
    "owner": "attribution",
    "document_ids": [],
    "evidence_retrieved": None,
}
REQUIRED = ["refund-window", "refund-method", "support-channel"]


def attempt(**overrides: Any) -> Attempt:
    """A stored attempt of the base message (2 of 3 claims supported), with overrides."""
    fields: dict[str, Any] = {
        "case_id": "refund-001",
        "task_id": "task-1",
        "required_claim_ids": REQUIRED,
        "supported_claim_ids": ["refund-window", "support-channel"],
        "value": 2 / 3,
        "reason": TWO_THIRDS_REASON,
        "recorded_at": FIXED_NOW,
        "metric_version": METRIC_VERSION,
        "ragas_version": RAGAS_VERSION,
        "worker_version": WORKER_VERSION,
    }
    return Attempt(**{**fields, **overrides})


def expected_scored(
    message: AttributionResult | Mapping[str, Any], **fields: Any
) -> dict[str, Any]:
    """The record fields of `message` scored on a miss in report-only mode (2 of 3 claims);
    an invalid one (status="invalid") has no missing claim IDs and no findings."""
    model = (
        message
        if isinstance(message, AttributionResult)
        else AttributionResult.model_validate(message)
    )
    return {
        "event": "evidence_coverage.scored",
        "case_id": model.case_id,
        "input_hash": input_hash(model),
        "contract_version": model.contract_version,
        "metric_version": METRIC_VERSION,
        "ragas_version": RAGAS_VERSION,
        "worker_version": WORKER_VERSION,
        "grader_name": model.grader.name,
        "grader_version": model.grader.version,
        "grader_model": model.grader.model,
        "value": 2 / 3,
        "reason": TWO_THIRDS_REASON,
        "status": "scored",
        "policy_group": "default",
        "policy_version": None,
        "threshold": None,
        "blocking": True,
        "owner": None,
        "cache": "miss",
        "missing_claim_ids": None if fields.get("status") == "invalid" else ["refund-method"],
        "findings": [] if fields.get("status") == "invalid" else [NO_ARTIFACT],
        "contract_drift": False,
        "observed_value": None,
        "observed_reason": None,
        "task_id": None,
        "trace_id": None,
        "produced_at": None,
        "recorded_at": FIXED_NOW,
        "line": None,
        "warnings": [],
        **fields,
    }


def expected_rejected(reason: str, **fields: Any) -> dict[str, Any]:
    """The record fields of a message rejected before scoring with `reason`."""
    return {
        "event": "evidence_coverage.rejected",
        "case_id": None,
        "input_hash": None,
        "contract_version": None,
        "metric_version": METRIC_VERSION,
        "ragas_version": RAGAS_VERSION,
        "worker_version": WORKER_VERSION,
        "grader_name": None,
        "grader_version": None,
        "grader_model": None,
        "value": None,
        "reason": reason,
        "status": "invalid",
        "policy_group": None,
        "policy_version": None,
        "threshold": None,
        "blocking": None,
        "owner": "evaluation-data",
        "cache": None,
        "missing_claim_ids": None,
        "findings": [],
        "contract_drift": False,
        "observed_value": None,
        "observed_reason": None,
        "task_id": None,
        "trace_id": None,
        "produced_at": None,
        "recorded_at": FIXED_NOW,
        "line": None,
        "warnings": [],
        **fields,
    }


def ledger_entry(
    task_id: str, position: int = 0, *, age: timedelta = timedelta(0), **overrides: Any
) -> LedgerEntry:
    """A publish ledger entry published `age` ago (by the real clock: the stores forget
    entries by it), its case ID and body named after its task and position."""
    case_id = f"case-{task_id}-{position}"
    fields: dict[str, Any] = {
        "task_id": task_id,
        "position": position,
        "case_id": case_id,
        "input_hash": "ab" * 32,
        "published_at": datetime.now(UTC) - age,
        "body": f'{{"case_id": "{case_id}"}}',
    }
    return LedgerEntry(**{**fields, **overrides})


def procfile(name: str) -> list[str]:
    """A Procfile line's command as argv."""
    for line in (ROOT / "Procfile").read_text(encoding="utf-8").splitlines():
        process, _, command = line.partition(":")
        if process.strip() == name:
            return shlex.split(command)
    raise AssertionError(f"Procfile has no {name} line")


def procfile_worker() -> list[str]:
    """The Procfile's worker command as argv."""
    return procfile("worker")


def age_ledger(store: Any, by: timedelta) -> None:
    """Move every open ledger entry's noted time `by` into the past, as if the store's clock
    had run on: a store stamps entries by its own clock (Redis TIME, SQLite's machine), which
    a test cannot set."""
    from worker.stores.sqlite.sqlite_store import SQLiteStore
    from worker.stores.sqlite.sqlite_transaction import immediate

    store = getattr(store, "inner", store)  # a DurableStore's
    if isinstance(store, SQLiteStore):
        with immediate(store._db) as db:
            db.execute("UPDATE ledger SET published_at = published_at - ?", (by.total_seconds(),))
        return
    shift = by.total_seconds() * 1000
    for ledger in store.keys.ledgers():
        members = store.client.zrange(ledger, 0, -1, withscores=True)
        if members:
            store.client.zadd(ledger, {member: score - shift for member, score in members})


def publisher_clock(monkeypatch: Any, offset: timedelta) -> datetime:
    """Set this process's clock, as the package reads it (`datetime.now` in every module of
    `worker` and `contracts`), `offset` off: a publisher whose clock is wrong. The stores'
    clocks are not touched: Redis's TIME is the server's, and the SQLite ledger reads
    time.time(), standing for the machine the store's file is on. Returns the skewed now."""
    import sys

    real = datetime

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Skewed:
            moment = real.now(tz) + offset
            return cls.fromtimestamp(moment.timestamp(), moment.tzinfo)

    for name, module in list(sys.modules.items()):
        if (
            name.split(".")[0] in {"worker", "contracts"}
            and getattr(module, "datetime", None) is real
        ):
            monkeypatch.setattr(module, "datetime", Skewed)
    return Skewed.now(UTC)


# worker/cli/progress.py: off a terminal, a command prints this line every 2 s of wall clock,
# so a loaded machine adds it to a subprocess's stderr; the progress tests cover it with a
# fake clock.
PROGRESS_LINE = re.compile(r"[a-z-]+: [\d,]+ lines? \([\d,]+/s\)(, \d+%, ETA \d+:\d\d)?")


def without_progress(stderr: str) -> list[str]:
    """stderr's lines, less the progress lines (whose number depends on the machine's speed)."""
    return [line for line in stderr.splitlines() if not PROGRESS_LINE.fullmatch(line)]
