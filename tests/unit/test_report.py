"""`evidence-worker report`: per-version, per-group aggregates of record files (SPEC §7)."""

from __future__ import annotations

import io
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from worker.cli import main
from worker.report import GroupReport, Report, VersionReport, build_report, render_text
from worker.report_html import PLOT_HEIGHT

PREFIX = "Error executing metric evidence_coverage: "
FAQ, PAYMENTS = "support-faq/2026-10", "payments-disclosures/2026-11"


def record(**overrides: Any) -> dict[str, Any]:
    """A record line as score and the worker emit it: a passing default-group row."""
    return {
        "timestamp": "2026-12-02T18:15:50.505055Z",
        "level": "info",
        "event": "evidence_coverage.scored",
        "case_id": "case-1",
        "input_hash": "a" * 64,
        "contract_version": FAQ,
        "metric_version": "evidence_coverage/1",
        "ragas_version": "0.4.3",
        "worker_version": "0.1.0",
        "value": 1.0,
        "reason": "supported=3; required=3; missing=none",
        "status": "pass",
        "policy_group": "default",
        "policy_version": "2026-12-01",
        "threshold": 0.85,
        "blocking": True,
        "owner": None,
        "cache": "miss",
        "missing_claim_ids": [],
        "findings": [],
        "contract_drift": False,
        **overrides,
    }


def invalid(
    reason: str = "required_claim_ids must not be empty", **overrides: Any
) -> dict[str, Any]:
    """A metric-invalid record: no value, owned by evaluation-data."""
    fields = {"value": None, "status": "invalid", "owner": "evaluation-data"}
    fields |= {"missing_claim_ids": None, "threshold": None}
    return record(reason=PREFIX + reason, **{**fields, **overrides})


def rejected(**overrides: Any) -> dict[str, Any]:
    """A schema-rejected record: never reached the metric, so no contract version or group."""
    return record(
        event="evidence_coverage.rejected",
        input_hash=None,
        contract_version=None,
        policy_group=None,
        value=None,
        reason="schema: answer: Field required",
        status="invalid",
        threshold=None,
        blocking=None,
        owner="evaluation-data",
        cache=None,
        missing_claim_ids=None,
        **overrides,
    )


def alert(input_hash: str) -> dict[str, Any]:
    """A nondeterminism alert line (only the fields the report reads matter)."""
    return {"level": "error", "event": "evidence_coverage.nondeterminism", "input_hash": input_hash}


def lines(*rows: dict[str, Any] | str) -> list[tuple[int, bytes]]:
    """Number rows as read_jsonl does; dicts are JSON-encoded, strings kept as they are."""
    return [
        (number, (row if isinstance(row, str) else json.dumps(row)).encode())
        for number, row in enumerate(rows, start=1)
    ]


def report_of(*rows: dict[str, Any] | str) -> Report:
    return build_report(lines(*rows), source="records.jsonl")


def version(report: Report, contract_version: str | None) -> VersionReport:
    (found,) = [v for v in report.contract_versions if v.contract_version == contract_version]
    return found


def group(report: Report, contract_version: str | None, policy_group: str | None) -> GroupReport:
    (found,) = [
        g for g in version(report, contract_version).groups if g.policy_group == policy_group
    ]
    return found


# Aggregation ---------------------------------------------------------------------------


def test_mean_min_max_are_exact_over_valid_rows() -> None:
    """Mean, min and max are computed over the valid values exactly."""
    report = report_of(
        record(value=0.25, status="fail"), record(value=0.5, status="fail"), record(value=1.0)
    )

    stats = group(report, FAQ, "default").valid
    assert (stats.count, stats.mean, stats.min, stats.max) == (3, 1.75 / 3, 0.25, 1.0)


def test_invalid_rows_never_become_zero() -> None:
    """An invalid row leaves mean and min untouched: it is not a 0."""
    report = report_of(record(value=1.0), invalid(), invalid("supported_claim_ids contains x"))

    stats = group(report, FAQ, "default").valid
    assert (stats.count, stats.mean, stats.min, stats.max) == (1, 1.0, 1.0, 1.0)


def test_group_of_only_invalid_rows_has_no_statistics() -> None:
    """With no valid row, mean, min and max are None rather than 0."""
    stats = group(report_of(invalid(), invalid()), FAQ, "default").valid

    assert (stats.count, stats.mean, stats.min, stats.max) == (0, None, None, None)


