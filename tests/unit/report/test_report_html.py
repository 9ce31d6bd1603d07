"""`evidence-worker report --html`: one self-contained page with a histogram per contract
version, escaped text, and the triage tables (owners, missing claims, thresholds)."""

from __future__ import annotations

import math
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import Run
from tests.unit.report.factories import (
    OLD_RECORDS,
    PAYMENTS,
    SPARSE,
    failed,
    invalid,
    record,
    rejected,
)
from worker.report.html import PLOT_HEIGHT


class Page(HTMLParser):
    """What the tests look at in the HTML: histograms and their bars, tags, attributes, text."""

    def __init__(self) -> None:
        super().__init__()
        self.histograms: list[list[dict[str, str | None]]] = []
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.in_svg = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs
        if tag == "svg":
            self.histograms.append([])
            self.in_svg = True
        elif tag == "rect" and self.in_svg and ("class", "bar") in attrs:
            self.histograms[-1].append(dict(attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.in_svg = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)


PageT = TypeVar("PageT", bound=Page)


def parsed(page: PageT, path: Path) -> PageT:
    """`page` fed the HTML file at `path`."""
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


@pytest.fixture
def html_report(
    report_cli: Callable[..., Run], tmp_path: Path, write_jsonl: Callable[..., Path]
) -> Callable[..., tuple[Run, Path]]:
    """Write rows, run `report --html` on them, which must succeed: the run and its page."""

    def build(rows: list[dict[str, Any] | str]) -> tuple[Run, Path]:
        out = tmp_path / "report.html"
        run = report_cli(write_jsonl(rows), "--html", out)
        assert run.code == 0, run.err
        return run, out

    return build


@pytest.fixture
def html_page(html_report: Callable[..., tuple[Run, Path]]) -> Callable[..., Page]:
    """Write records, run `report --html`, and parse the page."""

    def build(rows: list[dict[str, Any]]) -> Page:
        run, out = html_report(rows)
        assert run.err == f"report: wrote {out}\n"
        return parsed(Page(), out)

    return build


def test_html_has_one_ten_bar_histogram_per_contract_version(
    html_page: Callable[..., Page],
) -> None:
    """Each contract version gets one SVG histogram of 10 bars; rejected records get none."""
    page = html_page([record(), record(contract_version=PAYMENTS), rejected(), invalid()])

    assert len(page.histograms) == 2
    assert [len(bars) for bars in page.histograms] == [10, 10]


def test_html_bar_heights_follow_the_counts(html_page: Callable[..., Page]) -> None:
    """Bar heights are proportional to the bin counts; the tallest bin has the full height."""
    values = [0.05, 0.35, 0.35, 0.75, 1.0, 1.0, 1.0, 1.0]
    page = html_page([record(value=v, status="fail") for v in values] + [invalid()])

    (bars,) = page.histograms
    counts = [int(str(bar["data-count"])) for bar in bars]
    heights = [float(str(bar["height"])) for bar in bars]
    assert counts == [1, 0, 0, 2, 0, 0, 0, 1, 0, 4]
    assert all(
        math.isclose(h, heights[-1] * c / 4, abs_tol=0.01)
        for h, c in zip(heights, counts, strict=True)
    )
    assert heights[-1] == PLOT_HEIGHT


def test_html_escapes_markup_from_records(html_page: Callable[..., Page]) -> None:
    """A reason holding <script> is shown as text, never parsed as a tag."""
    page = html_page(
        [record(), invalid("<script>alert(1)</script> & more", policy_group="<b>grp</b>")]
    )

    assert "script" not in page.tags
    assert "b" not in page.tags
    assert "<script>alert(1)</script> & more" in "".join(page.text)
    assert "<b>grp</b>" in "".join(page.text)


def test_html_is_self_contained(html_page: Callable[..., Page]) -> None:
    """The page loads nothing: no script, link, image, src or href."""
    page = html_page([record(), invalid(), rejected()])

    assert set(page.tags).isdisjoint({"script", "link", "img", "iframe", "object"})
    assert [name for name, _ in page.attributes if name in {"src", "href"}] == []
    assert "style" in page.tags


def test_html_lists_invalid_reasons(html_page: Callable[..., Page]) -> None:
    """The page has an "Invalid reasons" list with each reason's count."""
    page = html_page(
        [record(), invalid(), invalid(), invalid("supported_claim_ids contains unknown IDs: x")]
    )

    text = " ".join(" ".join(page.text).split())
    assert "Invalid reasons" in text
    assert "2 × required_claim_ids must not be empty (group default)" in text
    assert "1 × supported_claim_ids contains unknown IDs: x (group default)" in text


# Triage tables (SPEC §9 "Report") ----------------------------------------------------


class Tables(Page):
    """Also the tables by class (their body rows as cell texts) and the threshold marks."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.thresholds: list[dict[str, str | None]] = []
        self.threshold_labels: list[str] = []
        self.in_body = self.in_cell = self.in_label = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        super().handle_starttag(tag, attrs)
        css = dict(attrs).get("class")
        if tag == "table":
            self.tables.append((css or "", []))
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body:
            self.tables[-1][1].append([])
        elif tag == "td":
            self.tables[-1][1][-1].append("")
            self.in_cell = True
        elif tag == "line" and css == "threshold-line":
            self.thresholds.append(dict(attrs))
        elif tag == "text" and css == "threshold-label":
            self.in_label = True
            self.threshold_labels.append("")

    def handle_endtag(self, tag: str) -> None:
        super().handle_endtag(tag)
        if tag == "tbody":
            self.in_body = False
        elif tag == "td":
            self.in_cell = False
        elif tag == "text":
            self.in_label = False

    def handle_data(self, data: str) -> None:
        super().handle_data(data)
        if self.in_cell:
            self.tables[-1][1][-1][-1] += data
        if self.in_label:
            self.threshold_labels[-1] += data

    def table(self, css: str) -> list[list[list[str]]]:
        return [rows for name, rows in self.tables if name == css]


@pytest.fixture
def tables_page(html_report: Callable[..., tuple[Run, Path]]) -> Callable[..., Tables]:
    """Write records (or raw lines), run `report --html`, and parse the page's tables."""

    def build(rows: list[dict[str, Any] | str]) -> Tables:
        _, out = html_report(rows)
        return parsed(Tables(), out)

    return build


def test_html_owners_table_lists_all_five_owners_per_group(
    tables_page: Callable[..., Tables],
) -> None:
    """One owners table per contract version: a row per group, every owner, no owner."""
    page = tables_page(
        [
            record(),
            record(owner="product", status="fail", value=0.5),
            record(policy_group="<i>x</i>", owner="release-rule", status="fail", value=0.5),
            invalid(),
        ]
    )

    (owners,) = page.table("owners")
    assert owners == [
        ["<i>x</i>", "0", "0", "0", "0", "1", "0"],
        ["default", "0", "0", "1", "1", "0", "1"],
    ]
    assert "i" not in page.tags
    text = " ".join(page.text)
    assert "attribution retrieval product evaluation-data release-rule no owner" in " ".join(
        text.split()
    )


def test_html_missing_claims_table(tables_page: Callable[..., Tables]) -> None:
    """Claim ID, rows missing it and the dominant finding, per group, markup escaped."""
    page = tables_page(
        [
            failed(["<b>c</b>", "a"], ("a", "not_cited"), ("<b>c</b>", "evidence_not_retrieved")),
            failed(["a"], ("a", "evidence_not_retrieved")),
            failed(["a"], ("a", "not_cited")),
        ]
    )

    (claims,) = page.table("missing-claims")
    assert claims == [
        ["default", "a", "3", "not_cited (2 of 3 rows)"],
        ["default", "<b>c</b>", "1", "evidence_not_retrieved (1 of 1 row)"],
    ]
    assert "b" not in page.tags


def test_html_draws_the_threshold_on_the_histogram(tables_page: Callable[..., Tables]) -> None:
    """A marker at the threshold's place on the value axis, labelled "threshold 0.85"."""
    page = tables_page([record(), record(value=0.5, status="fail"), invalid()])

    (marker,) = page.thresholds
    assert (marker["data-threshold"], marker["x1"], marker["x2"]) == ("0.85", "812", "812")
    assert page.threshold_labels == ["threshold 0.85"]


def test_html_names_the_groups_of_each_threshold_when_several(
    tables_page: Callable[..., Tables],
) -> None:
    """Two groups, two thresholds: two markers, highest label first, each naming its group."""
    page = tables_page([record(), record(policy_group="disclosure", threshold=1.0)])

    assert [m["data-threshold"] for m in page.thresholds] == ["1.0", "0.85"]
    assert page.threshold_labels == ["threshold 1.0 (disclosure)", "threshold 0.85 (default)"]


def test_html_draws_no_threshold_without_a_policy(tables_page: Callable[..., Tables]) -> None:
    """Report-only rows (no threshold) and invalid rows draw no marker."""
    page = tables_page(
        [record(status="scored", threshold=None, policy_version=None), invalid(), rejected()]
    )

    assert (page.thresholds, page.threshold_labels) == ([], [])
    assert len(page.histograms) == 1


def test_html_shows_the_sparse_warning_and_old_records(
    tables_page: Callable[..., Tables],
) -> None:
    """The sparse warning stands out; old records render, their missing claims "not recorded"."""
    old = OLD_RECORDS.read_text(encoding="utf-8").splitlines()
    page = tables_page(old)

    text = " ".join(" ".join(page.text).split())
    assert f"Group disclosure: WARNING: {SPARSE}" in text
    assert (
        "Group default: missing claims not recorded on 5 valid rows (written before triage)."
        in (text)
    )
    assert page.table("missing-claims") == []


class Summary(HTMLParser):
    """The page's summary block: each <dt> with its <dd>, and the text of its paragraph."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, str] = {}
        self.note = ""
        self.viewport: str | None = None
        self._in: list[str] = []
        self._term = ""
        self._section = False
        self.first_after_h1: str | None = None
        self._after_h1 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "meta" and found.get("name") == "viewport":
            self.viewport = found.get("content")
        if self._after_h1 and self.first_after_h1 is None:
            self.first_after_h1 = f"{tag}.{found.get('class', '')}"
        if tag == "section" and found.get("class") == "summary":
            self._section = True
        self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = False
        if tag == "h1":
            self._after_h1 = True
        if self._in:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        if not self._section or not self._in:
            return
        if self._in[-1] == "dt":
            self._term = data
        elif self._in[-1] == "dd":
            self.figures[self._term] = data
        elif self._in[-1] == "p":
            self.note += data


def test_html_opens_with_a_summary_block_and_fits_a_phone(
    html_report: Callable[..., tuple[Run, Path]],
) -> None:
    """Right under the title: rows, pass, fail, invalid, review, alerts, then the owners of
    the failing rows; the page declares a device-width viewport."""
    _, out = html_report(
        [record(), record(case_id="case-2"), failed(["a"], ("a", "not_cited")), invalid()]
    )

    page = Summary()
    page.feed(out.read_text(encoding="utf-8"))
    page.close()

    assert page.first_after_h1 == "section.summary"
    assert page.figures == {
        "rows": "4",
        "pass": "2",
        "fail": "1",
        "invalid": "1",
        "review": "0",
        "alerts": "0",
    }
    assert page.note == (
        "owners of failing and invalid rows: product 1, evaluation-data 1; alerts: "
        "0 nondeterminism, 0 contract drift"
    )
    assert page.viewport == "width=device-width, initial-scale=1"
