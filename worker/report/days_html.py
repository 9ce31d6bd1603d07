"""The report page's days: per contract version an inline SVG time series (mean over valid rows,
valid and invalid rows, alerts of both kinds per UTC day) and its table; no scripts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from html import escape

from worker.human_counts import counted, number
from worker.report.days import DAY_COLUMNS, WHY_UNDATED, DayReport, Span, day_cells
from worker.report.html_table import table, td

WIDTH, LEFT, RIGHT = 760, 44, 16
MEAN_TOP, MEAN_HEIGHT = 16, 120
# Above the bars: the panel's title, then a line for the tallest bar's count.
ROWS_TITLE, ROWS_HEIGHT = 34, 90
MAX_DAY_LABELS = 7
# Counts over the bars only where a day's slot is wide enough to hold them.
MIN_SLOT_FOR_COUNTS = 22

STYLE = """
.valid-bar { fill: #3b6ea8; } .invalid-bar { fill: #e39b3b; }
.mean-line { stroke: #1d3f66; stroke-width: 2; fill: none; } .mean-point { fill: #1d3f66; }
.grid { stroke: #e4e4e4; } svg text.nondeterminism { fill: #c0392b; font-weight: 600; }
svg text.contract-drift { fill: #7d3c98; font-weight: 600; }
.legend span { display: inline-block; margin-right: 1rem; }
.swatch { display: inline-block; width: 0.8em; height: 0.8em; margin-right: 0.3em; }
"""


@dataclass(frozen=True)
class Layout:
    """Where the rows panel, the alerts lane and the day labels go: below the mean panel, or
    at the top for the rejected bucket, which never has a value to draw."""

    rows_top: float

    @classmethod
    def of(cls, means: bool) -> Layout:
        return cls(rows_top=(MEAN_TOP + MEAN_HEIGHT if means else 0) + ROWS_TITLE)

    @property
    def bottom(self) -> float:
        return self.rows_top + ROWS_HEIGHT

    @property
    def alerts_y(self) -> float:
        return self.bottom + 18

    @property
    def axis_y(self) -> float:
        return self.alerts_y + 30

    @property
    def height(self) -> float:
        return self.axis_y + 10


def all_days(span: Span) -> list[date]:
    """Every day of the span, empty ones included: a gap on the axis is a day without rows."""
    if span.first_day is None or span.last_day is None:
        return []
    count = (span.last_day - span.first_day).days + 1
    return [span.first_day + timedelta(days=i) for i in range(count)]


def _slot(days: list[date]) -> float:
    return (WIDTH - LEFT - RIGHT) / max(len(days), 1)


def _x(day: date, days: list[date]) -> float:
    """The centre of a day's slot."""
    return LEFT + ((day - days[0]).days + 0.5) * _slot(days)


def _mean_y(mean: float) -> float:
    return MEAN_TOP + MEAN_HEIGHT * (1 - mean)


def _mean_axes() -> list[str]:
    """The mean panel's grid at 0, 0.5 and 1, and its title."""
    shapes = []
    for tick in (0.0, 0.5, 1.0):
        y = _mean_y(tick)
        shapes.append(
            f'<line class="grid" x1="{LEFT}" y1="{y:g}" x2="{WIDTH - RIGHT}" y2="{y:g}"/>'
        )
        shapes.append(f'<text x="{LEFT - 6}" y="{y + 4:g}" text-anchor="end">{tick:.1f}</text>')
    shapes.append(
        f'<text x="{LEFT}" y="{MEAN_TOP - 4}">'
        "mean value over valid rows (a gap: no valid row)</text>"
    )
    return shapes


def _axes(days: list[date], tallest: int, layout: Layout) -> list[str]:
    """The rows panel's axis and labels, the alerts lane, and the day labels (first, last, a
    few between)."""
    bottom, top = layout.bottom, layout.rows_top
    shapes = [
        f'<line class="axis" x1="{LEFT}" y1="{bottom:g}" x2="{WIDTH - RIGHT}" y2="{bottom:g}"/>',
        f'<text x="{LEFT - 6}" y="{top + 4:g}" text-anchor="end">{tallest}</text>',
        f'<text x="{LEFT - 6}" y="{bottom + 4:g}" text-anchor="end">0</text>',
        f'<text x="{LEFT}" y="{top - ROWS_TITLE + 16:g}">'
        "rows per day: valid, invalid (counted apart)</text>",
        f'<text x="{LEFT - 6}" y="{layout.alerts_y:g}" text-anchor="end">alerts</text>',
    ]
    step = max(1, -(-len(days) // MAX_DAY_LABELS))
    labelled = set(days[::step]) | {days[-1]}
    if len(days) > 1 and (days[-1] - max(labelled - {days[-1]})).days < step:
        labelled.discard(max(labelled - {days[-1]}))  # keep the last label clear of the one before
    shapes += [
        f'<text class="day-label" x="{_x(day, days):g}" y="{layout.axis_y:g}" '
        f'text-anchor="middle">{day.isoformat()}</text>'
        for day in sorted(labelled)
    ]
    return shapes


def _mean_line(known: list[DayReport], days: list[date]) -> list[str]:
    """Segments between the means of consecutive days; a day without a mean breaks the line."""
    runs: list[list[DayReport]] = []
    for day in known:
        if day.mean is None:
            continue
        if runs and (day.day - runs[-1][-1].day).days == 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    return [
        '<polyline class="mean-line" points="'
        + " ".join(f"{_x(d.day, days):g},{_mean_y(d.mean or 0.0):g}" for d in run)
        + '"/>'
        for run in runs
        if len(run) > 1
    ]


def _day_shapes(day: DayReport, days: list[date], tallest: int, layout: Layout) -> list[str]:
    """A day's bars (valid below, invalid above), its count, its mean and its alerts."""
    x, slot = _x(day.day, days), _slot(days)
    width = max(slot * 0.7, 1.0)
    bottom = layout.bottom
    valid_h = ROWS_HEIGHT * day.valid / tallest
    invalid_h = ROWS_HEIGHT * day.invalid / tallest
    name = day.day.isoformat()
    mean = "no valid row" if day.mean is None else f"mean {day.mean:.4f}"
    data = (
        f'data-day="{name}" data-records="{day.records}" data-valid="{day.valid}" '
        f'data-invalid="{day.invalid}" data-mean="{"" if day.mean is None else repr(day.mean)}" '
        f'data-nondeterminism="{day.nondeterminism_alerts}" '
        f'data-contract-drift="{day.contract_drift_alerts}"'
    )
    shapes = [
        f'<g class="day" {data}><title>{name}: {counted(day.records, "row")}, '
        f"{number(day.valid)} valid ({mean}), {number(day.invalid)} invalid; alerts: "
        f"nondeterminism {number(day.nondeterminism_alerts)}, contract drift "
        f"{number(day.contract_drift_alerts)}</title>",
        f'<rect class="valid-bar" x="{x - width / 2:g}" y="{bottom - valid_h:g}" '
        f'width="{width:g}" height="{valid_h:g}"/>',
        f'<rect class="invalid-bar" x="{x - width / 2:g}" y="{bottom - valid_h - invalid_h:g}" '
        f'width="{width:g}" height="{invalid_h:g}"/>',
    ]
    if slot >= MIN_SLOT_FOR_COUNTS and day.records:
        shapes.append(
            f'<text class="count" x="{x:g}" y="{bottom - valid_h - invalid_h - 4:g}" '
            f'text-anchor="middle">{day.records}</text>'
        )
    if day.mean is not None:
        shapes.append(f'<circle class="mean-point" cx="{x:g}" cy="{_mean_y(day.mean):g}" r="3"/>')
    marks = [
        (css, symbol, count)
        for css, symbol, count in (
            ("nondeterminism", "▲", day.nondeterminism_alerts),
            ("contract-drift", "◆", day.contract_drift_alerts),
        )
        if count
    ]
    shapes += [
        f'<text class="{css}" x="{x:g}" y="{layout.alerts_y + 12 * i:g}" '
        f'text-anchor="middle">{symbol}{count}</text>'
        for i, (css, symbol, count) in enumerate(marks)
    ]
    shapes.append("</g>")
    return shapes


def timeline_svg(label: str, known: Sequence[DayReport], span: Span, *, means: bool) -> str:
    """One version's days on the report's common axis (first to last day of all records);
    `means=False` (the rejected bucket) leaves out the mean panel."""
    days = all_days(span)
    layout = Layout.of(means)
    tallest = max((day.records for day in known), default=0) or 1
    title = f"Per day (UTC, by {span.field}) for contract version {label}"
    height = f"{layout.height:g}"
    shapes = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" class="timeline" data-contract-version="{escape(label)}">',
        f"<title>{escape(title)}</title>",
        *(_mean_axes() if means else []),
        *_axes(days, tallest, layout),
        *(shape for day in known for shape in _day_shapes(day, days, tallest, layout)),
        *(_mean_line(list(known), days) if means else []),
        "</svg>",
    ]
    return "\n".join(shapes)


MEAN_SWATCH = '<span><i class="swatch" style="background:#1d3f66;border-radius:50%"></i>mean</span>'
LEGEND = (
    '<p class="legend">'
    '<span><i class="swatch" style="background:#3b6ea8"></i>valid rows</span>'
    '<span><i class="swatch" style="background:#e39b3b"></i>invalid rows (not in the mean)</span>'
    f"{MEAN_SWATCH}"
    '<span style="color:#c0392b">▲ nondeterminism alerts</span>'
    '<span style="color:#7d3c98">◆ contract drift alerts</span></p>'
)


def days_section(
    label: str, known: Sequence[DayReport], undated: int, span: Span, *, means: bool = True
) -> list[str]:
    """The version's time series, its table, and the rows on no day; nothing without days.
    `means=False` for the rejected bucket: no mean panel, no mean in the legend."""
    if not known:
        return []
    rows = [[td(cell) for cell in day_cells(day)] for day in known]
    parts = [
        f"<h3>Per day (UTC, by {span.field})</h3>",
        timeline_svg(label, known, span, means=means),
        LEGEND if means else LEGEND.replace(MEAN_SWATCH, ""),
        *table(list(DAY_COLUMNS), rows, "days"),
    ]
    if undated:
        parts.append(
            f'<p class="undated">{counted(undated, "row")} without {span.field} '
            f"({WHY_UNDATED[span.field]}) are on no day: counted above, not drawn.</p>"
        )
    return parts
