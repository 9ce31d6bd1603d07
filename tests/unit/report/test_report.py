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
from worker.report.aggregate import GroupReport, Report, VersionReport, build_report, render_text
from worker.report.html import PLOT_HEIGHT

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


def test_ecs_documents_are_read_by_their_event_action() -> None:
    """With EVIDENCE_LOG_SCHEMA=ecs the event name is event.action: records and alerts count
    as in the default schema, and ECS's envelope is ignored."""

    def ecs(line: dict[str, Any]) -> dict[str, Any]:
        fields = {k: v for k, v in line.items() if k not in ("timestamp", "level", "event")}
        return {
            "@timestamp": line.get("timestamp", "2026-12-02T18:15:50.505Z"),
            "log.level": line["level"],
            "message": line["event"],
            **fields,
            "event": {"action": line["event"], "dataset": "evidence_coverage"},
            "log": {"logger": "evidence_coverage"},
        }

    report = report_of(ecs(record()), ecs(invalid()), ecs(alert("a" * 64)), ecs(rejected()))

    assert report.records == 3
    faq = group(report, FAQ, "default")
    assert (faq.valid.count, faq.valid.mean, faq.invalid.count) == (1, 1.0, 1)
    assert report.nondeterminism_alerts == 1
    assert report.skipped == {"evidence_coverage.nondeterminism": 1}


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
            "top_reasons": [
                {
                    "reason": "required_claim_ids must not be empty",
                    "count": 1,
                    "distinct": 1,
                    "examples": [],
                }
            ],
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
            "top_reasons": [
                {
                    "reason": "schema: answer: Field required",
                    "count": 1,
                    "distinct": 1,
                    "examples": [],
                }
            ],
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
                "days": [],
                "undated": 2,
            },
            {
                "contract_version": None,
                "label": "(rejected before scoring)",
                "records": 1,
                "histogram": [0] * 10,
                "nondeterminism_alerts": 0,
                "contract_drift_alerts": 0,
                "groups": [rejected_group],
                "days": [],
                "undated": 1,
            },
        ],
        "alert_hashes": [],
        "alert_hashes_not_shown": 0,
        # Records written before records carried times: on no day, never on a guessed one.
        "span": {
            "field": "recorded_at",
            "first_day": None,
            "last_day": None,
            "days": 0,
            "undated": 3,
        },
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


# Triage (SPEC §9 "Report") -----------------------------------------------------------

OLD_RECORDS = Path(__file__).resolve().parents[2] / "fixtures" / "store-28e2bf7" / "records.jsonl"
SPARSE = "coverage takes at most 3 values here: a pass/fail rule with the missing IDs says more"
FINDING_OWNERS = {
    "not_cited": "product",
    "evidence_not_retrieved": "retrieval",
    "cited_span_invalid": "attribution",
    "supported_without_citation": "attribution",
}


def finding(claim_id: str, name: str) -> dict[str, Any]:
    """A finding as records carry it."""
    return {
        "claim_id": claim_id,
        "finding": name,
        "owner": FINDING_OWNERS[name],
        "document_ids": ["kb-1"],
    }


def failed(missing: list[str], *findings: tuple[str, str], **overrides: Any) -> dict[str, Any]:
    """A failed row missing `missing`, with (claim_id, finding) pairs as its findings."""
    return record(
        value=0.5,
        status="fail",
        reason="supported=3; required=6; missing=" + ",".join(sorted(missing)),
        owner="product",
        missing_claim_ids=sorted(missing),
        findings=[finding(claim_id, name) for claim_id, name in findings],
        **overrides,
    )


def drift_alert(input_hash: str, contract_version: str = FAQ) -> dict[str, Any]:
    """A contract_drift alert line (only the fields the report reads matter)."""
    return {
        "level": "error",
        "event": "evidence_coverage.contract_drift",
        "kind": "contract_drift",
        "case_id": "case-1",
        "contract_version": contract_version,
        "input_hash": input_hash,
    }


def notes_of(text: str, group_name: str) -> list[str]:
    prefix = f"  {group_name}: "
    return [line.removeprefix(prefix) for line in text.splitlines() if line.startswith(prefix)]


def test_every_owner_is_listed_per_group_with_zeros_and_no_owner_apart() -> None:
    """All five owners appear in every group, in one order; rows with no owner are apart."""
    report = report_of(
        record(),
        record(owner="release-rule", status="fail", value=0.5),
        record(owner="retrieval", status="fail", value=0.5),
        record(owner="retrieval", status="fail", value=0.5),
        record(policy_group="disclosure", owner="attribution", status="fail", value=0.5),
        invalid(policy_group="disclosure"),
        record(policy_group="disclosure", owner=None, status="pass"),
        record(policy_group="disclosure", owner=None, status="pass"),
    )

    default, disclosure = version(report, FAQ).groups
    assert list(default.owners.items()) == [
        ("attribution", 0),
        ("retrieval", 2),
        ("product", 0),
        ("evaluation-data", 0),
        ("release-rule", 1),
    ]
    assert default.no_owner == 1
    assert disclosure.owners == {
        "attribution": 1,
        "retrieval": 0,
        "product": 0,
        "evaluation-data": 1,
        "release-rule": 0,
    }
    assert disclosure.no_owner == 2
    assert notes_of(render_text(report), "disclosure")[0] == (
        "owners: attribution 1, retrieval 0, product 0, evaluation-data 1, release-rule 0; "
        "no owner 2"
    )


