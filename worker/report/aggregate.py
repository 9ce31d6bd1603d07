"""`evidence-worker report`: aggregate record lines per contract version and policy group.

Pure: lines in, a typed `Report` out; rendered as text in `text`, as HTML in `html`. Versions
are never mixed in one aggregate; only valid rows enter means, min/max and histograms.

Triage (SPEC §9) adds per group: rows per owner (all five), the most often missing claim IDs
with their dominant finding, a warning when coverage can take only a few values, the policy
thresholds, and both alert kinds. Records written before triage lack `missing_claim_ids` and
`findings`: they are counted as such, never read as "nothing missing". Days (per contract
version, when the records span more than one) are `report_time`'s; records written before
records carried times are counted apart there, never placed on a day.

One pass (ReportTally): each record goes into running counts and is dropped, so memory does
not grow with the records, except one entry per input hash where a file's alerts and Graders
section need it (build_report's `alert_hashes` and `graders` say when they do not). Means are
exact sums' (tally.ExactSum), so they equal math.fsum over every value.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.grader_stability import GraderId, Judged, StabilityTally
from contracts.messages import UtcDatetime
from contracts.outcomes import CacheOutcome, Owner, Status
from contracts.record_models import AlertKind
from worker.pipeline.intake import describe_validation_error
from worker.report.alert_places import (
    KIND_OF_EVENT,
    MAX_ALERT_HASHES_SHOWN,
    AlertHash,
    AlertLine,
    Located,
    Place,
    PlaceTally,
    alert_hashes,
    place_alerts,
)
from worker.report.calibration_section import Calibration, CalibrationTally
from worker.report.days import (
    DEFAULT_TIME_FIELD,
    DayReport,
    DayTally,
    Span,
    SpanTally,
    TimeField,
    utc_day,
)
from worker.report.graders import GraderReport, grader_reports
from worker.report.reasons import ReasonCount, top_reason_counts
from worker.report.tally import ValueTally

REJECTED_LABEL = "(rejected before scoring)"
NO_GROUP_LABEL = "(no group)"
REPORT_ONLY_LABEL = "(none: report-only)"
STATUSES: tuple[Status, ...] = ("pass", "fail", "invalid", "scored")
# A group's `review` count (SPEC §12) is listed only when it has review rows: a report of
# records without a review band reads as it always did.
REVIEW: Status = "review"
CACHE_OUTCOMES: tuple[CacheOutcome, ...] = ("miss", "hit", "conflict")
VALID_STATUSES = frozenset({"pass", "fail", "scored", REVIEW})
BINS = 10
TOP_MISSING_CLAIMS = 5
MAX_UNREADABLE_SHOWN = 20
# Every owner is listed, with its zero: "retrieval 0" is an answer, a missing key is not.
OWNERS: tuple[Owner, ...] = ("attribution", "retrieval", "product", "evaluation-data")
OWNERS += ("release-rule",)
# With m required claims coverage takes m + 1 values; at m <= 2 a mean or a threshold on it
# hides which claim is missing, which is all there is to know.
SPARSE_MAX_REQUIRED = 2
SPARSE_WARNING = (
    "coverage takes at most 3 values here: a pass/fail rule with the missing IDs says more"
)
# SPEC §1 rule 5, the only reason a valid row can carry; records hold no required count, and
# the reason's two numbers are plain integers, so it is read back without ambiguity (unlike
# its missing= list, whose IDs may hold "," or ";").
VALID_REASON = re.compile(r"supported=(\d+); required=(\d+); missing=")


class ReportedFinding(BaseModel):
    """The part of a finding the report reads; a finding name it does not know still counts."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    claim_id: str
    finding: str


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
    # Drawn on the histogram, so held to the same range as a value.
    threshold: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    # Absent from records written before triage (tests/fixtures/store-28e2bf7): None there
    # means "not recorded", which a valid row written since never says.
    missing_claim_ids: list[str] | None = None
    findings: list[ReportedFinding] | None = None
    # None in records written before records carried times: never placed on a day.
    produced_at: UtcDatetime | None = None
    recorded_at: UtcDatetime | None = None
    # Who graded, and a hit's or a conflict's own outcome (SPEC §10): what the Graders
    # section counts. The names are None in records written before they were kept.
    grader_name: str | None = None
    grader_version: str | None = None
    grader_model: str | None = None
    observed_value: float | None = None
    observed_reason: str | None = None
    # SPEC §12: the group's review band, and an open observation window's previous rule's
    # version and status; absent from records without them (the Calibration section).
    review_band: float | None = None
    previous_policy_version: str | None = None
    previous_status: Status | None = None

    def day(self, field: TimeField) -> date | None:
        """The UTC day of this record's `field` time; None when it has none."""
        return utc_day(self.recorded_at if field == "recorded_at" else self.produced_at)

    @property
    def valid_value(self) -> float | None:
        """The value when this row is valid; None for invalid rows, which are counted apart."""
        return self.value if self.status in VALID_STATUSES else None

    @property
    def is_valid(self) -> bool:
        return self.status in VALID_STATUSES

    @property
    def required_count(self) -> int | None:
        """How many claims were required, from a valid row's reason; None when it cannot say."""
        if not self.is_valid or (match := VALID_REASON.match(self.reason)) is None:
            return None
        return int(match.group(2))


