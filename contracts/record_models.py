"""The models of what the worker emits and keeps: per-message records, attempts and alerts
(SPEC §5-6); a scored record's fields spelled once (scored_fields), and the published JSON
Schemas (json_schemas)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from contracts.messages import Citation
from contracts.outcomes import CacheOutcome, Decision, Outcome, Owner, Status
from contracts.triage import Finding, Triage, findings_of

SCORED = "evidence_coverage.scored"
REJECTED = "evidence_coverage.rejected"
NONDETERMINISM = "evidence_coverage.nondeterminism"
CONTRACT_DRIFT = "evidence_coverage.contract_drift"


_ISO_UTC: Final = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def iso_utc(moment: datetime) -> str:
    """ISO 8601 text ending in Z, as the log line's `timestamp` is written (the same digits as
    isoformat(): microseconds only when there are some); a naive time is taken as UTC.
    orjson's, since every record line writes one or two of them."""
    return orjson.dumps(moment, option=_ISO_UTC)[1:-1].decode()


def _absent(value: object) -> bool:
    """A field that only some records have (SPEC §12's review band and observation window) is
    left out when unset, not written as null: a record without them reads as it always did."""
    return value is None


class Record(BaseModel):
    """Base for stored and emitted records; unknown fields are rejected when read back."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class KeptCitation(Citation):
    """A citation as a stored attempt keeps it; `excerpt` is the cited answer span, redacted
    and cut, only with EVIDENCE_KEEP_EXCERPTS=true (and only when the span is valid)."""

    excerpt: str | None = None


class Attempt(Record):
    """One scoring of one message, kept whole so a reviewer sees the exact lists behind it.

    The triage fields (SPEC §9) are this attempt's own: its findings over its own citations,
    its owner under the worker's policy. Attempts stored before triage existed read with
    `citations`, `missing_claim_ids` and `findings` None ("not kept"), `owner` None; those
    stored before `explain` existed with `retrieved_document_ids` and `policy_group` None.
    """

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
    contract_version: str | None = None  # None in attempts stored before it was kept
    citations: list[KeptCitation] | None = None
    missing_claim_ids: list[str] | None = None
    findings: list[Finding] | None = None
    # The contexts' document IDs in rank order, each once: what `explain` says was retrieved.
    retrieved_document_ids: list[str] | None = None
    policy_group: str | None = None  # the message's: `explain` decides the row under it
    contract_drift: bool = False
    owner: Owner | None = None
    # An open observation window's previous rule (SPEC §12: `[observe]`): its version and this
    # attempt's status under it. Absent (never null) outside a window.
    previous_policy_version: str | None = Field(default=None, exclude_if=_absent)
    previous_status: Status | None = Field(default=None, exclude_if=_absent)
    # Who graded (SPEC §10): the message's grader.name, .version and .model, what `stability`
    # counts by. None in attempts stored before they were kept.
    grader_name: str | None = None
    grader_version: str | None = None
    grader_model: str | None = None
    # Triage's two inputs beyond the lists above (SPEC §9): the answer's length in code points
    # (a citation's span is checked against it) and the message's expected evidence (None:
    # none given). A store keeps them so that it need not keep missing_claim_ids and findings,
    # which are a pure function of them and the lists: an attempt read without those two
    # fields gets them derived (_derived). None in attempts stored before they were kept.
    # Storage only: never dumped (`show`, alert lines and webhooks print what they did), so a
    # store spells them itself (worker/stores/codec.py).
    answer_length: int | None = Field(default=None, exclude=True)
    expected_evidence: dict[str, list[str]] | None = Field(default=None, exclude=True)

    @property
    def outcome(self) -> Outcome:
        return Outcome(value=self.value, reason=self.reason)

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        """Read the compact form stores keep: citations as [claim ID, document ID, span start,
        span end(, excerpt)] arrays, and no missing_claim_ids and findings where the attempt
        keeps triage's inputs (answer_length): they are derived as triage derived them. Only
        stored attempts are read this way; every other Attempt is given whole."""
        if not isinstance(data, dict):
            return data
        citations = data.get("citations")
        if citations and isinstance(citations[0], list):
            data = {**data, "citations": [_citation(cited) for cited in citations]}
        if "findings" in data or data.get("answer_length") is None:
            return data
        if data.get("value") is None:  # invalid: triage names no claim
            return {**data, "missing_claim_ids": None, "findings": []}
        missing, findings = findings_of(
            data["required_claim_ids"],
            data["supported_claim_ids"],
            [KeptCitation.model_validate(cited) for cited in data.get("citations") or ()],
            retrieved_document_ids=data.get("retrieved_document_ids") or (),
            expected_evidence=data.get("expected_evidence") or {},
            answer_length=data["answer_length"],
        )
        return {**data, "missing_claim_ids": missing, "findings": findings}


def _citation(cited: list[Any]) -> dict[str, Any]:
    """A citation kept as an array (Attempt._derived), as the object it stands for."""
    claim_id, document_id, start, end, *excerpt = cited
    return {
        "claim_id": claim_id,
        "document_id": document_id,
        "answer_span": [start, end],
        "excerpt": excerpt[0] if excerpt else None,
    }


class Alert(Record):
    """A nondeterminism alert: the same input hash gave two outcomes; the first is kept.

    Raised once per (input hash, first outcome, observed outcome): the same conflict seen
    again (a re-run of a file) is recorded as an attempt, not alerted again."""

    kind: Literal["nondeterminism"] = "nondeterminism"
    input_hash: str
    decision: Literal["kept_first"] = "kept_first"
    first: Attempt
    observed: Attempt
    raised_at: datetime


class ContractDriftAlert(Record):
    """Denominator drift (SPEC §9): one (contract version, case ID), two required sets.

    The store keeps the first sorted required set of a valid row per pair; a later valid row
    with another set is scored under its own hash, marked contract_drift, and raises this
    once per (contract version, case ID, required set). `added_claim_ids` and
    `removed_claim_ids` are what the later set has over the first and lacks from it (filled
    in from the two sets when not given: the Redis script stores only the sets).
    """

    kind: Literal["contract_drift"] = "contract_drift"
    case_id: str
    contract_version: str
    first_required_claim_ids: list[str]
    required_claim_ids: list[str]
    added_claim_ids: list[str]
    removed_claim_ids: list[str]
    first_input_hash: str
    input_hash: str
    first_task_id: str | None
    task_id: str | None
    raised_at: datetime

    @model_validator(mode="before")
    @classmethod
    def _differences(cls, data: Any) -> Any:
        if isinstance(data, dict) and "added_claim_ids" not in data:
            first = set(data.get("first_required_claim_ids") or [])
            later = set(data.get("required_claim_ids") or [])
            data = {
                **data,
                "added_claim_ids": sorted(later - first),
                "removed_claim_ids": sorted(first - later),
            }
        return data


AnyAlert = Alert | ContractDriftAlert
AlertKind = Literal["nondeterminism", "contract_drift"]
ALERT_EVENTS: dict[str, str] = {"nondeterminism": NONDETERMINISM, "contract_drift": CONTRACT_DRIFT}
_ALERTS: TypeAdapter[AnyAlert] = TypeAdapter(
    Annotated[Alert | ContractDriftAlert, Field(discriminator="kind")]
)


def parse_alert(text: str | bytes) -> AnyAlert:
    """An alert as a store keeps it; one kept before alerts had kinds is a nondeterminism one."""
    data = json.loads(text)
    data.setdefault("kind", "nondeterminism")
    return _ALERTS.validate_python(data)


class ScoreRecord(Record):
    """Everything one message's log line says, before the logger stamps time and level."""

    event: Literal["evidence_coverage.scored", "evidence_coverage.rejected"]
    case_id: str | None
    input_hash: str | None
    contract_version: str | None
    metric_version: str
    ragas_version: str
    worker_version: str
    # Who graded (SPEC §10): the message's grader.name, .version and .model; None on a
    # rejected record (its grader is not trusted) and in records written before they were.
    grader_name: str | None = None
    grader_version: str | None = None
    grader_model: str | None = None
    value: float | None
    reason: str
    status: Status
    policy_group: str | None
    policy_version: str | None
    threshold: float | None
    # The group's review_band (SPEC §12): a value less than this below the threshold is
    # `review`. Absent when the group sets none.
    review_band: float | None = Field(default=None, exclude_if=_absent)
    blocking: bool | None
    owner: Owner | None
    # The previous rule of an open observation window (SPEC §12, the policy's `[observe]`):
    # its version and this row's status under it. Both absent outside a window.
    previous_policy_version: str | None = Field(default=None, exclude_if=_absent)
    previous_status: Status | None = Field(default=None, exclude_if=_absent)
    cache: CacheOutcome | None
    # SPEC §9: the missing IDs as a list (None for invalid rows), why each is missing.
    missing_claim_ids: list[str] | None = None
    findings: list[Finding] = Field(default_factory=list)
    contract_drift: bool = False
    observed_value: float | None = None
    observed_reason: str | None = None
    task_id: str | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    trace_id: str | None = None
    # When upstream produced the message (None when it does not say; a rejected message's is
    # not trusted) and when this worker recorded or rejected it, both in UTC (a message's
    # produced_at is held in UTC from validation on): `report` puts rows on days by them.
    # Both None in records written before they were kept.
    produced_at: datetime | None = None
    recorded_at: datetime | None = None
    line: int | None = Field(default=None, ge=1, description="1-based input line (CLI only)")
    # What the worker set aside without rejecting the message (a malformed trace_id, say).
    warnings: list[str] = Field(default_factory=list)

    @property
    def log_level(self) -> Literal["info", "warning"]:
        return "info" if self.event == SCORED and self.cache != "conflict" else "warning"


