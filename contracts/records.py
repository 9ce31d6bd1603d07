"""What the worker emits and keeps: per-message records, attempts and alerts (SPEC §5-6)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.outcomes import CacheOutcome, Outcome, Owner, Status

SCORED = "evidence_coverage.scored"
REJECTED = "evidence_coverage.rejected"
NONDETERMINISM = "evidence_coverage.nondeterminism"


class Record(BaseModel):
    """Base for stored and emitted records; unknown fields are rejected when read back."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Attempt(Record):
    """One scoring of one message, kept whole so a reviewer sees the exact lists behind it."""

    case_id: str | None
    task_id: str | None
    required_claim_ids: list[str]
    supported_claim_ids: list[str]
    value: float | None
    reason: str
    recorded_at: datetime
    metric_version: str
    ragas_version: str
    worker_version: str
    redelivered: bool = False

    @property
    def outcome(self) -> Outcome:
        return Outcome(value=self.value, reason=self.reason)


class Alert(Record):
    """A nondeterminism alert: the same input hash gave two outcomes; the first is kept."""

    input_hash: str
    decision: Literal["kept_first"] = "kept_first"
    first: Attempt
    observed: Attempt
    raised_at: datetime


class ScoreRecord(Record):
    """Everything one message's log line says, before the logger stamps time and level."""

    event: Literal["evidence_coverage.scored", "evidence_coverage.rejected"]
    case_id: str | None
    input_hash: str | None
    contract_version: str | None
    metric_version: str
    ragas_version: str
    worker_version: str
    value: float | None
    reason: str
    status: Status
    policy_group: str | None
    policy_version: str | None
    threshold: float | None
    blocking: bool | None
    owner: Owner | None
    cache: CacheOutcome | None
    observed_value: float | None = None
    observed_reason: str | None = None
    task_id: str | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    trace_id: str | None = None
    line: int | None = Field(default=None, ge=1, description="1-based input line (CLI only)")

    @property
    def log_level(self) -> Literal["info", "warning"]:
        return "info" if self.event == SCORED and self.cache != "conflict" else "warning"


class CoverageRecord(ScoreRecord):
    """The published shape of the one JSON line per message (events scored and rejected).

    Extra fields are allowed: the worker binds task context (task_name, retries, ...).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    timestamp: datetime
    level: Literal["info", "warning"]


class AlertRecord(Alert):
    """The published shape of the ERROR line emitted beside a conflicting attempt's record."""

    model_config = ConfigDict(extra="allow", frozen=True)

    timestamp: datetime
    level: Literal["error"]
    event: Literal["evidence_coverage.nondeterminism"]


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every published JSON Schema, by file name under contracts/schemas/."""
    from contracts.messages import AttributionResult, ReleaseRow

    models: dict[str, type[BaseModel]] = {
        "attribution-result.schema.json": AttributionResult,
        "release-row.schema.json": ReleaseRow,
        "coverage-record.schema.json": CoverageRecord,
        "alert-record.schema.json": AlertRecord,
    }
    return {name: model.model_json_schema() for name, model in models.items()}