def test_invalid_rows_are_counted_apart_from_valid_ones() -> None:
    """Statuses are counted per kind, invalid among them, and valid rows separately."""
    report = report_of(record(), record(value=0.5, status="fail"), invalid(), invalid())

    summary = group(report, FAQ, "default")
    assert summary.statuses == {"pass": 1, "fail": 1, "invalid": 2, "scored": 0}
    assert (summary.invalid.count, summary.valid.count, summary.records) == (2, 2, 4)


def test_report_only_rows_count_as_scored_and_valid() -> None:
    """Rows scored without a policy (status scored) are valid and enter the mean."""
    report = report_of(
        record(status="scored", value=0.5, policy_version=None, threshold=None),
        record(status="scored", value=1.0, policy_version=None, threshold=None),
    )

    summary = group(report, FAQ, "default")
    assert summary.statuses["scored"] == 2
    assert (summary.valid.count, summary.valid.mean) == (2, 0.75)


def test_contract_versions_are_never_mixed() -> None:
    """Two versions with the same group name get separate aggregates."""
    report = report_of(
        record(value=1.0), record(contract_version=PAYMENTS, value=0.5, status="fail")
    )

    assert [v.contract_version for v in report.contract_versions] == [PAYMENTS, FAQ]
    assert group(report, FAQ, "default").valid.mean == 1.0
    assert group(report, PAYMENTS, "default").valid.mean == 0.5


def test_policy_groups_are_aggregated_separately() -> None:
    """Within a version each policy group is its own aggregate, in name order."""
    report = report_of(record(policy_group="disclosure", value=0.5, status="fail"), record())

    assert [g.policy_group for g in version(report, FAQ).groups] == ["default", "disclosure"]
    assert group(report, FAQ, "disclosure").valid.mean == 0.5


def test_rejected_records_get_their_own_bucket_last() -> None:
    """Records rejected before scoring form a clearly named bucket after every version."""
    report = report_of(rejected(), record(), rejected())

    last = report.contract_versions[-1]
    assert (last.contract_version, last.label, last.records) == (
        None,
        "(rejected before scoring)",
        2,
    )
    assert group(report, None, None).invalid.count == 2


def test_top_reasons_are_ordered_by_count_then_text_and_limited_to_five() -> None:
    """The five most frequent invalid reasons, most frequent first, ties in text order."""
    counts = {"r-g": 1, "r-e": 2, "r-f": 1, "r-d": 1, "r-c": 2, "r-b": 3, "r-a": 1}
    report = report_of(*(invalid(reason) for reason, n in counts.items() for _ in range(n)))

    reasons = group(report, FAQ, "default").invalid.top_reasons
    assert [(r.reason, r.count) for r in reasons] == [
        ("r-b", 3),
        ("r-c", 2),
        ("r-e", 2),
        ("r-a", 1),
        ("r-d", 1),
    ]


def test_ragas_prefix_is_stripped_from_reasons_and_the_rest_kept_exact() -> None:
    """Reasons with and without the Ragas prefix group together, otherwise verbatim."""
    report = report_of(
        invalid("supported_claim_ids contains unknown IDs: old-c1"),
        record(
            value=None, status="invalid", reason="supported_claim_ids contains unknown IDs: old-c1"
        ),
        invalid("Supported_claim_ids contains unknown IDs: old-c1"),
    )

    reasons = group(report, FAQ, "default").invalid.top_reasons
    assert [(r.reason, r.count) for r in reasons] == [
        ("supported_claim_ids contains unknown IDs: old-c1", 2),
        ("Supported_claim_ids contains unknown IDs: old-c1", 1),
    ]


def test_several_policy_versions_in_a_group_are_flagged() -> None:
    """A group decided under two policy versions says so, with the count of each."""
    report = report_of(
        record(), record(policy_version="env:0.8"), record(), record(policy_version=None)
    )

    summary = group(report, FAQ, "default")
    assert summary.mixed_policy_versions is True
    assert [(p.policy_version, p.count) for p in summary.policy_versions] == [
        ("2026-12-01", 2),
        ("env:0.8", 1),
        (None, 1),
    ]


def test_one_policy_version_is_not_flagged() -> None:
    """A group decided under one policy version carries no warning."""
    summary = group(report_of(record(), record()), FAQ, "default")

    assert summary.mixed_policy_versions is False
    assert "WARNING" not in render_text(report_of(record(), record()))


def test_mixed_policy_versions_warning_appears_in_the_table_output() -> None:
    """The text report prints a warning line naming both policy versions."""
    text = render_text(report_of(record(), record(policy_version="env:0.8")))

    assert "  default: WARNING: 2 policy versions in one group: 2026-12-01 (1), env:0.8 (1)" in (
        text.splitlines()
    )


