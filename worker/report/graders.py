"""The report's Graders section (SPEC §10): per grader, re-grades, flips and the flip rate's 95%
Wilson interval, as `stability` prints them; in text, JSON and HTML (the interval a bar)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from pydantic import BaseModel, ConfigDict

from contracts.grader_stability import GraderStability, least_stable_first
from worker.human_counts import counted
from worker.report.html_table import table, td

# The bar's drawing: the rate axis 0..1 over BAR_WIDTH px, after BAR_LEFT px of margin.
BAR_LEFT, BAR_WIDTH, BAR_HEIGHT = 4, 200, 16

STYLE = """
svg.interval { width: 208px; height: 16px; vertical-align: middle; }
svg.interval .track { fill: #eee; } svg.interval .range { fill: #c0392b; opacity: 0.45; }
svg.interval .rate { stroke: #c0392b; stroke-width: 2; }
table.graders td:nth-child(-n+3), table.graders th:nth-child(-n+3) { text-align: left; }
"""


class GraderReport(BaseModel):
    """One grader's figures: GraderStability.as_json(), as `stability --json` prints them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grader_name: str
    grader_version: str
    grader_model: str
    inputs: int
    regraded: int
    flipped: int
    flip_rate: float | None
    flip_rate_low: float | None
    flip_rate_high: float | None


def grader_reports(rows: Iterable[GraderStability]) -> list[GraderReport]:
    """The rows least stable first, as the report keeps them."""
    return [GraderReport.model_validate(row.as_json()) for row in least_stable_first(rows)]


def percent(share: float) -> str:
    """A rate as a percentage to one decimal: 0.075 is 7.5%."""
    return f"{share * 100:.1f}%"


def interval_text(grader: GraderReport) -> str:
    """The rate and its interval, or why there is none."""
    rate, low, high = grader.flip_rate, grader.flip_rate_low, grader.flip_rate_high
    if rate is None or low is None or high is None:
        return "flip rate unknown (nothing re-graded)"
    return f"flip rate {percent(rate)} (95% interval {percent(low)} to {percent(high)})"


def grader_line(grader: GraderReport) -> str:
    """One grader for people: its three names, the counts, the rate and its interval."""
    return (
        f"{grader.grader_name} {grader.grader_version} {grader.grader_model}: "
        f"{counted(grader.inputs, 'input')}, {grader.regraded:,} re-graded, "
        f"{grader.flipped:,} flipped; {interval_text(grader)}"
    )


def graders_text(graders: Sequence[GraderReport]) -> list[str]:
    """The text report's section: a heading and a line per grader; none without graders."""
    if not graders:
        return []
    return ["", f"graders: {counted(len(graders), 'grader')}, least stable first"] + [
        f"  {grader_line(grader)}" for grader in graders
    ]


def _x(rate: float) -> str:
    return f"{BAR_LEFT + rate * BAR_WIDTH:.1f}"


def interval_svg(grader: GraderReport) -> str:
    """The interval as a bar on a 0..1 track, the rate a tick inside it; the track alone when
    nothing was re-graded."""
    rate, low, high = grader.flip_rate, grader.flip_rate_low, grader.flip_rate_high
    parts = [
        f'<rect class="track" x="{BAR_LEFT}" y="4" width="{BAR_WIDTH}" height="8"/>',
    ]
    if rate is not None and low is not None and high is not None:
        width = f"{(high - low) * BAR_WIDTH:.1f}"
        parts.append(f'<rect class="range" x="{_x(low)}" y="2" width="{width}" height="12"/>')
        parts.append(f'<line class="rate" x1="{_x(rate)}" x2="{_x(rate)}" y1="0" y2="16"/>')
    label = escape(interval_text(grader))
    return (
        f'<svg class="interval" viewBox="0 0 {BAR_LEFT * 2 + BAR_WIDTH} {BAR_HEIGHT}" '
        f'role="img" aria-label="{label}"><title>{label}</title>{"".join(parts)}</svg>'
    )


def graders_html(graders: Sequence[GraderReport]) -> list[str]:
    """The HTML section: a table, each grader's interval drawn as a bar on 0..100%."""
    if not graders:
        return []
    rows = [
        [
            td(grader.grader_name),
            td(grader.grader_version),
            td(grader.grader_model),
            td(grader.inputs),
            td(grader.regraded),
            td(grader.flipped),
            td("-" if grader.flip_rate is None else percent(grader.flip_rate)),
            f"<td>{interval_svg(grader)}</td>",
        ]
        for grader in graders
    ]
    header = ["grader", "version", "model", "inputs", "re-graded", "flipped", "flip rate"]
    return [
        f"<h2>Graders: {len(graders)}</h2>",
        "<p>Least stable first. A flip: a re-graded input whose outcome differed from its "
        "first; the bar is the flip rate's 95% Wilson interval on 0 to 100%.</p>",
        *table([*header, "95% interval"], rows, "graders"),
    ]
