"""`evidence-worker report`: aggregate record lines per contract version and policy group.

Pure: lines in, a typed `Report` out; rendered as text here, as HTML in `report_html`. Versions
are never mixed in one aggregate; only valid rows enter means, min/max and histograms.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.metric import RAGAS_ERROR_PREFIX
from contracts.outcomes import CacheOutcome, Owner, Status
from contracts.records import NONDETERMINISM
from worker.intake import describe_validation_error

REJECTED_LABEL = "(rejected before scoring)"
NO_GROUP_LABEL = "(no group)"
REPORT_ONLY_LABEL = "(none: report-only)"
STATUSES: tuple[Status, ...] = ("pass", "fail", "invalid", "scored")
CACHE_OUTCOMES: tuple[CacheOutcome, ...] = ("miss", "hit", "conflict")
VALID_STATUSES = frozenset({"pass", "fail", "scored"})
BINS = 10
TOP_REASONS = 5
MAX_UNREADABLE_SHOWN = 20


class ReportedRecord(BaseModel):
    """The fields of a record line that the report reads; the rest of the line is ignored.

    Not `CoverageRecord`: a report should still read logs whose envelope (timestamp, level,
    added OpenTelemetry or ECS fields) differs, as long as the record's own fields are there.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    event: Literal["evidence_coverage.scored", "evidence_coverage.rejected"]
    input_hash: str | None
    contract_version: str | None
    policy_group: str | None
    policy_version: str | None
    status: Status
    # A NaN or out-of-range value would poison every mean it enters: such a line is unreadable.
    value: float | None = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    reason: str
    owner: Owner | None
    cache: CacheOutcome | None

    @property
    def valid_value(self) -> float | None:
        """The value when this row is valid; None for invalid rows, which are counted apart."""
        return self.value if self.status in VALID_STATUSES else None


@dataclass(frozen=True)
class OtherLine:
    """A JSON object that is not a record (a Celery log line, an alert): skipped, counted."""

    event: str
    alert_hash: str | None = None


class UnreadableLineError(ValueError):
    """Raised when a line is not a JSON object, or claims to be a record but is not one."""


class ReportModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ValueStats(ReportModel):
    """Over valid rows only; all None when there are none."""

    count: int
    mean: float | None
    min: float | None
    max: float | None


class ReasonCount(ReportModel):
    reason: str
    count: int


class PolicyVersionCount(ReportModel):
    policy_version: str | None
    count: int


class InvalidSummary(ReportModel):
    count: int
    top_reasons: list[ReasonCount]


class GroupReport(ReportModel):
    """One aggregate: the records of one (contract_version, policy_group)."""

    contract_version: str | None
    policy_group: str | None
    records: int
    statuses: dict[str, int]
    cache: dict[str, int]
    valid: ValueStats
    invalid: InvalidSummary
    owners: dict[str, int]
    policy_versions: list[PolicyVersionCount]
    mixed_policy_versions: bool
    nondeterminism_conflicts: int


class VersionReport(ReportModel):
    """One contract version: its groups, and a histogram of its valid values in 10 bins."""

    contract_version: str | None
    label: str
    records: int
    histogram: list[int]
    nondeterminism_alerts: int
    groups: list[GroupReport]


class UnreadableLine(ReportModel):
    line: int
    error: str


class Report(ReportModel):
    source: str
    records: int
    skipped: dict[str, int]
    unreadable: int
    unreadable_lines: list[UnreadableLine]
    nondeterminism_alerts: int
    unmatched_nondeterminism_alerts: int
    contract_versions: list[VersionReport]