def test_cache_outcomes_and_conflicts_are_counted() -> None:
    """Cache outcomes are counted per group; conflicts are the nondeterminism count."""
    report = report_of(record(), record(cache="hit"), record(cache="conflict"), record(cache="hit"))

    summary = group(report, FAQ, "default")
    assert summary.cache == {"miss": 1, "hit": 2, "conflict": 1}
    assert summary.nondeterminism_conflicts == 1


def test_owners_are_counted_and_unrouted_rows_left_out() -> None:
    """Owners are counted per group; passing rows have no owner and are counted apart."""
    report = report_of(record(), record(value=0.5, status="fail", owner="product"), invalid())

    summary = group(report, FAQ, "default")
    assert summary.owners == {
        "attribution": 0,
        "retrieval": 0,
        "product": 1,
        "evaluation-data": 1,
        "release-rule": 0,
    }
    assert summary.no_owner == 1


def test_histogram_bins_valid_values_only() -> None:
    """Ten bins over 0..1, 1.0 in the last bin, invalid rows not drawn."""
    values = [0.0, 0.05, 0.1, 0.5, 0.95, 1.0, 1.0]
    report = report_of(*(record(value=v, status="fail") for v in values), invalid())

    assert version(report, FAQ).histogram == [2, 1, 0, 0, 0, 1, 0, 0, 0, 3]


def test_other_lines_are_skipped_and_counted_by_event() -> None:
    """Celery log lines and alerts are not records: skipped, counted per event name."""
    celery = {"level": "info", "event": "celery@host ready.", "logger": "celery.worker"}
    report = report_of(record(), celery, alert("a" * 64), {"no": "event"}, celery)

    assert report.records == 1
    assert report.skipped == {
        "(no event)": 1,
        "celery@host ready.": 2,
        "evidence_coverage.nondeterminism": 1,
    }


def test_alerts_are_counted_per_contract_version_through_their_hash() -> None:
    """An alert belongs to the version of the record with the same input hash."""
    report = report_of(
        record(input_hash="f" * 64, cache="conflict"),
        record(contract_version=PAYMENTS, input_hash="b" * 64),
        alert("f" * 64),
        alert("f" * 64),
        alert("0" * 64),
        rejected(),
    )

    assert (
        version(report, FAQ).nondeterminism_alerts,
        version(report, PAYMENTS).nondeterminism_alerts,
    ) == (2, 0)
    assert version(report, None).nondeterminism_alerts == 0
    assert (report.nondeterminism_alerts, report.unmatched_nondeterminism_alerts) == (3, 1)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        pytest.param('{"event": "evidence_coverage.scored",', "invalid JSON: ", id="truncated"),
        pytest.param("celery: worker ready", "invalid JSON: ", id="plain-text"),
        pytest.param("[1, 2]", "not a JSON object but list", id="array"),
        pytest.param(
            json.dumps(record(status="ok")),
            "bad evidence_coverage.scored record: schema: status: ",
            id="unknown-status",
        ),
        pytest.param(
            json.dumps(record(value=1.5)),
            "bad evidence_coverage.scored record: schema: value: ",
            id="value-above-1",
        ),
        pytest.param(
            json.dumps(record(value=float("nan"))),
            "bad evidence_coverage.scored record: schema: value: ",
            id="value-nan",
        ),
        pytest.param(
            json.dumps({k: v for k, v in record().items() if k != "status"}),
            "bad evidence_coverage.scored record: schema: status: Field required",
            id="missing-field",
        ),
    ],
)
def test_unreadable_lines_are_counted_with_their_line_number(line: str, error: str) -> None:
    """A line that is not JSON or not a valid record is counted unreadable, not fatal."""
    report = report_of(record(), line, record())

    assert (report.records, report.unreadable) == (2, 1)
    (unreadable,) = report.unreadable_lines
    assert unreadable.line == 2
    assert unreadable.error.startswith(error), unreadable.error