def test_top_missing_claims_carry_their_dominant_finding_with_ties_by_name() -> None:
    """Five claims, most rows first (ties by ID); the dominant finding is the most frequent
    one for that claim in those rows, ties by name; findings elsewhere do not count."""
    report = report_of(
        failed(["b", "a"], ("a", "not_cited"), ("b", "not_cited")),
        failed(["b", "a"], ("a", "not_cited"), ("b", "evidence_not_retrieved")),
        failed(["a", "b"], ("a", "evidence_not_retrieved"), ("b", "cited_span_invalid")),
        failed(["c", "d"], ("c", "evidence_not_retrieved"), ("d", "not_cited")),
        failed(["c", "e", "f"]),
        failed(["g"], ("g", "not_cited")),
        # "a" is not missing here: its finding must not count for it, nor for anyone.
        record(findings=[finding("a", "supported_without_citation")]),
        # A finding naming another claim than the missing one is not the missing one's.
        failed(["d"], ("a", "evidence_not_retrieved")),
    )

    claims = group(report, FAQ, "default").missing_claims
    assert [(c.claim_id, c.rows, c.finding, c.finding_count) for c in claims] == [
        ("a", 3, "not_cited", 2),
        ("b", 3, "cited_span_invalid", 1),
        ("c", 2, "evidence_not_retrieved", 1),
        ("d", 2, "not_cited", 1),
        ("e", 1, None, 0),
    ]
    assert notes_of(render_text(report), "default")[1:6] == [
        "missing x3: a (dominant finding: not_cited (2 of 3 rows))",
        "missing x3: b (dominant finding: cited_span_invalid (1 of 3 rows))",
        "missing x2: c (dominant finding: evidence_not_retrieved (1 of 2 rows))",
        "missing x2: d (dominant finding: not_cited (1 of 2 rows))",
        "missing x1: e (dominant finding: no finding recorded)",
    ]


def test_missing_claims_are_per_group_and_per_version() -> None:
    """A claim missing in two groups is counted in each, never summed across versions."""
    report = report_of(
        failed(["x"], ("x", "not_cited")),
        failed(["x"], ("x", "not_cited"), policy_group="disclosure"),
        failed(["x"], ("x", "evidence_not_retrieved"), contract_version=PAYMENTS),
    )

    summaries = [
        [(c.claim_id, c.rows, c.finding) for c in group(report, v, g).missing_claims]
        for v, g in ((FAQ, "default"), (FAQ, "disclosure"), (PAYMENTS, "default"))
    ]
    assert summaries == [
        [("x", 1, "not_cited")],
        [("x", 1, "not_cited")],
        [("x", 1, "evidence_not_retrieved")],
    ]


def two_claims(value: float, status: str = "fail") -> dict[str, Any]:
    supported = round(value * 2)
    missing = "none" if supported == 2 else "c2"
    return record(
        value=value, status=status, reason=f"supported={supported}; required=2; missing={missing}"
    )


def test_sparse_warning_when_every_valid_row_has_at_most_two_required_claims() -> None:
    """Rows of one or two required claims (and invalid ones, which have no count): warned."""
    report = report_of(
        two_claims(1.0, "pass"),
        two_claims(0.5),
        record(value=1.0, reason="supported=1; required=1; missing=none"),
        invalid(),
    )

    summary = group(report, FAQ, "default")
    assert (summary.max_required_claims, summary.sparse_coverage) == (2, True)
    assert f"  default: WARNING: {SPARSE}" in render_text(report).splitlines()


@pytest.mark.parametrize(
    "third",
    [
        pytest.param(record(value=1.0, reason="supported=3; required=3; missing=none"), id="3"),
        pytest.param(record(value=0.5, reason="coverage is 0.5"), id="unknown-count"),
    ],
)
def test_no_sparse_warning_when_one_row_has_three_claims_or_cannot_say(
    third: dict[str, Any],
) -> None:
    """One valid row with three required claims, or whose count is unknown, lifts it."""
    report = report_of(two_claims(1.0, "pass"), two_claims(0.5), third)

    summary = group(report, FAQ, "default")
    assert summary.sparse_coverage is False
    assert SPARSE not in render_text(report)


def test_no_sparse_warning_for_a_group_without_valid_rows() -> None:
    """Invalid rows carry no required count: nothing to warn about."""
    summary = group(report_of(invalid(), invalid()), FAQ, "default")

    assert (summary.max_required_claims, summary.sparse_coverage) == (None, False)


