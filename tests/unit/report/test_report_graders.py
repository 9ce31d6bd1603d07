"""The report's Graders section (SPEC §10): the `stability` figures over the same records, in
text, JSON and HTML, the interval drawn as a bar."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES, Run
from tests.unit.report.factories import record
from worker.report.aggregate import build_report
from worker.report.graders import GraderReport, graders_html, graders_text, interval_svg
from worker.report.html import render_html
from worker.report.text import render_text

GRADER = {
    "grader_name": "claim-attributor",
    "grader_version": "3.2.0",
    "grader_model": "gpt-4o-mini-2024-07-18",
}
HALF = {"value": 0.5, "reason": "supported=1; required=2; missing=b", "status": "scored"}
FLIPPED = GraderReport(
    **GRADER,
    inputs=2,
    regraded=1,
    flipped=1,
    flip_rate=1.0,
    flip_rate_low=0.20654931437723742,
    flip_rate_high=1.0,
)
UNKNOWN = GraderReport(
    grader_name="claim-attributor",
    grader_version="4.0.0",
    grader_model="gpt-4.1-mini",
    inputs=1,
    regraded=0,
    flipped=0,
    flip_rate=None,
    flip_rate_low=None,
    flip_rate_high=None,
)


def lines(*records: dict[str, Any]) -> list[tuple[int, bytes]]:
    return [(n, json.dumps(r).encode()) for n, r in enumerate(records, start=1)]


def regraded_records() -> list[tuple[int, bytes]]:
    """Hash a by 3.2.0: a miss and a conflict; hash b by 3.2.0 and hash c by 4.0.0: once."""
    return lines(
        record(**GRADER, **HALF),
        record(**GRADER, **HALF, cache="conflict", observed_value=1.0, observed_reason="r"),
        record(**GRADER, input_hash="b" * 64),
        record(
            input_hash="c" * 64,
            grader_name="claim-attributor",
            grader_version="4.0.0",
            grader_model="gpt-4.1-mini",
        ),
    )


def test_the_report_counts_graders_as_stability_does() -> None:
    """Least stable first; the grader with nothing re-graded last, its figures null."""
    report = build_report(regraded_records(), source="r.jsonl")

    assert report.graders == [FLIPPED, UNKNOWN]


def test_the_text_section_is_a_line_per_grader() -> None:
    """After the rest of the report: a heading and `stability`'s line per grader."""
    text = render_text(build_report(regraded_records(), source="r.jsonl"))

    assert text.splitlines()[-3:] == [
        "graders: 2 graders, least stable first",
        "  claim-attributor 3.2.0 gpt-4o-mini-2024-07-18: 2 inputs, 1 re-graded, 1 flipped; "
        "flip rate 100.0% (95% interval 20.7% to 100.0%)",
        "  claim-attributor 4.0.0 gpt-4.1-mini: 1 input, 0 re-graded, 0 flipped; "
        "flip rate unknown (nothing re-graded)",
    ]
    assert graders_text([]) == []


def test_the_interval_is_a_bar_from_its_low_to_its_high_end_on_a_0_to_1_track() -> None:
    """0.2065... to 1 over 200 px after a 4 px margin: x 45.3, width 158.7; the rate a tick."""
    svg = interval_svg(FLIPPED)

    assert '<rect class="track" x="4" y="4" width="200" height="8"/>' in svg
    assert '<rect class="range" x="45.3" y="2" width="158.7" height="12"/>' in svg
    assert '<line class="rate" x1="204.0" x2="204.0" y1="0" y2="16"/>' in svg
    assert "<title>flip rate 100.0% (95% interval 20.7% to 100.0%)</title>" in svg


def test_a_grader_with_nothing_regraded_draws_the_track_alone() -> None:
    """No interval, no bar: the track and the reason in the title."""
    svg = interval_svg(UNKNOWN)

    assert 'class="range"' not in svg
    assert 'class="rate"' not in svg
    assert "<title>flip rate unknown (nothing re-graded)</title>" in svg


def test_the_html_page_has_a_graders_table_escaped() -> None:
    """The section heads its table; a grader's name is escaped like every record text."""
    hostile = FLIPPED.model_copy(update={"grader_name": "<b>judge</b>"})

    section = "\n".join(graders_html([hostile]))

    assert section.startswith("<h2>Graders: 1</h2>")
    assert "<td>&lt;b&gt;judge&lt;/b&gt;</td>" in section
    assert "<b>judge</b>" not in section
    assert graders_html([]) == []
    assert "<h2>Graders: 2</h2>" in render_html(build_report(regraded_records(), source="r"))


def test_report_json_and_store_carry_the_stability_objects(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    """`report --json` over the example's records and `report --store` over its store carry
    `stability --json`'s objects under `graders`."""
    store = f"sqlite:///{tmp_path}/s.sqlite3"
    scored = cli("score", EXAMPLES / "attribution-results.jsonl", "--store", store)
    path = tmp_path / "records.jsonl"
    path.write_text(scored.out)
    expected = [
        json.loads(line) for line in cli("stability", "--store", store, "--json").out.split()
    ]

    from_file = json.loads(cli("report", path, "--json").out)
    from_store = json.loads(cli("report", "--store", store, "--json").out)

    assert from_file["graders"] == from_store["graders"] == expected
    assert [g["flipped"] for g in expected] == [1, 0]
