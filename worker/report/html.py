"""The report as one self-contained HTML page: inline CSS and SVG, no scripts, all text escaped."""

from __future__ import annotations

from html import escape

from contracts.record_models import iso_utc
from worker.human_counts import counted, number
from worker.report.aggregate import (
    BINS,
    OWNERS,
    REJECTED_LABEL,
    TOP_MISSING_CLAIMS,
    GroupReport,
    Report,
    VersionReport,
)
from worker.report.alert_places import inspect_commands
from worker.report.calibration_section import STYLE as CALIBRATION_STYLE
from worker.report.calibration_section import calibration_html
from worker.report.days import span_line
from worker.report.days_html import STYLE as DAYS_STYLE
from worker.report.days_html import days_section
from worker.report.graders import STYLE as GRADERS_STYLE
from worker.report.graders import graders_html
from worker.report.html_table import table, td
from worker.report.text import (
    COLUMNS,
    columns,
    finding_label,
    group_label,
    group_row,
    headline,
    policy_warning,
    sparse_warning,
    threshold_label,
    triage_note,
)

# About the page's width (80rem: room for the alerts table's 64-digit hashes); the chart
# scales with the page (CSS width 100%), its text too.
CHART_WIDTH = 1000
PLOT_LEFT, PLOT_HEIGHT, BAR_WIDTH = 30, 200, 92
# Room above the bars for their count labels, then one line per threshold label, so that a
# label never sits on a bar's count; 18 px apart for 11 px text, so two never touch.
PLOT_MARGIN, LABEL_LINE, CHART_FOOT = 20, 18, 44
# Text widths are estimated, not measured (no fonts here): at most this many px per character
# of 11 px text (bold sans-serif digits and lower case stay under it), plus the gap kept
# between a text and a threshold line.
CHAR_WIDTH, TEXT_GAP = 7.5, 4

STYLE = (
    """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 80rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; border-top: 1px solid #ccc; padding-top: 1rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
.warning { color: #8a4b00; background: #fff4e0; padding: 0.3rem 0.5rem; }
svg.histogram { width: 100%; height: auto; }
.bar { fill: #3b6ea8; } .axis { stroke: #888; } svg text { font-size: 11px; fill: #444; }
.threshold-line { stroke: #c0392b; stroke-width: 2; stroke-dasharray: 5 3; }
svg text.threshold-label { fill: #c0392b; font-weight: 600; }
svg text.count, svg text.threshold-label { paint-order: stroke; stroke: #fff; stroke-width: 4px; }
table.groups td:last-child, table.groups th:last-child { text-align: left; }
td.id { font-family: ui-monospace, monospace; text-align: left; }
.missing-claims th:nth-child(2), .missing-claims th:nth-child(4) { text-align: left; }
code { font-size: 0.95em; }
table.alert-hashes td, table.alert-hashes th { text-align: left; }
table.alert-hashes { display: block; max-width: 100%; overflow-x: auto; }
td.commands { white-space: nowrap; } td.commands code { font-size: 0.85em; }
td.time, td.nowrap { white-space: nowrap; }
section.summary dl { display: flex; flex-wrap: wrap; gap: 0.5rem 1.5rem; margin: 0.5rem 0; }
section.summary dl div { min-width: 5rem; } section.summary dt { color: #555; }
section.summary dd { margin: 0; font-size: 1.4rem; font-weight: 600; }
p.source { color: #555; overflow-wrap: anywhere; }
@media (max-width: 40rem) {
  body { margin: 0.75rem; }
  h1 { font-size: 1.2rem; overflow-wrap: anywhere; }
  table { display: block; max-width: 100%; overflow-x: auto; }
}
ul.invalid-reasons ul { margin: 0.1rem 0 0.3rem; color: #555; }
"""
    + DAYS_STYLE
    + GRADERS_STYLE
)
# Only a page with a Calibration section carries its style: others stay as they were.


def render_html(report: Report) -> str:
    """The whole page; every text that came from a record or a file name is escaped."""
    title = f"Evidence coverage report: {report.source}"
    body = [
        f"<h1>{escape(title)}</h1>",
        *summary_block(report),
        f'<p class="source">{escape(headline(report))}</p>',
        *([f"<p>{escape(days)}</p>"] if (days := span_line(report.span)) is not None else []),
        *_unreadable(report),
        *alert_hashes(report),
        *graders_html(report.graders),
        *calibration_html(report.calibration),
        *(part for version in report.contract_versions for part in _version(version, report)),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            '<head><meta charset="utf-8">',
            # A phone's width, not a desktop page shrunk to it: the tables scroll instead.
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(title)}</title>",
            f"<style>{STYLE}{CALIBRATION_STYLE if report.calibration else ''}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


