"""The one-process runs behind `score` and `gate`: read lines, decide, emit, tally."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from pydantic import ValidationError

from contracts import AttributionResult, Outcome, Policy, ReleaseRow, decide
from contracts.metric import score_pair
from contracts.policy import INVALID_OWNER
from worker.errors import InputError
from worker.logging import emit_alert, emit_record
from worker.pipeline import (
    Clock,
    Delivery,
    Processed,
    case_id_of,
    describe_validation_error,
    not_utf8,
    parse_message,
    process_many,
    rejected,
    utc_now,
)
from worker.progress import Progress
from worker.stores import DeadLetter, ResultStore

OK, POLICY_FAILURE, INVALID, NONDETERMINISM = 0, 1, 2, 3
CHUNK = 500


@dataclass
class Tally:
    """Counts for the summary line, and the exit code they imply (the highest applies)."""

    statuses: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    rejected: int = 0
    alerts: int = 0
    gating_failures: int = 0
    gating_invalid: int = 0

    def add(self, status: str, *, blocking: bool | None, cache: str | None = None) -> None:
        self.statuses[status] += 1
        if cache:
            self.cache[cache] += 1
        gates = blocking is not False  # unknown (unparsable row) counts as blocking
        self.gating_invalid += status == "invalid" and gates
        self.gating_failures += status == "fail" and gates

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def exit_code(self) -> int:
        if self.alerts:
            return NONDETERMINISM
        if self.gating_invalid:
            return INVALID
        return POLICY_FAILURE if self.gating_failures else OK

    def summary(self, label: str, policy: Policy | None) -> str:
        statuses = ", ".join(f"{name} {n}" for name, n in sorted(self.statuses.items()))
        parts = [f"{label}: {self.total} rows: {statuses or 'none'}"]
        if self.rejected:
            parts.append(f"{self.rejected} rejected before scoring")
        if self.cache:
            parts.append("cache " + ", ".join(f"{k} {v}" for k, v in sorted(self.cache.items())))
        if self.alerts:
            parts.append(f"{self.alerts} nondeterminism alert{'s' * (self.alerts != 1)}")
        parts.append(f"policy {policy.version}" if policy else "report-only (no policy)")
        parts.append(f"exit {self.exit_code}")
        return "; ".join(parts)


def _chunks(lines: Iterable[tuple[int, bytes]], size: int) -> Iterable[list[tuple[int, bytes]]]:
    iterator = iter(lines)
    while chunk := list(islice(iterator, size)):
        yield chunk


def score_lines(
    lines: Iterable[tuple[int, bytes]],
    *,
    store: ResultStore,
    policy: Policy | None,
    max_message_bytes: int,
    progress: Progress,
    clock: Clock = utc_now,
) -> Tally:
    """Score AttributionResult lines through the store; one record per line, in input order."""
    tally = Tally()
    run_id = uuid.uuid4().hex[:12]
    for chunk in _chunks(lines, CHUNK):
        valid: list[tuple[AttributionResult, Delivery]] = []
        slots: list[Delivery | tuple[Delivery, str, bytes]] = []
        for number, body in chunk:
            delivery = Delivery(task_id=f"score-{run_id}-{number}", line=number)
            try:
                valid.append((parse_message(body, max_bytes=max_message_bytes), delivery))
                slots.append(delivery)
            except InputError as error:
                slots.append((delivery, str(error), body))
        processed = iter(process_many(valid, store=store, policy=policy, clock=clock))
        for slot in slots:
            if isinstance(slot, Delivery):
                _emit_processed(next(processed), tally)
            else:
                _reject(*slot, store=store, policy=policy, tally=tally, clock=clock)
        progress.tick(len(chunk))
    return tally


def _emit_processed(result: Processed, tally: Tally) -> None:
    record = result.record
    emit_record(record)
    tally.add(record.status, blocking=record.blocking, cache=record.cache)
    if result.alert is not None:
        emit_alert(result.alert, line=record.line)
        tally.alerts += 1


def _reject(
    delivery: Delivery,
    error: str,
    body: bytes,
    *,
    store: ResultStore,
    policy: Policy | None,
    tally: Tally,
    clock: Clock,
) -> None:
    text = body.decode("utf-8", "replace").rstrip("\n")
    store.dead_letter(
        DeadLetter(received_at=clock(), error=error, body=text, task_id=delivery.task_id)
    )
    record = rejected(error, body=body, policy=policy, delivery=delivery)
    emit_record(record)
    tally.add(record.status, blocking=None)
    tally.rejected += 1


def gate_lines(
    lines: Iterable[tuple[int, bytes]],
    *,
    policy: Policy,
    write: Callable[[dict[str, Any]], None],
    progress: Progress,
) -> Tally:
    """Check reviewed ReleaseRows against the policy; one JSON object per row to `write`."""
    tally = Tally()
    for number, body in lines:
        row_output = gate_row(number, body, policy)
        write(row_output)
        tally.add(row_output["status"], blocking=row_output["blocking"])
        progress.tick()
    return tally


def gate_row(number: int, body: bytes, policy: Policy) -> dict[str, Any]:
    """One gate line: a decision for a valid row, or an invalid row naming what is wrong."""
    try:
        row = ReleaseRow.model_validate_json(body)
    except ValidationError as error:
        return {
            "line": number,
            "case_id": case_id_of(body),
            "status": "invalid",
            "value": None,
            "score": None,
            "reason": not_utf8(body) or describe_validation_error(error),
            "threshold": None,
            "policy_version": policy.version,
            "policy_group": None,
            "contract_version": None,
            "blocking": None,
            "owner": INVALID_OWNER,
        }
    value, reason = score_pair(row.required_claim_ids, row.supported_claim_ids)
    decision = decide(
        Outcome(value=value, reason=reason),
        policy,
        policy_group=row.policy_group,
        blocking=row.blocking,
        contract_version=row.contract_version,
    )
    fields = decision.model_dump(mode="json")
    return {"line": number, "case_id": row.case_id, **fields, "score": fields["value"]}


def dumps_line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
