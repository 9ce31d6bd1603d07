"""Days in `evidence-worker report`: per contract version and UTC day, rows, the mean over
valid rows and alerts of both kinds, when the records span more than one day.

A record is put on the day of its `recorded_at` (when the worker recorded or rejected it), or
of its `produced_at` (when upstream produced the message) on request. Records without that
time (written before records carried times, or whose message had no produced_at) are counted
apart, never placed on a guessed day. Alerts are put on the day they were raised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from contracts.messages import as_utc
from contracts.record_models import AlertKind
from worker.human_counts import counted, number
from worker.report.tally import ValueTally

TimeField = Literal["recorded_at", "produced_at"]
TIME_FIELDS: Final[tuple[TimeField, ...]] = ("recorded_at", "produced_at")
DEFAULT_TIME_FIELD: Final[TimeField] = "recorded_at"
DAY_COLUMNS: Final = ("day", "rows", "valid", "invalid", "mean", "nondeterminism", "contract drift")
# Why a record has no time, by the field asked for: only records written before records
# carried times lack recorded_at; produced_at is the message's, and optional.
WHY_UNDATED: Final[dict[TimeField, str]] = {
    "recorded_at": "written before records carried times",
    "produced_at": "their messages gave none",
}


class DayModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DayReport(DayModel):
    """One UTC day of one contract version: `mean` over its valid rows only (None when it has
    none, never 0); invalid rows counted apart."""

    day: date
    records: int
    valid: int
    invalid: int
    mean: float | None
    nondeterminism_alerts: int
    contract_drift_alerts: int


class Span(DayModel):
    """The UTC days the report's records fall on by `field`; `undated` records have no
    `field` and are on none. Days are reported when `first_day` and `last_day` differ."""

    field: TimeField
    first_day: date | None
    last_day: date | None
    days: int
    undated: int

    @property
    def per_day(self) -> bool:
        return self.first_day != self.last_day


def utc_day(moment: datetime | None) -> date | None:
    """The UTC day of an instant; a time without an offset is read as UTC."""
    return None if moment is None else as_utc(moment).date()


def span_of(days: Sequence[date | None], field: TimeField) -> Span:
    tally = SpanTally(field)
    for day in days:
        tally.add(day)
    return tally.span()


class SpanTally:
    """The days records fall on, filled a record at a time: a set of days, not of records."""

    def __init__(self, field: TimeField) -> None:
        self.field = field
        self.dated: set[date] = set()
        self.undated = 0

    def add(self, day: date | None) -> None:
        if day is None:
            self.undated += 1
        else:
            self.dated.add(day)

    def span(self) -> Span:
        return Span(
            field=self.field,
            first_day=min(self.dated, default=None),
            last_day=max(self.dated, default=None),
            days=len(self.dated),
            undated=self.undated,
        )


def per_day(
    rows: Iterable[tuple[date | None, float | None]],
    alerts: Iterable[tuple[date | None, AlertKind]],
) -> list[DayReport]:
    """Each day with rows or alerts, in order: rows are (day, value when valid, else None)."""
    tally = DayTally()
    for day, value in rows:
        tally.add(day, value)
    return tally.days(alerts)


class DayTally:
    """Rows and the exact sum of valid values per day, filled a row at a time."""

    def __init__(self) -> None:
        self.records: Counter[date] = Counter()
        self.values: dict[date, ValueTally] = {}

    def add(self, day: date | None, value: float | None) -> None:
        """A row on `day` (none: not counted here), with its value when valid, else None."""
        if day is None:
            return
        self.records[day] += 1
        if value is not None:
            if (values := self.values.get(day)) is None:
                values = self.values[day] = ValueTally()
            values.add(value)

    def days(self, alerts: Iterable[tuple[date | None, AlertKind]]) -> list[DayReport]:
        """Each day with rows or alerts, in order, with the alerts raised on it."""
        raised: Counter[tuple[date, AlertKind]] = Counter(
            (day, kind) for day, kind in alerts if day is not None
        )
        empty = ValueTally()
        out = []
        for day in sorted(set(self.records) | {day for day, _ in raised}):
            values = self.values.get(day, empty)
            out.append(
                DayReport(
                    day=day,
                    records=self.records[day],
                    valid=values.count,
                    invalid=self.records[day] - values.count,
                    mean=values.mean(),
                    nondeterminism_alerts=raised[day, "nondeterminism"],
                    contract_drift_alerts=raised[day, "contract_drift"],
                )
            )
        return out


def span_line(span: Span) -> str | None:
    """'days (UTC, by recorded_at): 2026-12-01 to 2026-12-03, 3 with records; ...'; None when
    no record has the time (a file written before records carried times) and it went unasked."""
    if span.first_day is None:
        if span.field == DEFAULT_TIME_FIELD:
            return None
        return f"days: no record has {span.field} ({WHY_UNDATED[span.field]})"
    days = (
        f"{span.first_day} to {span.last_day}, {span.days} with records"
        if span.per_day
        else f"{span.first_day} only (no per-day table)"
    )
    return f"days (UTC, by {span.field}): {days}" + (
        f"; records without {span.field} {span.undated} ({WHY_UNDATED[span.field]}: on no day)"
        if span.undated
        else ""
    )


def day_cells(day: DayReport) -> list[str]:
    """One day as cells under DAY_COLUMNS (shared by the text and HTML renderings)."""
    return [
        day.day.isoformat(),
        number(day.records),
        number(day.valid),
        number(day.invalid),
        "-" if day.mean is None else f"{day.mean:.4f}",
        number(day.nondeterminism_alerts),
        number(day.contract_drift_alerts),
    ]


def days_text(days: Sequence[DayReport], undated: int, field: TimeField) -> list[str]:
    """A version's per-day table, indented under it; the version's undated rows after it."""
    if not days:
        return []
    rows = [list(DAY_COLUMNS), *(day_cells(day) for day in days)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(DAY_COLUMNS))]
    out = [f"  per day (UTC, by {field}; mean over valid rows):"]
    out += [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    if undated:
        out.append(
            f"  without {field}: {counted(undated, 'row')} ({WHY_UNDATED[field]}: on no day)"
        )
    return out