def test_both_alert_kinds_are_counted_per_group_version_and_in_the_headline() -> None:
    """Alerts are placed through their hash (group), a drift alert without a record through
    its contract version (version only); the rest are counted as with no record here."""
    report = report_of(
        record(input_hash="1" * 64, cache="conflict"),
        record(input_hash="2" * 64, contract_drift=True, owner="evaluation-data"),
        record(input_hash="3" * 64, policy_group="disclosure"),
        record(input_hash="4" * 64, contract_version=PAYMENTS),
        alert("1" * 64),
        alert("1" * 64),
        alert("3" * 64),
        alert("9" * 64),
        drift_alert("2" * 64),
        drift_alert("8" * 64),  # its record is elsewhere: the version still counts it
        drift_alert("7" * 64, contract_version="unknown/1"),
    )

    counts = [
        (g.policy_group, g.nondeterminism_alerts, g.contract_drift_alerts)
        for g in version(report, FAQ).groups
    ]
    assert counts == [("default", 2, 1), ("disclosure", 1, 0)]
    faq, payments = version(report, FAQ), version(report, PAYMENTS)
    assert (faq.nondeterminism_alerts, faq.contract_drift_alerts) == (3, 2)
    assert (payments.nondeterminism_alerts, payments.contract_drift_alerts) == (0, 0)
    assert (report.nondeterminism_alerts, report.unmatched_nondeterminism_alerts) == (4, 1)
    assert (report.contract_drift_alerts, report.unmatched_contract_drift_alerts) == (3, 1)
    text = render_text(report).splitlines()
    assert text[0].endswith(
        "; nondeterminism alerts 4 (1 with no record in this file)"
        "; contract drift alerts 3 (1 with no record in this file)"
    )
    assert (
        f"contract version {FAQ}: records 3; nondeterminism alerts 3; contract drift alerts 2"
        in text
    )
    assert "  default: alerts: nondeterminism 2, contract drift 1" in text
    assert report.skipped == {
        "evidence_coverage.contract_drift": 3,
        "evidence_coverage.nondeterminism": 4,
    }


def test_thresholds_are_collected_per_group() -> None:
    """Each group keeps the distinct thresholds its rows were decided under, sorted."""
    report = report_of(
        record(threshold=0.9),
        record(threshold=0.85),
        record(threshold=0.9),
        record(policy_group="disclosure", threshold=1),
        record(policy_group="report-only", status="scored", threshold=None, policy_version=None),
    )

    assert [g.thresholds for g in version(report, FAQ).groups] == [[0.85, 0.9], [1.0], []]
    assert notes_of(render_text(report), "disclosure")[-2] == "threshold 1.0"


def test_old_records_report_without_triage_fields() -> None:
    """Records written before triage (no missing_claim_ids, findings) still report: their
    missing claims are "not recorded", never "none"; the reason still gives the count."""
    with OLD_RECORDS.open("rb") as handle:
        report = build_report(enumerate(handle, start=1), source="old")

    assert (report.records, report.unreadable) == (12, 0)
    summaries = {
        (g.contract_version, g.policy_group): (
            g.owners["product"],
            g.owners["evaluation-data"],
            g.no_owner,
            g.missing_claims,
            g.rows_without_triage,
            g.sparse_coverage,
        )
        for v in report.contract_versions
        for g in v.groups
    }
    assert summaries == {
        (PAYMENTS, "default"): (1, 0, 0, [], 1, False),
        (PAYMENTS, "disclosure"): (1, 0, 1, [], 2, True),
        (FAQ, "default"): (3, 2, 2, [], 5, False),
        (None, None): (0, 2, 0, [], 0, False),
    }
    notes = notes_of(render_text(report), "default")
    assert "missing claims not recorded on 5 valid rows (written before triage)" in notes
    assert (report.nondeterminism_alerts, version(report, FAQ).nondeterminism_alerts) == (2, 2)


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
def tables_page(
    report_cli: Callable[..., Run], tmp_path: Path, write_jsonl: Callable[..., Path]
) -> Callable[..., Tables]:
    def build(rows: list[dict[str, Any] | str]) -> Tables:
        out = tmp_path / "report.html"
        run = report_cli(write_jsonl(rows), "--html", out)
        assert run.code == 0, run.err
        page = Tables()
        page.feed(out.read_text(encoding="utf-8"))
        page.close()
        return page

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
        ["default", "<b>c</b>", "1", "evidence_not_retrieved (1 of 1 rows)"],
    ]
    assert "b" not in page.tags


def test_html_draws_the_threshold_on_the_histogram(tables_page: Callable[..., Tables]) -> None:
    """A marker at the threshold's place on the value axis, labelled "threshold 0.85"."""
    page = tables_page([record(), record(value=0.5, status="fail"), invalid()])

    (marker,) = page.thresholds
    assert (marker["data-threshold"], marker["x1"], marker["x2"]) == ("0.85", "370", "370")
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
