"""The report as one self-contained HTML page: inline CSS and SVG, no scripts, all text escaped."""

from __future__ import annotations

from html import escape

from worker.report import (
    BINS,
    COLUMNS,
    REJECTED_LABEL,
    GroupReport,
    Report,
    VersionReport,
    group_label,
    group_row,
    headline,
    policy_warning,
)

CHART_WIDTH, CHART_HEIGHT = 440, 220
PLOT_LEFT, PLOT_TOP, PLOT_HEIGHT, BAR_WIDTH = 30, 20, 160, 40

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; border-top: 1px solid #ccc; padding-top: 1rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; text-align: right; }
th:first-child, td:first-child, td:last-child { text-align: left; }
th { background: #f4f4f4; }
.warning { color: #8a4b00; background: #fff4e0; padding: 0.3rem 0.5rem; }
.bar { fill: #3b6ea8; } .axis { stroke: #888; } svg text { font-size: 11px; fill: #444; }
code { font-size: 0.95em; }
"""


def render_html(report: Report) -> str:
    """The whole page; every text that came from a record or a file name is escaped."""
    title = f"Evidence coverage report: {report.source}"
    body = [
        f"<h1>{escape(title)}</h1>",
        f"<p>{escape(headline(report))}</p>",
        *_unreadable(report),
        *(part for version in report.contract_versions for part in _version(version)),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            '<head><meta charset="utf-8">',
            f"<title>{escape(title)}</title>",
            f"<style>{STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


def _unreadable(report: Report) -> list[str]:
    if not report.unreadable:
        return []
    items = [f"<li>line {line.line}: {escape(line.error)}</li>" for line in report.unreadable_lines]
    hidden = report.unreadable - len(report.unreadable_lines)
    if hidden > 0:
        items.append(f"<li>and {hidden} more</li>")
    return [f"<h2>Unreadable lines ({report.unreadable})</h2>", "<ul>", *items, "</ul>"]


def _version(version: VersionReport) -> list[str]:
    heading = f"Contract version {escape(version.label)}"
    if version.contract_version is None:
        heading = "Rejected before scoring"
    alerts = version.nondeterminism_alerts
    parts = [
        f"<section><h2>{heading}</h2>",
        f"<p>records: {version.records}; nondeterminism alerts: {alerts}</p>",
    ]
    if version.contract_version is None:
        parts.append(
            f"<p>{escape(REJECTED_LABEL)}: these messages failed schema validation and never "
            "reached the metric, so there are no values to draw.</p>"
        )
    else:
        parts.append(histogram_svg(version))
    parts += _group_table(version.groups)
    parts += _notes(version.groups)
    parts.append("</section>")
    return parts


def histogram_svg(version: VersionReport) -> str:
    """10 bars over 0..1, heights proportional to the counts of valid values (invalid: none)."""
    counts = version.histogram
    tallest = max(counts) or 1  # all-zero: every bar has height 0
    baseline = PLOT_TOP + PLOT_HEIGHT
    label = f"Histogram of valid values for contract version {version.label}"
    shapes = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{CHART_WIDTH}" '
        f'height="{CHART_HEIGHT}" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" '
        f'class="histogram" data-contract-version="{escape(version.label)}">',
        f"<title>{escape(label)}</title>",
        f'<line class="axis" x1="{PLOT_LEFT}" y1="{baseline}" '
        f'x2="{PLOT_LEFT + BINS * BAR_WIDTH}" y2="{baseline}"/>',
    ]
    for index, count in enumerate(counts):
        x = PLOT_LEFT + index * BAR_WIDTH
        height = round(PLOT_HEIGHT * count / tallest, 2)
        low, high = index / BINS, (index + 1) / BINS
        upper = "≤" if index == BINS - 1 else "<"
        shapes += [
            f'<rect class="bar" x="{x + 2}" y="{baseline - height}" width="{BAR_WIDTH - 4}" '
            f'height="{height}" data-count="{count}">'
            f"<title>{low:.1f} ≤ value {upper} {high:.1f}: {count} valid rows</title></rect>",
            f'<text x="{x + BAR_WIDTH / 2}" y="{baseline - height - 4}" '
            f'text-anchor="middle">{count}</text>',
        ]
    shapes += [
        f'<text x="{PLOT_LEFT + i * BAR_WIDTH * BINS / 2}" y="{baseline + 16}" '
        f'text-anchor="middle">{i / 2:.1f}</text>'
        for i in range(3)
    ]
    shapes.append(
        f'<text x="{PLOT_LEFT}" y="{baseline + 36}">value (valid rows: {sum(counts)}; '
        "1.0 falls in the last bin)</text></svg>"
    )
    return "\n".join(shapes)


def _group_table(groups: list[GroupReport]) -> list[str]:
    header = "".join(f"<th>{escape(column)}</th>" for column in COLUMNS)
    rows = [
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in group_row(group)) + "</tr>"
        for group in groups
    ]
    return [
        "<table>",
        f"<thead><tr>{header}</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody>",
        "</table>",
    ]


def _notes(groups: list[GroupReport]) -> list[str]:
    """Mixed policy versions stand out as warnings; invalid reasons form one list per version."""
    parts = []
    for group in groups:
        name = escape(group_label(group.policy_group))
        if warning := policy_warning(group):
            parts.append(f'<p class="warning">Group {name}: {escape(warning)}</p>')
        if group.owners:
            owners = ", ".join(f"{escape(k)} {v}" for k, v in group.owners.items())
            parts.append(f"<p>Group {name}, owners to route to: {owners}</p>")
    reasons = [
        f"<li><strong>{r.count}</strong> × {escape(r.reason)} "
        f"<small>(group {escape(group_label(g.policy_group))})</small></li>"
        for g in groups
        for r in g.invalid.top_reasons
    ]
    parts.append("<h3>Invalid reasons</h3>")
    parts += ['<ul class="invalid-reasons">', *reasons, "</ul>"] if reasons else ["<p>None.</p>"]
    return parts