NO_EVENT = "(no event)"  # a JSON object without an event: not known to be anyone's log
# The prefix of every event name the worker writes (worker/constants.py's LOGGER_NAME).
OUR_EVENTS = "evidence_coverage."


@dataclass(frozen=True)
class OtherLine:
    """A JSON object that is not a record: one of ours (an alert, a start-up or reconcile
    line), skipped and counted by event, or a log line of Celery's (or another library's),
    counted apart."""

    event: str
    alert: AlertLine | None = None

    @property
    def ours(self) -> bool:
        """False for Celery's own lines ("celery@host ready."): a worker's stdout is full of
        them, and they say nothing about the records, so they are not "skipped" records."""
        return self.event.startswith(OUR_EVENTS) or self.event == NO_EVENT


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


class PolicyVersionCount(ReportModel):
    policy_version: str | None
    count: int


class InvalidSummary(ReportModel):
    count: int
    top_reasons: list[ReasonCount]


class MissingClaim(ReportModel):
    """A claim ID missing from `rows` rows; `finding` is the finding most often attached to it
    in those rows (`finding_count` of them), None when none of them carries one for it."""

    claim_id: str
    rows: int
    finding: str | None
    finding_count: int


class GroupReport(ReportModel):
    """One aggregate: the records of one (contract_version, policy_group)."""

    contract_version: str | None
    policy_group: str | None
    records: int
    statuses: dict[str, int]
    cache: dict[str, int]
    valid: ValueStats
    invalid: InvalidSummary
    # All five owners, in OWNERS order; rows with no owner (passing, report-only) apart.
    owners: dict[str, int]
    no_owner: int
    missing_claims: list[MissingClaim]
    # Valid rows written before triage: they cannot say what is missing, so they are not in
    # missing_claims (and do not count as "nothing missing" either).
    rows_without_triage: int
    # The largest required count among valid rows; None when no valid row's reason gives one.
    max_required_claims: int | None
    sparse_coverage: bool
    thresholds: list[float]
    policy_versions: list[PolicyVersionCount]
    mixed_policy_versions: bool
    nondeterminism_conflicts: int
    nondeterminism_alerts: int
    contract_drift_alerts: int


class VersionReport(ReportModel):
    """One contract version: its groups, and a histogram of its valid values in 10 bins.

    Its alert counts include alerts placed by contract version alone (no record in the file
    carries their hash), which belong to no group.
    """

    contract_version: str | None
    label: str
    records: int
    histogram: list[int]
    nondeterminism_alerts: int
    contract_drift_alerts: int
    groups: list[GroupReport]
    # Per UTC day, only when the report's records span more than one day (Report.span);
    # `undated`: this version's records without the report's time field, on no day.
    days: list[DayReport] = Field(default_factory=list)
    undated: int = 0


class UnreadableLine(ReportModel):
    line: int
    error: str


class Report(ReportModel):
    source: str
    # The store's URL (password masked) when the report is of a store (`report --store`).
    store: str | None = None
    records: int
    skipped: dict[str, int]
    # Lines of Celery's (and other libraries') logs: every event not of ours.
    log_lines: int = 0
    unreadable: int
    unreadable_lines: list[UnreadableLine]
    nondeterminism_alerts: int
    unmatched_nondeterminism_alerts: int
    contract_drift_alerts: int
    unmatched_contract_drift_alerts: int
    contract_versions: list[VersionReport]
    # Distinct (kind, hash) of the alerts, first raised first; the first 50.
    alert_hashes: list[AlertHash] = Field(default_factory=list)
    alert_hashes_not_shown: int = 0
    span: Span
    # Per grader, least stable first (SPEC §10; worker/report/graders.py).
    graders: list[GraderReport] = Field(default_factory=list)
    # Review rows and observation windows (SPEC §12; worker/report/calibration_section.py): absent,
    # not null, when no record has either.
    calibration: Calibration | None = Field(default=None, exclude_if=lambda value: value is None)


