"""The report's Calibration section (SPEC §12): rows in a review band per contract version and
group, and each observation window's previous policy with the decisions that changed under it;
in text, JSON and HTML. Absent when no record carries a `review` status or a previous rule."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from worker.human_counts import counted, number
from worker.report.html_table import table, td

STYLE = """
table.review-rows td:nth-child(-n+2), table.review-rows th:nth-child(-n+2) { text-align: left; }
table.status-changes td:nth-child(-n+3),
table.status-changes th:nth-child(-n+3) { text-align: left; }
"""


class Calibrated(Protocol):
    """The fields of a record the section reads (aggregate.ReportedRecord's)."""

    @property
    def contract_version(self) -> str | None: ...
    @property
    def policy_group(self) -> str | None: ...
    @property
    def policy_version(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def review_band(self) -> float | None: ...
    @property
    def previous_policy_version(self) -> str | None: ...
    @property
    def previous_status(self) -> str | None: ...


class SectionModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReviewRows(SectionModel):
    """Rows in review (within their group's review_band below its threshold), of one contract
    version and group; `review_bands`: the bands the group's records name."""

    contract_version: str | None
    policy_group: str | None
    review: int
    records: int
    review_bands: list[float]


class StatusChange(SectionModel):
    """Rows whose status under the previous rule was `previous_status` and is `status` now."""

    previous_status: str
    status: str
    rows: int


class ObservationWindow(SectionModel):
    """One previous policy that records were decided under beside their own (SPEC §12).

    `until`: the window's last day, from the policy the report was given when its `[observe]`
    names this previous version; None when the report cannot know it (a record file read
    without EVIDENCE_POLICY_FILE: records do not carry it)."""

    previous_policy_version: str
    policy_versions: list[str]
    until: date | None
    records: int
    changed: int
    changes: list[StatusChange]


class Calibration(SectionModel):
    review: list[ReviewRows]
    observation_windows: list[ObservationWindow]


def calibration(
    records: Iterable[Calibrated], windows: Mapping[str, date] | None = None
) -> Calibration | None:
    """The section over the records; None when no record is in review or carries a previous
    rule. `windows`: each known window's last day by its previous policy version."""
    tally = CalibrationTally()
    for record in records:
        tally.add(record)
    return tally.section(windows)


def _key(name: str | None) -> tuple[bool, str]:
    return name is None, name or ""


Key = tuple[str | None, str | None]  # (contract version, policy group)


class CalibrationTally:
    """The section's counts, filled a record at a time: per (contract version, group) and per
    previous policy version, never per record."""

    def __init__(self) -> None:
        self.any = False
        self.rows: Counter[Key] = Counter()
        self.review: Counter[Key] = Counter()
        self.bands: dict[Key, set[float]] = {}
        self.decided: Counter[str] = Counter()
        self.changes: dict[str, Counter[tuple[str, str]]] = {}
        self.versions: dict[str, set[str]] = {}

    def add(self, record: Calibrated) -> None:
        in_review = record.status == "review"
        self.any = self.any or in_review or record.previous_status is not None
        key = (record.contract_version, record.policy_group)
        self.rows[key] += 1
        self.review[key] += in_review
        if record.review_band is not None:
            self.bands.setdefault(key, set()).add(record.review_band)
        previous = record.previous_policy_version
        if previous is None or record.previous_status is None:
            return
        self.decided[previous] += 1
        self.versions.setdefault(previous, set()).add(record.policy_version or "")
        if record.previous_status != record.status:
            changes = self.changes.setdefault(previous, Counter())
            changes[record.previous_status, record.status] += 1

    def section(self, windows: Mapping[str, date] | None = None) -> Calibration | None:
        """The section; None when no record was in review or carried a previous rule."""
        if not self.any:
            return None
        windows_found = self._windows(windows or {})
        return Calibration(review=self._review_rows(), observation_windows=windows_found)

    def _review_rows(self) -> list[ReviewRows]:
        """Per (contract version, group) that has a review row or a band, in sorted order."""
        keys = sorted(
            (key for key in self.rows if self.review[key] or key in self.bands),
            key=lambda key: (_key(key[0]), _key(key[1])),
        )
        return [
            ReviewRows(
                contract_version=version,
                policy_group=group,
                review=self.review[version, group],
                records=self.rows[version, group],
                review_bands=sorted(self.bands.get((version, group), ())),
            )
            for version, group in keys
        ]

    def _windows(self, until: Mapping[str, date]) -> list[ObservationWindow]:
        """Per previous policy version, sorted: how many rows it decided, which changed and
        how."""
        none: Counter[tuple[str, str]] = Counter()
        return [
            ObservationWindow(
                previous_policy_version=previous,
                policy_versions=sorted(self.versions[previous]),
                until=until.get(previous),
                records=self.decided[previous],
                changed=sum(self.changes.get(previous, none).values()),
                changes=[
                    StatusChange(previous_status=before, status=now, rows=count)
                    for (before, now), count in sorted(self.changes.get(previous, none).items())
                ],
            )
            for previous in sorted(self.decided)
        ]


def _label(name: str | None, none: str) -> str:
    return none if name is None else name


def _bands(bands: list[float]) -> str:
    return ", ".join(repr(band) for band in bands) or "none recorded"


def _until(window: ObservationWindow) -> str:
    if window.until is None:
        return "end not known here (the policy's [observe] until)"
    return f"ends {window.until.isoformat()}"


def _changes(window: ObservationWindow) -> str:
    return ", ".join(f"{c.previous_status} -> {c.status} {number(c.rows)}" for c in window.changes)


def calibration_text(section: Calibration | None) -> list[str]:
    """The text report's section; nothing without one."""
    if section is None:
        return []
    out = ["", "calibration:"]
    out += [
        f"  review: contract version {_label(r.contract_version, '(none)')}, group"
        f" {_label(r.policy_group, '(no group)')}: {number(r.review)} of"
        f" {counted(r.records, 'row')} in review (review_band {_bands(r.review_bands)}):"
        " a person decides (evidence-worker calibrate)"
        for r in section.review
    ]
    for window in section.observation_windows:
        changed = f": {_changes(window)}" if window.changes else ""
        out.append(
            f"  observation window: previous policy {window.previous_policy_version}"
            f" beside {', '.join(window.policy_versions)} ({_until(window)}):"
            f" {counted(window.records, 'row')} decided under both,"
            f" {number(window.changed)} changed{changed}"
        )
    return out


def calibration_html(section: Calibration | None) -> list[str]:
    """The HTML section: review rows per group, and each window's status changes."""
    if section is None:
        return []
    out = [
        "<h2>Calibration</h2>",
        "<p>Rows in review are within their group's review_band below its threshold: neither "
        "pass nor fail until a person decides (<code>evidence-worker calibrate</code>).</p>",
    ]
    if section.review:
        rows = [
            [
                td(_label(r.contract_version, "(none)")),
                td(_label(r.policy_group, "(no group)")),
                td(r.review),
                td(r.records),
                td(_bands(r.review_bands)),
            ]
            for r in section.review
        ]
        header = ["contract version", "group", "review", "rows", "review_band"]
        out += table(header, rows, "review-rows")
    for window in section.observation_windows:
        out.append(
            f"<h3>Observation window: previous policy {_escaped(window.previous_policy_version)}"
            f" ({_escaped(_until(window))})</h3>"
        )
        out.append(
            f"<p>{_escaped(counted(window.records, 'row'))} decided under both;"
            f" {_escaped(number(window.changed))} changed.</p>"
        )
        if window.changes:
            rows = [
                [td(change.previous_status), td("->"), td(change.status), td(change.rows)]
                for change in window.changes
            ]
            out += table(["previous status", "", "status", "rows"], rows, "status-changes")
    return out


def _escaped(text: str) -> str:
    from html import escape

    return escape(text)