SUMMARY_STATUSES = ("pass", "fail", "invalid", "review")


def summary_block(report: Report) -> list[str]:
    """What a reader needs first: rows, the counts by status, alerts and owners, over every
    contract version and group (the headline, below it, says what was read)."""
    groups = [group for version in report.contract_versions for group in version.groups]
    statuses = {
        status: sum(group.statuses.get(status, 0) for group in groups)
        for status in SUMMARY_STATUSES
    }
    owners = {owner: sum(group.owners.get(owner, 0) for group in groups) for owner in OWNERS}
    alerts = report.nondeterminism_alerts + report.contract_drift_alerts
    figures = [("rows", report.records), *statuses.items(), ("alerts", alerts)]
    owned = ", ".join(f"{owner} {number(n)}" for owner, n in owners.items() if n) or "none"
    return [
        '<section class="summary" aria-label="summary">',
        "<dl>",
        *(f"<div><dt>{name}</dt><dd>{number(count)}</dd></div>" for name, count in figures),
        "</dl>",
        f"<p>owners of failing and invalid rows: {escape(owned)}; alerts: "
        f"{number(report.nondeterminism_alerts)} nondeterminism, "
        f"{number(report.contract_drift_alerts)} contract drift</p>",
        "</section>",
    ]


def _unreadable(report: Report) -> list[str]:
    if not report.unreadable:
        return []
    items = [f"<li>line {line.line}: {escape(line.error)}</li>" for line in report.unreadable_lines]
    hidden = report.unreadable - len(report.unreadable_lines)
    if hidden > 0:
        items.append(f"<li>and {hidden} more</li>")
    return [f"<h2>Unreadable lines ({report.unreadable})</h2>", "<ul>", *items, "</ul>"]


def alert_hashes(report: Report) -> list[str]:
    """Every hash alerts named, with the commands that open its rows: where a reviewer starts."""
    if not report.alert_hashes:
        return []
    # The hash is in its commands: a column of its own would only repeat its 64 characters.
    rows = [
        [
            td(a.kind),
            # A time or a version broken at its hyphens reads as two values.
            td(a.contract_version or "(not in this file)", "nowrap"),
            td(a.alerts),
            td("-" if a.first_raised_at is None else iso_utc(a.first_raised_at), "time"),
            f'<td class="commands" data-hash="{escape(a.input_hash)}">'
            + "<br>".join(
                f"<code>{escape(c)}</code>" for c in inspect_commands(a.input_hash, report.store)
            )
            + "</td>",
        ]
        for a in report.alert_hashes
    ]
    header = ["kind", "contract version", "alerts", "first raised (UTC)", "inspect with"]
    more = report.alert_hashes_not_shown
    return [
        f"<h2>Alerts: {len(report.alert_hashes) + more} input hashes</h2>",
        *table(header, rows, "alert-hashes"),
        *([f"<p>and {more} more hashes not shown</p>"] if more else []),
    ]


def _version(version: VersionReport, report: Report) -> list[str]:
    heading = f"Contract version {escape(version.label)}"
    if version.contract_version is None:
        heading = "Rejected before scoring"
    parts = [
        f"<section><h2>{heading}</h2>",
        f"<p>records: {version.records}; nondeterminism alerts: "
        f"{version.nondeterminism_alerts}; contract drift alerts: "
        f"{version.contract_drift_alerts}</p>",
    ]
    if version.contract_version is None:
        parts.append(
            f"<p>{escape(REJECTED_LABEL)}: these messages failed schema validation and never "
            "reached the metric, so there are no values to draw.</p>"
        )
    else:
        parts.append(histogram_svg(version))
    parts += days_section(
        version.label,
        version.days,
        version.undated,
        report.span,
        means=version.contract_version is not None,
    )
    parts += _group_table(version.groups)
    parts += _notes(version.groups)
    parts += owners_table(version.groups)
    if version.contract_version is not None:  # rejected lines never reached triage
        parts += missing_claims_table(version.groups)
    parts += invalid_reasons(version.groups)
    parts.append("</section>")
    return parts


def thresholds_of(version: VersionReport) -> dict[float, list[str]]:
    """Each policy threshold seen in the version, with the groups applying it, in order."""
    groups: dict[float, list[str]] = {}
    for group in version.groups:
        for threshold in group.thresholds:
            groups.setdefault(threshold, []).append(group_label(group.policy_group))
    return dict(sorted(groups.items()))


def text_width(text: str) -> float:
    """An upper estimate of `text`'s width in the chart's 11 px type."""
    return len(text) * CHAR_WIDTH