def parse_line(body: bytes) -> ReportedRecord | OtherLine:
    """A record, or another line to skip; UnreadableLineError when it cannot be read."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise UnreadableLineError(f"invalid JSON: {error}") from None
    if not isinstance(data, dict):
        raise UnreadableLineError(f"not a JSON object but {type(data).__name__}")
    event = data.get("event")
    if event in ("evidence_coverage.scored", "evidence_coverage.rejected"):
        try:
            return ReportedRecord.model_validate(data)
        except ValidationError as error:
            reason = describe_validation_error(error)
            raise UnreadableLineError(f"bad {event} record: {reason}") from None
    name = event if isinstance(event, str) else "(no event)"
    alert_hash = data.get("input_hash") if event == NONDETERMINISM else None
    return OtherLine(name, alert_hash if isinstance(alert_hash, str) else None)


def build_report(lines: Iterable[tuple[int, bytes]], *, source: str) -> Report:
    """Read numbered lines (as `read_jsonl` yields them) into a report; never raises on a line."""
    records: list[ReportedRecord] = []
    skipped: Counter[str] = Counter()
    alert_hashes: list[str | None] = []
    unreadable: list[UnreadableLine] = []
    for number, body in lines:
        try:
            parsed = parse_line(body)
        except UnreadableLineError as error:
            unreadable.append(UnreadableLine(line=number, error=str(error)))
            continue
        if isinstance(parsed, ReportedRecord):
            records.append(parsed)
            continue
        skipped[parsed.event] += 1
        if parsed.event == NONDETERMINISM:
            alert_hashes.append(parsed.alert_hash)
    versions = aggregate(records, alert_hashes)
    matched = sum(version.nondeterminism_alerts for version in versions)
    return Report(
        source=source,
        records=len(records),
        skipped=dict(sorted(skipped.items())),
        unreadable=len(unreadable),
        unreadable_lines=unreadable[:MAX_UNREADABLE_SHOWN],
        nondeterminism_alerts=len(alert_hashes),
        unmatched_nondeterminism_alerts=len(alert_hashes) - matched,
        contract_versions=versions,
    )


def aggregate(
    records: Sequence[ReportedRecord], alert_hashes: Sequence[str | None] = ()
) -> list[VersionReport]:
    """Per contract version (sorted; rejected last), per policy group (sorted).

    An alert names only its input hash; the hash covers the contract version, so the records
    in the same file carrying that hash say which version the alert belongs to.
    """
    by_version: defaultdict[str | None, defaultdict[str | None, list[ReportedRecord]]]
    by_version = defaultdict(lambda: defaultdict(list))
    version_of_hash: dict[str, str | None] = {}
    for record in records:
        by_version[record.contract_version][record.policy_group].append(record)
        if record.input_hash is not None:
            version_of_hash.setdefault(record.input_hash, record.contract_version)
    alerts = Counter(version_of_hash[h] for h in alert_hashes if h in version_of_hash)
    return [
        VersionReport(
            contract_version=version,
            label=REJECTED_LABEL if version is None else version,
            records=sum(len(rows) for rows in by_version[version].values()),
            histogram=histogram(
                [r.valid_value for rows in by_version[version].values() for r in rows]
            ),
            nondeterminism_alerts=alerts[version],
            groups=[
                summarize_group(version, group, by_version[version][group])
                for group in sorted(by_version[version], key=_none_last)
            ],
        )
        for version in sorted(by_version, key=_none_last)
    ]


def _none_last(name: str | None) -> tuple[bool, str]:
    return name is None, name or ""


def summarize_group(
    contract_version: str | None, policy_group: str | None, records: Sequence[ReportedRecord]
) -> GroupReport:
    """Counts, valid-only statistics, invalid reasons, owners and policy versions of a group."""
    statuses = Counter(record.status for record in records)
    cache = Counter(record.cache for record in records if record.cache is not None)
    owners = Counter(record.owner for record in records if record.owner is not None)
    policies = Counter(record.policy_version for record in records)
    invalid = [record for record in records if record.status == "invalid"]
    return GroupReport(
        contract_version=contract_version,
        policy_group=policy_group,
        records=len(records),
        statuses={status: statuses[status] for status in STATUSES},
        cache={outcome: cache[outcome] for outcome in CACHE_OUTCOMES},
        valid=value_stats([v for r in records if (v := r.valid_value) is not None]),
        invalid=InvalidSummary(count=len(invalid), top_reasons=top_reasons(invalid)),
        owners=dict(sorted(owners.items())),
        policy_versions=[
            PolicyVersionCount(policy_version=version, count=count)
            for version, count in sorted(policies.items(), key=lambda item: _none_last(item[0]))
        ],
        mixed_policy_versions=len(policies) > 1,
        nondeterminism_conflicts=cache["conflict"],
    )


def value_stats(values: Sequence[float]) -> ValueStats:
    if not values:
        return ValueStats(count=0, mean=None, min=None, max=None)
    return ValueStats(
        count=len(values), mean=math.fsum(values) / len(values), min=min(values), max=max(values)
    )


def top_reasons(invalid: Sequence[ReportedRecord], limit: int = TOP_REASONS) -> list[ReasonCount]:
    """Most frequent first; ties in reason order, so the same records give the same report."""
    # Grouped on the metric's own words: Ragas's prefix tells a reader of this report nothing.
    counts = Counter(record.reason.removeprefix(RAGAS_ERROR_PREFIX) for record in invalid)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [ReasonCount(reason=reason, count=count) for reason, count in ranked[:limit]]


def histogram(values: Iterable[float | None]) -> list[int]:
    """Counts in 10 equal bins over 0..1; the last bin is closed, so 1.0 lands in 0.9-1.0."""
    counts = [0] * BINS
    for value in values:
        if value is not None:
            counts[min(int(value * BINS), BINS - 1)] += 1
    return counts


def group_label(group: str | None) -> str:
    return NO_GROUP_LABEL if group is None else group


def policy_label(version: str | None) -> str:
    return REPORT_ONLY_LABEL if version is None else version


COLUMNS: tuple[str, ...] = ("group", "rows", "pass", "fail", "scored", "invalid", "valid")
COLUMNS += ("mean", "min", "max", "miss", "hit", "conflict", "policy")


def group_row(group: GroupReport) -> list[str]:
    """One group as table cells under COLUMNS (shared by the text and HTML renderings)."""
    counts = [group.records, *(group.statuses[s] for s in ("pass", "fail", "scored", "invalid"))]
    stats = group.valid
    return [
        group_label(group.policy_group),
        *(str(count) for count in [*counts, stats.count]),
        *("-" if n is None else f"{n:.4f}" for n in (stats.mean, stats.min, stats.max)),
        *(str(group.cache[outcome]) for outcome in CACHE_OUTCOMES),
        ", ".join(policy_label(p.policy_version) for p in group.policy_versions),
    ]


def headline(report: Report) -> str:
    """What was read: records, skipped lines by event, unreadable lines, alerts."""
    skipped = ", ".join(f"{event} {n}" for event, n in report.skipped.items())
    unmatched = report.unmatched_nondeterminism_alerts
    return "; ".join(
        [
            f"{report.source}: records {report.records}",
            f"skipped lines {sum(report.skipped.values())}" + (f" ({skipped})" if skipped else ""),
            f"unreadable lines {report.unreadable}",
            f"nondeterminism alerts {report.nondeterminism_alerts}"
            + (f" ({unmatched} with no record in this file)" if unmatched else ""),
        ]
    )


def policy_warning(group: GroupReport) -> str | None:
    """Said out loud: a group decided under several policy versions is not one population."""
    if not group.mixed_policy_versions:
        return None
    seen = ", ".join(f"{policy_label(p.policy_version)} ({p.count})" for p in group.policy_versions)
    return f"WARNING: {len(group.policy_versions)} policy versions in one group: {seen}"


def group_notes(group: GroupReport) -> list[str]:
    """Mixed policy versions (a warning), owners, and the top invalid reasons of a group."""
    notes = [warning] if (warning := policy_warning(group)) else []
    if group.owners:
        notes.append("owners: " + ", ".join(f"{k} {v}" for k, v in group.owners.items()))
    return notes + [f"invalid x{r.count}: {r.reason}" for r in group.invalid.top_reasons]


def render_text(report: Report) -> str:
    """The human-readable report: one table per contract version, then notes per group."""
    out = [f"report: {headline(report)}"]
    out += [f"unreadable line {u.line}: {u.error}" for u in report.unreadable_lines]
    if (hidden := report.unreadable - len(report.unreadable_lines)) > 0:
        out.append(f"unreadable lines not shown: {hidden}")
    for version in report.contract_versions:
        out += ["", f"contract version {version.label}: records {version.records}; "]
        out[-1] += f"nondeterminism alerts {version.nondeterminism_alerts}"
        rows = [list(COLUMNS), *(group_row(group) for group in version.groups)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
        out += [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        ]
        for group in version.groups:
            out += [f"  {group_label(group.policy_group)}: {note}" for note in group_notes(group)]
    return "\n".join(out)