def parse_line(body: bytes) -> ReportedRecord | OtherLine:
    """A record, or another line to skip; UnreadableLineError when it cannot be read."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise UnreadableLineError(f"invalid JSON: {error}") from None
    if not isinstance(data, dict):
        raise UnreadableLineError(f"not a JSON object but {type(data).__name__}")
    event = data.get("event")
    if isinstance(event, dict):  # an ECS document (EVIDENCE_LOG_SCHEMA=ecs): event.action
        event = event.get("action")
        data = {**data, "event": event}
    if event in ("evidence_coverage.scored", "evidence_coverage.rejected"):
        try:
            return ReportedRecord.model_validate(data)
        except ValidationError as error:
            reason = describe_validation_error(error)
            raise UnreadableLineError(f"bad {event} record: {reason}") from None
    if not isinstance(event, str):
        return OtherLine(NO_EVENT)
    kind = KIND_OF_EVENT.get(event)
    if kind is None:
        return OtherLine(event)
    return OtherLine(event, AlertLine.of(kind, data))


def build_report(
    lines: Iterable[tuple[int, bytes]],
    *,
    source: str,
    time_field: TimeField = DEFAULT_TIME_FIELD,
    windows: Mapping[str, date] | None = None,
    alert_hashes: Collection[str] | None = None,
    graders: bool = True,
) -> Report:
    """Read numbered lines (as `read_jsonl` yields them) into a report; never raises on a line.

    One pass, in memory that does not grow with the records (ReportTally), except for what
    `alert_hashes` and `graders` say. `time_field` is the record time that puts records on
    days. `windows`: the last day of each observation window known to the caller, by its
    previous policy version. `alert_hashes`: every hash the lines' alerts name, when the
    caller knows them before the records (a store's); else the place of every record's hash is
    kept, since an alert further on may name it. `graders`: tally the Graders section from the
    lines (one entry per grader and input hash); a store's caller counts it from the store."""
    tally = ReportTally(time_field, alert_hashes=alert_hashes, graders=graders)
    for number, body in lines:
        tally.add_line(number, body)
    return tally.report(source=source, windows=windows)


class ReportTally:
    """Everything the report computes, filled a line at a time: counts per contract version,
    group, day, reason, claim ID, owner and policy version, never the records themselves."""

    def __init__(
        self,
        time_field: TimeField = DEFAULT_TIME_FIELD,
        *,
        alert_hashes: Collection[str] | None = None,
        graders: bool = True,
    ) -> None:
        self.time_field = time_field
        self.records = 0
        self.skipped: Counter[str] = Counter()
        self.log_lines = 0
        self.alerts: list[AlertLine] = []
        self.unreadable = 0
        self.unreadable_shown: list[UnreadableLine] = []
        self.versions: dict[str | None, VersionTally] = {}
        self.places = PlaceTally(alert_hashes)
        self.span = SpanTally(time_field)
        self.stability = StabilityTally() if graders else None
        self.strings: dict[str, str] = {}  # names and reasons kept by the stability tally
        self.calibration = CalibrationTally()

    def add_line(self, number: int, body: bytes) -> None:
        try:
            parsed = parse_line(body)
        except UnreadableLineError as error:
            self.unreadable += 1
            if len(self.unreadable_shown) < MAX_UNREADABLE_SHOWN:
                self.unreadable_shown.append(UnreadableLine(line=number, error=str(error)))
            return
        if isinstance(parsed, ReportedRecord):
            self.add_record(parsed)
            return
        if not parsed.ours:
            self.log_lines += 1
            return
        self.skipped[parsed.event] += 1
        if parsed.alert is not None:
            self.alerts.append(parsed.alert)

    def add_record(self, record: ReportedRecord) -> None:
        self.records += 1
        day = record.day(self.time_field)
        self.span.add(day)
        self.places.add(record)
        self.calibration.add(record)
        if (version := self.versions.get(record.contract_version)) is None:
            version = self.versions[record.contract_version] = VersionTally()
        version.add(record, day)
        if self.stability is not None:
            add_stability(self.stability, record, self.strings)

    def report(self, *, source: str, windows: Mapping[str, date] | None = None) -> Report:
        span = self.span.span()
        located = self.places.locate(self.alerts)
        versions = self._versions(located, span)
        hashes = alert_hashes(located)
        totals = Counter(alert.kind for alert in self.alerts)
        matched_nondeterminism = sum(version.nondeterminism_alerts for version in versions)
        matched_drift = sum(version.contract_drift_alerts for version in versions)
        return Report(
            source=source,
            records=self.records,
            skipped=dict(sorted(self.skipped.items())),
            log_lines=self.log_lines,
            unreadable=self.unreadable,
            unreadable_lines=self.unreadable_shown,
            nondeterminism_alerts=totals["nondeterminism"],
            unmatched_nondeterminism_alerts=totals["nondeterminism"] - matched_nondeterminism,
            contract_drift_alerts=totals["contract_drift"],
            unmatched_contract_drift_alerts=totals["contract_drift"] - matched_drift,
            contract_versions=versions,
            alert_hashes=hashes[:MAX_ALERT_HASHES_SHOWN],
            alert_hashes_not_shown=max(len(hashes) - MAX_ALERT_HASHES_SHOWN, 0),
            span=span,
            graders=[] if self.stability is None else grader_reports(self.stability.rows()),
            calibration=self.calibration.section(windows),
        )

    def _versions(self, located: list[Located], span: Span) -> list[VersionReport]:
        """Per contract version (sorted; rejected last), per policy group (sorted); per day
        too when `span` covers more than one day."""
        by_group, alerts_by_version = place_alerts(located)
        return [
            self.versions[version].report(
                version,
                by_group,
                alerts_by_version,
                [
                    (utc_day(alert.raised_at), alert.kind)
                    for alert, placed_version, _ in located
                    if placed_version == version and placed_version is not None
                ]
                if span.per_day
                else None,
            )
            for version in sorted(self.versions, key=_none_last)
        ]


@dataclass(frozen=True)
class _Said:
    value: float | None
    reason: str


def add_stability(
    tally: StabilityTally, record: ReportedRecord, strings: dict[str, str] | None = None
) -> None:
    """One record into the Graders section's tally, in file order, as `stability --records`
    counts it: a hit's or a conflict's own outcome is in observed_*.

    The tally keeps an entry per (grader, input hash) with its first outcome's reason: with
    `strings`, equal names and reasons are kept once (each line's JSON makes its own copy)."""
    if record.grader_name is None or record.input_hash is None:
        return
    one = (lambda text: text) if strings is None else (lambda text: strings.setdefault(text, text))
    grader = GraderId(
        one(record.grader_name), one(str(record.grader_version)), one(str(record.grader_model))
    )
    first: Judged = _Said(record.value, one(record.reason))
    own = first
    if record.cache in ("hit", "conflict"):
        own = _Said(record.observed_value, one(str(record.observed_reason)))
    tally.add_line(grader, record.input_hash, record.cache, first, own)


class VersionTally:
    """One contract version's groups, histogram and days."""

    def __init__(self) -> None:
        self.records = 0
        self.groups: dict[str | None, GroupTally] = {}
        self.histogram = [0] * BINS
        self.days = DayTally()
        self.undated = 0

    def add(self, record: ReportedRecord, day: date | None) -> None:
        self.records += 1
        if (group := self.groups.get(record.policy_group)) is None:
            group = self.groups[record.policy_group] = GroupTally()
        group.add(record)
        value = record.valid_value
        if value is not None:
            self.histogram[min(int(value * BINS), BINS - 1)] += 1
        self.days.add(day, value)
        self.undated += day is None

    def report(
        self,
        version: str | None,
        by_group: Counter[tuple[Place, AlertKind]],
        by_version: Counter[tuple[str | None, AlertKind]],
        day_alerts: list[tuple[date | None, AlertKind]] | None,
    ) -> VersionReport:
        """The version's report; per day when `day_alerts` is given (its alerts by day)."""
        return VersionReport(
            contract_version=version,
            label=REJECTED_LABEL if version is None else version,
            records=self.records,
            histogram=list(self.histogram),
            nondeterminism_alerts=by_version[version, "nondeterminism"],
            contract_drift_alerts=by_version[version, "contract_drift"],
            groups=[
                self.groups[group].report(
                    version,
                    group,
                    nondeterminism_alerts=by_group[(version, group), "nondeterminism"],
                    contract_drift_alerts=by_group[(version, group), "contract_drift"],
                )
                for group in sorted(self.groups, key=_none_last)
            ],
            days=[] if day_alerts is None else self.days.days(day_alerts),
            undated=self.undated,
        )


def _none_last(name: str | None) -> tuple[bool, str]:
    return name is None, name or ""


class GroupTally:
    """Counts, valid-only statistics, invalid reasons, triage and policy versions of one
    (contract version, group), filled a record at a time."""

    def __init__(self) -> None:
        self.records = 0
        self.statuses: Counter[str] = Counter()
        self.cache: Counter[str] = Counter()
        self.owners: Counter[str] = Counter()
        self.no_owner = 0
        self.policies: Counter[str | None] = Counter()
        self.reasons: Counter[str] = Counter()  # of invalid rows
        self.values = ValueTally()
        self.missing = MissingTally()
        self.rows_without_triage = 0
        self.valid = 0
        self.required_unknown = False
        self.max_required = 0
        self.thresholds: set[float] = set()

    def add(self, record: ReportedRecord) -> None:
        self.records += 1
        self.statuses[record.status] += 1
        if record.cache is not None:
            self.cache[record.cache] += 1
        if record.owner is None:
            self.no_owner += 1
        else:
            self.owners[record.owner] += 1
        self.policies[record.policy_version] += 1
        if record.status == "invalid":
            self.reasons[record.reason] += 1
        if record.is_valid:
            self.valid += 1
            self.values.add(record.value)  # type: ignore[arg-type]  # valid: never None
            self.rows_without_triage += record.missing_claim_ids is None
            required = record.required_count
            if required is None:
                self.required_unknown = True
            else:
                self.max_required = max(self.max_required, required)
        self.missing.add(record)
        if record.threshold is not None:
            self.thresholds.add(record.threshold)

    def report(
        self,
        contract_version: str | None,
        policy_group: str | None,
        *,
        nondeterminism_alerts: int = 0,
        contract_drift_alerts: int = 0,
    ) -> GroupReport:
        statuses, cache, values = self.statuses, self.cache, self.values
        # One valid row whose count is unknown could have three claims, so "all rows have at
        # most two" would not be known: no count, no warning.
        max_required = None if not self.valid or self.required_unknown else self.max_required
        return GroupReport(
            contract_version=contract_version,
            policy_group=policy_group,
            records=self.records,
            statuses={status: statuses[status] for status in STATUSES}
            | ({REVIEW: statuses[REVIEW]} if statuses[REVIEW] else {}),
            cache={outcome: cache[outcome] for outcome in CACHE_OUTCOMES},
            valid=ValueStats(
                count=values.count, mean=values.mean(), min=values.low, max=values.high
            ),
            invalid=InvalidSummary(
                count=statuses["invalid"], top_reasons=top_reason_counts(self.reasons)
            ),
            owners={owner: self.owners[owner] for owner in OWNERS},
            no_owner=self.no_owner,
            missing_claims=self.missing.top(),
            rows_without_triage=self.rows_without_triage,
            max_required_claims=max_required,
            sparse_coverage=max_required is not None and max_required <= SPARSE_MAX_REQUIRED,
            thresholds=sorted(self.thresholds),
            policy_versions=[
                PolicyVersionCount(policy_version=version, count=count)
                for version, count in sorted(
                    self.policies.items(), key=lambda item: _none_last(item[0])
                )
            ],
            mixed_policy_versions=len(self.policies) > 1,
            nondeterminism_conflicts=cache["conflict"],
            nondeterminism_alerts=nondeterminism_alerts,
            contract_drift_alerts=contract_drift_alerts,
        )


class MissingTally:
    """Rows per missing claim ID, and per ID the findings attached to it in those rows.

    Only rows that carry `missing_claim_ids` count: the reason's missing= list is not split,
    since IDs may hold ",". A claim's dominant finding is the finding name most often attached
    to that claim ID in the rows where it is missing; ties go to the first name in sorted
    order, and claims with the same row count to the first ID, so the same records give the
    same report.
    """

    def __init__(self) -> None:
        self.rows: Counter[str] = Counter()
        self.findings: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def add(self, record: ReportedRecord) -> None:
        if record.missing_claim_ids is None:
            return
        missing = set(record.missing_claim_ids)
        self.rows.update(missing)
        for finding in record.findings or ():
            if finding.claim_id in missing:
                self.findings[finding.claim_id][finding.finding] += 1

    def top(self, limit: int = TOP_MISSING_CLAIMS) -> list[MissingClaim]:
        """The claim IDs missing from most rows, each with its dominant finding."""
        ranked = sorted(self.rows.items(), key=lambda item: (-item[1], item[0]))[:limit]
        return [
            MissingClaim(claim_id=claim_id, rows=count, **dominant(self.findings[claim_id]))
            for claim_id, count in ranked
        ]


def dominant(counts: Counter[str]) -> dict[str, str | int | None]:
    """The most frequent name with its count (ties: the first name); None, 0 when empty."""
    if not counts:
        return {"finding": None, "finding_count": 0}
    name, count = min(counts.items(), key=lambda item: (-item[1], item[0]))
    return {"finding": name, "finding_count": count}