def threshold_x(threshold: float) -> float:
    return PLOT_LEFT + threshold * BINS * BAR_WIDTH


def threshold_marker(
    threshold: float, groups: list[str], *, line: int, lines: int, baseline: int, named: bool
) -> tuple[str, str]:
    """A dashed vertical line at the threshold's position on the value axis, and its label
    above the plot on a line of its own (`line` of `lines`, the top one 0); the groups are
    named when the version has several.

    The line starts below the last label line, so it crosses no label, whichever way the
    labels grow; each label ends at its line when there is room on its left (one near 0
    starts there instead), and stays inside the chart.
    """
    x = threshold_x(threshold)
    text = threshold_label(threshold) + (f" ({', '.join(groups)})" if named else "")
    width = text_width(text)
    # Ending at the line reads as the line's label; the width is only an estimate, so the
    # start is placed exactly only where it must be (no room on the line's left).
    anchor, label_x = "end", x
    if x - width < 0:
        anchor, label_x = "start", min(x, CHART_WIDTH - width)
    label_y = (line + 1) * LABEL_LINE
    data = f'data-threshold="{threshold!r}"'
    title = f"{threshold_label(threshold)}: groups {', '.join(groups)}"
    return (
        f'<line class="threshold-line" {data} x1="{x:g}" y1="{lines * LABEL_LINE + TEXT_GAP}" '
        f'x2="{x:g}" y2="{baseline}"><title>{escape(title)}</title></line>',
        f'<text class="threshold-label" {data} x="{label_x:g}" y="{label_y}" '
        f'text-anchor="{anchor}">{escape(text)}</text>',
    )


def count_label_x(index: int, text: str, lines_x: list[float]) -> tuple[float, str]:
    """Where a bar's count goes (x and text-anchor): centred over its bar, unless a threshold
    line would run through it; then beside that line, still over the bar. When no place over
    the bar is clear (several lines in one bin), centred: its white halo keeps it readable."""
    low = PLOT_LEFT + index * BAR_WIDTH
    high = low + BAR_WIDTH
    width = text_width(text)
    centre = low + BAR_WIDTH / 2
    # (left edge, x, anchor) of each place to try, the centre first.
    places = [(centre - width / 2, centre, "middle")]
    for x in lines_x:
        places.append((x - TEXT_GAP - width, x - TEXT_GAP, "end"))
        places.append((x + TEXT_GAP, x + TEXT_GAP, "start"))
    for left, x, anchor in places:
        right = left + width
        inside = low <= left and right <= high
        if inside and all(not left - TEXT_GAP < line < right + TEXT_GAP for line in lines_x):
            return x, anchor
    return centre, "middle"


def histogram_svg(version: VersionReport) -> str:
    """10 bars over 0..1, heights proportional to the counts of valid values (invalid: none),
    and the policy thresholds of its groups drawn as vertical markers (none when no policy)."""
    counts = version.histogram
    tallest = max(counts) or 1  # all-zero: every bar has height 0
    thresholds = thresholds_of(version)
    plot_top = PLOT_MARGIN + LABEL_LINE * len(thresholds)
    chart_height = plot_top + PLOT_HEIGHT + CHART_FOOT
    baseline = plot_top + PLOT_HEIGHT
    lines_x = [threshold_x(threshold) for threshold in thresholds]
    label = f"Histogram of valid values for contract version {version.label}"
    shapes = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{CHART_WIDTH}" '
        f'height="{chart_height}" viewBox="0 0 {CHART_WIDTH} {chart_height}" '
        f'class="histogram" data-contract-version="{escape(version.label)}">',
        f"<title>{escape(label)}</title>",
        f'<line class="axis" x1="{PLOT_LEFT}" y1="{baseline}" '
        f'x2="{PLOT_LEFT + BINS * BAR_WIDTH}" y2="{baseline}"/>',
    ]
    bars, labels = [], []
    for index, count in enumerate(counts):
        x = PLOT_LEFT + index * BAR_WIDTH
        height = round(PLOT_HEIGHT * count / tallest, 2)
        low, high = index / BINS, (index + 1) / BINS
        upper = "≤" if index == BINS - 1 else "<"
        bars.append(
            f'<rect class="bar" x="{x + 2}" y="{baseline - height}" width="{BAR_WIDTH - 4}" '
            f'height="{height}" data-count="{count}">'
            # Escaped: a bare "<" is text to an HTML parser, but not to an SVG (XML) one.
            f"<title>{escape(f'{low:.1f} ≤ value {upper} {high:.1f}')}: "
            f"{counted(count, 'valid row')}"
            "</title></rect>"
        )
        label_x, anchor = count_label_x(index, number(count), lines_x)
        labels.append(
            f'<text class="count" x="{label_x:g}" y="{baseline - height - 4}" '
            f'text-anchor="{anchor}">{number(count)}</text>'
        )
    named = len(version.groups) > 1
    # Drawn over the bars (a threshold inside a bin would hide behind its bar) and under the
    # counts, which stand aside from the lines and keep a white halo besides.
    # Highest threshold on the top line, as it is the rightmost.
    markers = [
        threshold_marker(
            threshold, groups, line=i, lines=len(thresholds), baseline=baseline, named=named
        )
        for i, (threshold, groups) in enumerate(reversed(thresholds.items()))
    ]
    shapes += bars
    shapes += [line for line, _ in markers]
    shapes += labels
    shapes += [label for _, label in markers]
    shapes += [
        f'<text x="{PLOT_LEFT + i * BAR_WIDTH * BINS / 2}" y="{baseline + 16}" '
        f'text-anchor="middle">{i / 2:.1f}</text>'
        for i in range(3)
    ]
    shapes.append(
        f'<text x="{PLOT_LEFT}" y="{baseline + 36}">value (valid rows: {number(sum(counts))}; '
        "1.0 falls in the last bin)</text></svg>"
    )
    return "\n".join(shapes)