# The command ---------------------------------------------------------------------------


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def report_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run `evidence-worker report ARGS` in-process and capture what it printed."""

    def run(*argv: str | Path) -> Run:
        code = main(["report", *(str(arg) for arg in argv)])
        captured = capsys.readouterr()
        return Run(code=code, out=captured.out, err=captured.err)

    return run


@pytest.fixture
def records_file(write_jsonl: Callable[..., Path]) -> Path:
    """A small record file: two versions, an invalid row, a rejection, an alert, noise."""
    return write_jsonl(
        [
            record(value=1.0),
            record(
                value=0.5, status="fail", owner="product", input_hash="c" * 64, cache="conflict"
            ),
            alert("c" * 64),
            invalid("required_claim_ids must not be empty"),
            record(
                contract_version=PAYMENTS,
                policy_group="disclosure",
                value=0.5,
                status="fail",
                owner="product",
            ),
            rejected(),
            {"level": "info", "event": "Connected to redis://localhost:6379/0"},
            "{broken",
        ],
        name="records.jsonl",
    )


def test_cli_prints_a_table_per_contract_version(
    report_cli: Callable[..., Run], records_file: Path
) -> None:
    """By default the report is a table on stdout, one per version, exit 0."""
    run = report_cli(records_file)

    assert run.code == 0, run.err
    assert run.err == ""
    out = run.out.splitlines()
    assert out[0] == (
        f"report: {records_file}: records 5; skipped lines 2 "
        "(Connected to redis://localhost:6379/0 1, evidence_coverage.nondeterminism 1); "
        "unreadable lines 1; nondeterminism alerts 1; contract drift alerts 0"
    )
    assert out[1] == (
        "unreadable line 8: invalid JSON: "
        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    alerts = "nondeterminism alerts {}; contract drift alerts 0"
    faq_line = f"contract version {FAQ}: records 3; " + alerts.format(1)
    assert faq_line in out
    assert f"contract version {PAYMENTS}: records 1; " + alerts.format(0) in out
    assert "contract version (rejected before scoring): records 1; " + alerts.format(0) in out
    faq_row = out[out.index(faq_line) + 2]
    assert faq_row.split() == [
        "default",
        "3",
        "1",
        "1",
        "0",
        "1",
        "2",
        "0.7500",
        "0.5000",
        "1.0000",
        "2",
        "0",
        "1",
        "2026-12-01",
    ]
    assert "  default: invalid x1: required_claim_ids must not be empty" in out


def test_cli_json_prints_one_object_of_exact_structure(
    report_cli: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """`--json` prints one JSON object with the report's exact structure."""
    path = write_jsonl([record(value=0.5, status="fail", owner="product"), invalid(), rejected()])

    run = report_cli(path, "--json")

    assert run.code == 0
    assert len(run.out.splitlines()) == 1
    faq_default = {
        "contract_version": FAQ,
        "policy_group": "default",
        "records": 2,
        "statuses": {"pass": 0, "fail": 1, "invalid": 1, "scored": 0},
        "cache": {"miss": 2, "hit": 0, "conflict": 0},
        "valid": {"count": 1, "mean": 0.5, "min": 0.5, "max": 0.5},
        "invalid": {
            "count": 1,
            "top_reasons": [{"reason": "required_claim_ids must not be empty", "count": 1}],
        },
        "owners": {
            "attribution": 0,
            "retrieval": 0,
            "product": 1,
            "evaluation-data": 1,
            "release-rule": 0,
        },
        "no_owner": 0,
        "missing_claims": [],
        "rows_without_triage": 0,
        "max_required_claims": 3,
        "sparse_coverage": False,
        "thresholds": [0.85],
        "policy_versions": [{"policy_version": "2026-12-01", "count": 2}],
        "mixed_policy_versions": False,
        "nondeterminism_conflicts": 0,
        "nondeterminism_alerts": 0,
        "contract_drift_alerts": 0,
    }
    rejected_group = {
        "contract_version": None,
        "policy_group": None,
        "records": 1,
        "statuses": {"pass": 0, "fail": 0, "invalid": 1, "scored": 0},
        "cache": {"miss": 0, "hit": 0, "conflict": 0},
        "valid": {"count": 0, "mean": None, "min": None, "max": None},
        "invalid": {
            "count": 1,
            "top_reasons": [{"reason": "schema: answer: Field required", "count": 1}],
        },
        "owners": {
            "attribution": 0,
            "retrieval": 0,
            "product": 0,
            "evaluation-data": 1,
            "release-rule": 0,
        },
        "no_owner": 0,
        "missing_claims": [],
        "rows_without_triage": 0,
        "max_required_claims": None,
        "sparse_coverage": False,
        "thresholds": [],
        "policy_versions": [{"policy_version": "2026-12-01", "count": 1}],
        "mixed_policy_versions": False,
        "nondeterminism_conflicts": 0,
        "nondeterminism_alerts": 0,
        "contract_drift_alerts": 0,
    }
    assert json.loads(run.out) == {
        "source": str(path),
        "records": 3,
        "skipped": {},
        "unreadable": 0,
        "unreadable_lines": [],
        "nondeterminism_alerts": 0,
        "unmatched_nondeterminism_alerts": 0,
        "contract_drift_alerts": 0,
        "unmatched_contract_drift_alerts": 0,
        "contract_versions": [
            {
                "contract_version": FAQ,
                "label": FAQ,
                "records": 2,
                "histogram": [0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
                "nondeterminism_alerts": 0,
                "contract_drift_alerts": 0,
                "groups": [faq_default],
            },
            {
                "contract_version": None,
                "label": "(rejected before scoring)",
                "records": 1,
                "histogram": [0] * 10,
                "nondeterminism_alerts": 0,
                "contract_drift_alerts": 0,
                "groups": [rejected_group],
            },
        ],
    }


def test_cli_reads_stdin_for_dash(
    report_cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`report -` reads records from stdin and names it so."""
    body = (json.dumps(record()) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))

    run = report_cli("-", "--json")

    assert run.code == 0
    assert json.loads(run.out)["source"] == "stdin"


def test_cli_missing_path_exits_2_with_one_line(
    report_cli: Callable[..., Run], tmp_path: Path
) -> None:
    """An unreadable path is a user error: one line on stderr, exit 2, nothing on stdout."""
    run = report_cli(tmp_path / "missing.jsonl")

    assert (run.code, run.out) == (2, "")
    assert (
        run.err
        == f"evidence-worker: cannot read {tmp_path / 'missing.jsonl'}: No such file or directory\n"
    )


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        pytest.param([], "(0 other lines, 0 unreadable)", id="empty"),
        pytest.param(
            [{"event": "worker ready"}, alert("a" * 64)],
            "(2 other lines, 0 unreadable)",
            id="only-other-lines",
        ),
        pytest.param(
            ["{broken", "plain text"], "(0 other lines, 2 unreadable)", id="only-unreadable"
        ),
    ],
)
def test_cli_file_without_records_exits_2(
    report_cli: Callable[..., Run], write_jsonl: Callable[..., Path], rows: list[Any], message: str
) -> None:
    """A file holding no record is a user error: one clear line, exit 2."""
    path = write_jsonl(rows)

    run = report_cli(path)

    assert (run.code, run.out) == (2, "")
    assert run.err == f"evidence-worker: {path} contains no evidence_coverage records {message}\n"


def test_cli_unwritable_html_path_exits_2(
    report_cli: Callable[..., Run], records_file: Path, tmp_path: Path
) -> None:
    """An HTML output path that cannot be written is a user error, exit 2."""
    out = tmp_path / "no-such-dir" / "report.html"

    run = report_cli(records_file, "--html", out)

    assert run.code == 2
    assert run.err == f"evidence-worker: cannot write {out}: No such file or directory\n"


def test_cli_reports_the_example_run(
    report_cli: Callable[..., Run], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The records of `score` on the example file report the hand-computed means and alert."""
    main(
        [
            "score",
            str(EXAMPLES / "attribution-results.jsonl"),
            "--store",
            f"sqlite:///{tmp_path}/s.sqlite3",
            "--policy",
            str(EXAMPLES / "policy.toml"),
        ]
    )
    records = tmp_path / "records.jsonl"
    records.write_text(capsys.readouterr().out)

    report = json.loads(report_cli(records, "--json").out)

    payments, faq, rejected_bucket = report["contract_versions"]
    assert payments["contract_version"] == PAYMENTS
    assert faq["contract_version"] == FAQ
    assert faq["nondeterminism_alerts"] == 1
    assert faq["groups"][0]["valid"] == {"count": 4, "mean": 0.75, "min": 2 / 3, "max": 1.0}
    assert faq["groups"][0]["invalid"]["count"] == 2
    assert [g["valid"]["mean"] for g in payments["groups"]] == [0.25, 0.75]
    assert rejected_bucket["records"] == 1


# HTML ----------------------------------------------------------------------------------


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


@pytest.fixture
def html_page(
    report_cli: Callable[..., Run], tmp_path: Path, write_jsonl: Callable[..., Path]
) -> Callable[..., Page]:
    """Write records, run `report --html`, and parse the page."""

    def build(rows: list[dict[str, Any]]) -> Page:
        out = tmp_path / "report.html"
        run = report_cli(write_jsonl(rows), "--html", out)
        assert run.code == 0, run.err
        assert run.err == f"report: wrote {out}\n"
        page = Page()
        page.feed(out.read_text(encoding="utf-8"))
        page.close()
        return page

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