def scored_fields(
    case_id: str | None,
    input_hash: str,
    versions: tuple[str, str, str],
    grader: tuple[str | None, str | None, str | None],
    decision: Decision,
    *,
    owner: Owner | None,
    previous: Decision | None,
    cache: CacheOutcome,
    triage: Triage,
    contract_drift: bool,
    task_id: str | None,
    recorded_at: datetime,
    observed: Outcome | None = None,
    trace: tuple[str | None, str | None] = (None, None),
    produced_at: datetime | None = None,
    line: int | None = None,
) -> dict[str, Any]:
    """A scored record's fields, in ScoreRecord's order (the log line's): the one place that
    spells them, for the worker's record of a message (contracts.trusted makes it the
    ScoreRecord) and for a record row read back from a store (the fields a store keeps).

    `versions`: the metric's, Ragas's and the worker's; `grader`: its name, version and
    model. `decision` decides and `triage` gives the missing IDs and findings; `owner` is
    given, as a drifted contract's write moves it (row_owner()). `previous`: the decision
    under an open observation window's previous rule (SPEC §12). `observed`: a repeat's own
    outcome (a hit or a conflict), None for the first. `trace`: the message's trace_id and the
    warning that set a malformed one aside (checked_trace_id()). A new dict each call, its
    lists its own.

    Few enough arguments for CPython to pass them on the stack, once per message: a call of
    more keywords than that is compiled to build a dict of them first."""
    metric_version, ragas_version, worker_version = versions
    grader_name, grader_version, grader_model = grader
    trace_id, trace_warning = trace
    previous_version = previous_status = None
    if previous is not None:
        previous_version, previous_status = previous.policy_version, previous.status
    return {
        "event": SCORED,
        "case_id": case_id,
        "input_hash": input_hash,
        "contract_version": decision.contract_version,
        "metric_version": metric_version,
        "ragas_version": ragas_version,
        "worker_version": worker_version,
        "grader_name": grader_name,
        "grader_version": grader_version,
        "grader_model": grader_model,
        "value": decision.value,
        "reason": decision.reason,
        "status": decision.status,
        "policy_group": decision.policy_group,
        "policy_version": decision.policy_version,
        "threshold": decision.threshold,
        "review_band": decision.review_band,
        "blocking": decision.blocking,
        "owner": owner,
        "previous_policy_version": previous_version,
        "previous_status": previous_status,
        "cache": cache,
        "missing_claim_ids": None
        if triage.missing_claim_ids is None
        else list(triage.missing_claim_ids),
        "findings": list(triage.findings),
        "contract_drift": contract_drift,
        "observed_value": None if observed is None else observed.value,
        "observed_reason": None if observed is None else observed.reason,
        "task_id": task_id,
        "duration_ms": None,
        "trace_id": trace_id,
        "produced_at": produced_at,
        "recorded_at": recorded_at,
        "line": line,
        "warnings": [] if trace_warning is None else [trace_warning],
    }


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


class ContractDriftRecord(ContractDriftAlert):
    """The published shape of the ERROR line emitted beside a drifted row's record."""

    model_config = ConfigDict(extra="allow", frozen=True)

    timestamp: datetime
    level: Literal["error"]
    event: Literal["evidence_coverage.contract_drift"]


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every published JSON Schema, by file name under contracts/schemas/."""
    from contracts.messages import AttributionResult, ReleaseRow

    models: dict[str, type[BaseModel]] = {
        "attribution-result.schema.json": AttributionResult,
        "release-row.schema.json": ReleaseRow,
        "coverage-record.schema.json": CoverageRecord,
        "alert-record.schema.json": AlertRecord,
        "contract-drift-record.schema.json": ContractDriftRecord,
    }
    # Messages are read (validation); records are written: their schemas say what a line
    # holds, without the fields a record never dumps (Attempt's storage-only ones).
    return {
        name: model.model_json_schema(
            mode="validation" if model in (AttributionResult, ReleaseRow) else "serialization"
        )
        for name, model in models.items()
    }
