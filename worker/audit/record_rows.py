"""`records`: a store's first outcomes as record rows, filtered (SPEC §11); and the lines that
`report --store` aggregates.

Pure: (input hash, first attempt) pairs and a policy in, rows out. A row is the record line
the worker wrote when it first recorded the hash (its cache was `miss`), with the first's
outcome decided under the policy given now, exactly as `explain` decides it
(contracts.judging.judge_kept): a threshold moved since is seen. Its fields are the record
line's (SPEC §6) that a store keeps; blocking, trace_id, produced_at and duration_ms are
not kept, so a row leaves them out rather than guess them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from contracts import Attempt, Policy
from contracts.judging import judge_kept
from contracts.outcomes import Owner, Status
from contracts.record_models import ALERT_EVENTS, AnyAlert, iso_utc, scored_fields
from contracts.triage import FindingName, findings_json

# A row's fields, in the record line's order; the CSV columns are these.
FIELDS: Final = (
    "event",
    "case_id",
    "input_hash",
    "contract_version",
    "metric_version",
    "ragas_version",
    "worker_version",
    "grader_name",
    "grader_version",
    "grader_model",
    "value",
    "reason",
    "status",
    "policy_group",
    "policy_version",
    "threshold",
    "owner",
    "cache",
    "missing_claim_ids",
    "findings",
    "contract_drift",
    "task_id",
    "recorded_at",
)
# A row's fields that a record line leaves out when unset (SPEC §12), after FIELDS.
_OPTIONAL: Final = ("review_band", "previous_policy_version", "previous_status")


def row_of(
    input_hash: str, first: Attempt, policy: Policy | None, previous: Policy | None = None
) -> dict[str, Any]:
    """The record row of one first outcome, decided under `policy` (None: report-only): the
    fields of its record line (contracts.record_models.scored_fields) that a store keeps.

    `previous`: the previous rule of the policy's open observation window (SPEC §12): the row
    is decided under it too, carries its version and status (previous_policy_version,
    previous_status) and, failing now where it passed before, is the release rule's. Those
    two fields, and review_band, are left out where unset, as on a record line."""
    judgement = judge_kept(first, policy, baseline=previous)
    fields = scored_fields(
        first.case_id,
        input_hash,
        (first.metric_version, first.ragas_version, first.worker_version),
        (first.grader_name, first.grader_version, first.grader_model),
        judgement.decision,
        owner=judgement.triage.owner,
        previous=judgement.baseline,
        cache="miss",  # the first outcome is what its hash's first record found
        triage=judgement.triage,
        contract_drift=first.contract_drift,
        task_id=first.task_id,
        recorded_at=first.recorded_at,
    )
    row = {name: fields[name] for name in FIELDS}
    row["recorded_at"] = iso_utc(first.recorded_at)
    row["findings"] = findings_json(row["findings"])
    # The fields only some records have follow the kept ones, set or left out.
    for name in _OPTIONAL:
        if fields[name] is not None:
            row[name] = fields[name]
    return row


@dataclass(frozen=True)
class RecordQuery:
    """What `records` selects; None matches anything. Every given filter must match."""

    contract: str | None = None
    owner: Owner | None = None
    status: Status | None = None
    previous_status: Status | None = None  # the observation window's previous rule's status
    finding: FindingName | None = None
    case_prefix: str | None = None

    def admits(self, first: Attempt) -> bool:
        """The filters a first attempt answers before it is decided (cheap: most rows of a
        narrow query stop here)."""
        if self.contract is not None and first.contract_version != self.contract:
            return False
        return self.case_prefix is None or (first.case_id or "").startswith(self.case_prefix)

    def matches(self, row: dict[str, Any]) -> bool:
        """The filters on what the policy decides: status, owner, and the findings."""
        if self.status is not None and row["status"] != self.status:
            return False
        if self.previous_status is not None and row.get("previous_status") != self.previous_status:
            return False
        if self.owner is not None and row["owner"] != self.owner:
            return False
        return self.finding is None or any(f["finding"] == self.finding for f in row["findings"])


@dataclass
class Selection:
    """The rows of the first outcomes a query selects, in their order, counted as they go."""

    query: RecordQuery
    policy: Policy | None
    previous: Policy | None = None  # an open observation window's previous rule
    read: int = 0
    selected: int = 0

    def rows(self, outcomes: Iterable[tuple[str, Attempt]]) -> Iterator[dict[str, Any]]:
        for input_hash, first in outcomes:
            self.read += 1
            if not self.query.admits(first):
                continue
            row = row_of(input_hash, first, self.policy, self.previous)
            if self.query.matches(row):
                self.selected += 1
                yield row


def csv_cells(row: dict[str, Any]) -> list[str]:
    """A row as CSV cells, in FIELDS order: null is an empty cell, true/false as in JSON, a
    number as JSON writes it, and the lists (missing_claim_ids, findings) as JSON text: a
    claim ID may hold "," or ";", which a joined list would make ambiguous."""
    return [_cell(row[name]) for name in FIELDS]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def report_lines(
    rows: Iterable[dict[str, Any]], alerts: Iterable[AnyAlert]
) -> Iterator[tuple[int, bytes]]:
    """Numbered JSON lines, as a record file gives them to `report`: the rows, then each
    alert as its log line (event and fields), so the report places alerts as in a file."""
    lines = itertools.chain(
        map(_line, rows),
        (_line({"event": ALERT_EVENTS[a.kind], **a.model_dump(mode="json")}) for a in alerts),
    )
    return enumerate(lines, start=1)


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
