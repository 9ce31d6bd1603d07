"""The HTML report's histogram geometry, checked in numbers (no browser): no threshold line
runs through a count or a threshold label, labels do not overlap and stay in the chart, and
the chart and alerts table are laid out to the page's width without breaking a timestamp."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from itertools import pairwise

import pytest

from tests.unit.report.factories import alert, record, report_of, version
from worker.report.html import (
    CHART_WIDTH,
    LABEL_LINE,
    STYLE,
    alert_hashes,
    histogram_svg,
    text_width,
)

FAQ = "support-faq/2026-10"
FONT_SIZE = 11  # svg text's font-size in STYLE
SVG = "{http://www.w3.org/2000/svg}"


@dataclass(frozen=True)
class Text:
    """A text's estimated box: left and right edges (from its anchor) and baseline."""

    css: str
    left: float
    right: float
    y: float
    content: str


def texts(svg: ET.Element) -> list[Text]:
    found = []
    for element in svg.iter(f"{SVG}text"):
        content = "".join(element.itertext())
        x, width = float(element.attrib["x"]), text_width(content)
        anchor = element.attrib.get("text-anchor", "start")
        left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
        found.append(
            Text(
                element.attrib.get("class", ""),
                left,
                left + width,
                float(element.attrib["y"]),
                content,
            )
        )
    return found


def chart(*rows: dict[str, object]) -> ET.Element:
    return ET.fromstring(histogram_svg(version(report_of(*rows), FAQ)))


def rows_with(values: list[float], thresholds: dict[str, float]) -> list[dict[str, object]]:
    """Valid rows with these values in group "default", plus one row per other group that
    only brings its threshold."""
    rows: list[dict[str, object]] = [
        record(
            case_id=f"v{i}", input_hash=f"{i:064x}", value=value, threshold=thresholds["default"]
        )
        for i, value in enumerate(values)
    ]
    rows += [
        record(case_id=g, input_hash=f"{100 + i:064x}", policy_group=g, threshold=t, value=1.0)
        for i, (g, t) in enumerate(thresholds.items())
        if g != "default"
    ]
    return rows


LAYOUTS = {
    # A bar in the threshold's own bin: its count sat on the line.
    "threshold in a bar's bin": rows_with([0.86, 0.65, 0.65, 0.95], {"default": 0.85}),
    "two groups, 0.85 and 1.0": rows_with([0.86, 0.5, 0.95], {"default": 0.85, "disclosure": 1.0}),
    "three close thresholds": rows_with(
        [0.86, 0.86, 0.1], {"default": 0.85, "strict": 0.9, "lenient": 0.8}
    ),
    "low thresholds grow rightwards": rows_with(
        [0.05, 0.15, 0.5], {"default": 0.05, "pilot": 0.1, "mid": 0.5}
    ),
}


@pytest.mark.parametrize("rows", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_no_threshold_line_runs_through_a_label(rows: list[dict[str, object]]) -> None:
    """Counts stand beside the lines; the lines start below every threshold label."""
    svg = chart(*rows)
    lines = [
        (float(line.attrib["x1"]), float(line.attrib["y1"]), float(line.attrib["y2"]))
        for line in svg.iter(f"{SVG}line")
        if line.attrib.get("class") == "threshold-line"
    ]
    all_texts = texts(svg)
    labels = [t for t in all_texts if t.css == "threshold-label"]
    assert lines
    assert len(lines) == len(labels)
    for text in all_texts:
        for x, top, bottom in lines:
            # The text's box spans [baseline - font size, baseline] vertically.
            crosses_rows = top < text.y and text.y - FONT_SIZE < bottom
            assert not (crosses_rows and text.left <= x <= text.right), (text, x)


@pytest.mark.parametrize("rows", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_threshold_labels_have_rows_of_their_own_inside_the_chart(
    rows: list[dict[str, object]],
) -> None:
    """One line per label, far enough apart for the type, every label within the chart and
    above the tallest bar's count."""
    all_texts = texts(chart(*rows))
    labels = [t for t in all_texts if t.css == "threshold-label"]
    baselines = sorted(label.y for label in labels)
    assert all(b - a >= LABEL_LINE > FONT_SIZE for a, b in pairwise(baselines))
    assert all(label.left >= 0 for label in labels)
    assert all(label.right <= CHART_WIDTH for label in labels)
    counts = [t for t in all_texts if t.css == "count"]
    assert min(count.y - FONT_SIZE for count in counts) > max(baselines)


def test_the_histogram_takes_the_page_s_width() -> None:
    """1000 units wide, drawn at 100% of the page (80rem), scaled with it."""
    svg = chart(*LAYOUTS["threshold in a bar's bin"])
    assert (svg.attrib["width"], svg.attrib["viewBox"].split()[2]) == ("1000", "1000")
    assert CHART_WIDTH == 1000
    assert "svg.histogram { width: 100%; height: auto; }" in STYLE
    assert "max-width: 80rem" in STYLE


def test_the_alerts_table_never_breaks_a_timestamp_or_version() -> None:
    """The time and version cells do not wrap; the table scrolls rather than squeeze them."""
    report = report_of(record(input_hash="f" * 64, cache="conflict"), alert("f" * 64))
    html = "\n".join(alert_hashes(report))
    assert f'<td class="nowrap">{FAQ}</td>' in html
    assert '<td class="time">' in html
    assert "td.time, td.nowrap { white-space: nowrap; }" in STYLE
    assert "table.alert-hashes { display: block; max-width: 100%; overflow-x: auto; }" in STYLE