def _group_table(groups: list[GroupReport]) -> list[str]:
    shown = columns(groups)
    review = len(shown) > len(COLUMNS)
    header = "".join(f"<th>{escape(column)}</th>" for column in shown)
    rows = [
        "<tr>"
        + "".join(f"<td>{escape(cell)}</td>" for cell in group_row(group, review=review))
        + "</tr>"
        for group in groups
    ]
    return [
        '<table class="groups">',
        f"<thead><tr>{header}</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody>",
        "</table>",
    ]


def owners_table(groups: list[GroupReport]) -> list[str]:
    """Rows per owner per group, all five owners always shown, and the rows with no owner."""
    rows = [
        [
            td(group_label(group.policy_group)),
            *(td(group.owners[owner]) for owner in OWNERS),
            td(group.no_owner),
        ]
        for group in groups
    ]
    header = ["group", *OWNERS, "no owner"]
    return ["<h3>Rows per owner</h3>", *table(header, rows, "owners")]


def missing_claims_table(groups: list[GroupReport]) -> list[str]:
    """The most often missing claim IDs per group with their dominant finding."""
    rows = [
        [
            td(group_label(group.policy_group)),
            td(claim.claim_id, "id"),
            td(claim.rows),
            td(finding_label(claim), "id"),
        ]
        for group in groups
        for claim in group.missing_claims
    ]
    notes = [
        f"<p>Group {escape(group_label(group.policy_group))}: {escape(note)}.</p>"
        for group in groups
        if (note := triage_note(group)) is not None
    ]
    header = ["group", "claim ID", "rows missing it", "dominant finding"]
    rendered = table(header, rows, "missing-claims")
    heading = f"<h3>Most often missing claims (top {TOP_MISSING_CLAIMS} per group)</h3>"
    return [heading, *(rendered if rows else ["<p>None.</p>"]), *notes]


def _notes(groups: list[GroupReport]) -> list[str]:
    """Warnings stand out; alerts per group; invalid reasons form one list per version."""
    parts = []
    for group in groups:
        name = escape(group_label(group.policy_group))
        for warning in (policy_warning(group), sparse_warning(group)):
            if warning is not None:
                parts.append(f'<p class="warning">Group {name}: {escape(warning)}</p>')
    # With one group its alerts are the version's, already said under the heading.
    if len(groups) > 1:
        per_group = "; ".join(
            f"{escape(group_label(g.policy_group))}: nondeterminism {g.nondeterminism_alerts}, "
            f"contract drift {g.contract_drift_alerts}"
            for g in groups
        )
        parts.append(f'<p class="alerts">Alerts per group: {per_group}</p>')
    return parts


def invalid_reasons(groups: list[GroupReport]) -> list[str]:
    """The top invalid reasons of every group of a version, as one list."""
    reasons = [
        f"<li><strong>{r.count}</strong> × {escape(r.reason)} "
        f"<small>(group {escape(group_label(g.policy_group))})</small>"
        + (
            f'<ul class="examples"><li>{r.distinct} different reasons, e.g.</li>'
            + "".join(f"<li><code>{escape(example)}</code></li>" for example in r.examples)
            + "</ul>"
            if r.examples
            else ""
        )
        + "</li>"
        for g in groups
        for r in g.invalid.top_reasons
    ]
    listed = ['<ul class="invalid-reasons">', *reasons, "</ul>"] if reasons else ["<p>None.</p>"]
    return ["<h3>Invalid reasons</h3>", *listed]
