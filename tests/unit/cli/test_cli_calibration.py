"""The review band and the observation window on the command line (SPEC §12): gate's exit
codes and lines, score's summary, records' filters, explain's words, the window's WARNING."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Run
from worker.cli import policy_options

BANDED = 'version = "b-1"\n[groups.default]\nmin_coverage = 0.85\nreview_band = 0.1\n'
PREVIOUS = 'version = "2026-11-01"\n[groups.default]\nmin_coverage = 0.6\n'
OBSERVED = (
    'version = "2026-12-15"\n[groups.default]\nmin_coverage = 0.85\n'
    '[observe]\nprevious = "policy-2026-11.toml"\nuntil = "2026-12-31"\n'
)
ENDED_WARNING = (
    "WARNING: the observation window of policy 2026-12-15 ended on 2026-12-31: decisions no"
    " longer carry policy 2026-11-01; remove [observe] from the policy file and delete {path}"
)


def row(case_id: str, supported: int, *, of: int = 10, **fields: Any) -> dict[str, Any]:
    """A ReleaseRow with `supported` of `of` claims supported."""
    return {
        "case_id": case_id,
        "required_claim_ids": [f"c{i}" for i in range(of)],
        "supported_claim_ids": [f"c{i}" for i in range(supported)],
        **fields,
    }


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    """A folder with the banded policy, and an observed one beside its previous file."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "banded.toml").write_text(BANDED, encoding="utf-8")
    (folder / "policy-2026-11.toml").write_text(PREVIOUS, encoding="utf-8")
    (folder / "observed.toml").write_text(OBSERVED, encoding="utf-8")
    return folder


@pytest.fixture
def today(monkeypatch: pytest.MonkeyPatch) -> Callable[[date], None]:
    """Set the CLI's UTC date (the clock of the window's open/ended state)."""

    def set_today(day: date) -> None:
        monkeypatch.setattr(policy_options, "utc_today", lambda: day)

    return set_today


def test_gate_exits_1_on_a_blocking_review_row_and_lists_it_as_review(
    cli: Callable[..., Run], write_jsonl: Callable[..., Path], policies: Path
) -> None:
    """9 of 10 passes 0.85; 8 of 10 is within 0.1 below it: review, release-rule, exit 1."""
    run = cli(
        "gate",
        write_jsonl([row("ok", 9), row("borderline", 8)]),
        "--policy",
        policies / "banded.toml",
    )

    line = run.lines[1]
    assert run.code == 1
    assert (line["status"], line["owner"], line["threshold"], line["review_band"]) == (
        "review",
        "release-rule",
        0.85,
        0.1,
    )
    assert line["reason"] == "supported=8; required=10; missing=c8,c9"
    assert run.err == (
        "gate: 2 rows: pass 1, review 1; 1 blocking row to review (within a review_band: a"
        " person decides; evidence-worker calibrate); policy b-1; exit 1\n"
    )


def test_a_non_blocking_review_row_never_changes_the_exit_code(
    cli: Callable[..., Run], write_jsonl: Callable[..., Path], policies: Path
) -> None:
    """A review row with blocking false is reported, named in the summary apart from the
    non-blocking failures, and the gate exits 0."""
    rows = [row("ok", 9), row("borderline", 8, blocking=False), row("low", 2, blocking=False)]
    run = cli("gate", write_jsonl(rows), "--policy", policies / "banded.toml")

    assert (run.code, [line["status"] for line in run.lines]) == (0, ["pass", "review", "fail"])
    assert run.err == (
        "gate: 3 rows: fail 1, pass 1, review 1; policy b-1; 1 non-blocking row failed or"
        " invalid (reported, never the exit code); 1 non-blocking row in review (reported,"
        " never the exit code); exit 0\n"
    )


@pytest.mark.parametrize(
    ("supported", "status", "code"),
    [(7, "fail", 1), (8, "review", 1), (9, "pass", 0)],
    ids=["at-the-edge-fails", "inside-the-band", "at-the-threshold"],
)
def test_gate_at_the_band_s_edges(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    tmp_path: Path,
    supported: int,
    status: str,
    code: int,
) -> None:
    """Threshold 0.9, band 0.2: 7 of 10 (exactly 0.9 - 0.2) fails, 8 of 10 is review, 9 of 10
    (exactly the threshold) passes."""
    policy = tmp_path / "p.toml"
    policy.write_text(
        'version = "e"\n[groups.default]\nmin_coverage = 0.9\nreview_band = 0.2\n',
        encoding="utf-8",
    )
    run = cli("gate", write_jsonl([row("r", supported)]), "--policy", policy)

    assert (run.code, run.lines[0]["status"]) == (code, status)


def test_review_and_an_invalid_row_exit_2(
    cli: Callable[..., Run], write_jsonl: Callable[..., Path], policies: Path
) -> None:
    """Invalid outranks review, as it outranks fail."""
    rows = [row("borderline", 8), {**row("bad", 1), "supported_claim_ids": ["x"]}]
    run = cli("gate", write_jsonl(rows), "--policy", policies / "banded.toml")

    assert (run.code, [line["status"] for line in run.lines]) == (2, ["review", "invalid"])


def test_gate_in_an_open_window_carries_the_previous_rule_on_every_row(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    policies: Path,
    today: Callable[[date], None],
) -> None:
    """On the window's last day: every row says the previous version and status, a row that
    fails now and passed then has policy_change and owner release-rule."""
    today(date(2026, 12, 31))
    run = cli(
        "gate", write_jsonl([row("ok", 9), row("moved", 7)]), "--policy", policies / "observed.toml"
    )

    assert [
        (line["status"], line["previous_policy_version"], line["previous_status"], line["owner"])
        for line in run.lines
    ] == [("pass", "2026-11-01", "pass", None), ("fail", "2026-11-01", "pass", "release-rule")]
    assert run.lines[1]["policy_change"] == {
        "baseline_version": "2026-11-01",
        "baseline_status": "pass",
        "baseline_threshold": 0.6,
    }
    assert run.err.endswith(
        "policy 2026-12-15; 1 row changed status against previous policy 2026-11-01"
        " (observation window until 2026-12-31); exit 1\n"
    )


def test_baseline_policy_wins_over_the_window(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    policies: Path,
    tmp_path: Path,
    today: Callable[[date], None],
) -> None:
    """--baseline-policy is the baseline, as without a window; rows carry no previous_*."""
    today(date(2026, 12, 1))
    older = tmp_path / "older.toml"
    older.write_text('version = "old"\n[groups.default]\nmin_coverage = 0.9\n', encoding="utf-8")
    run = cli(
        "gate",
        write_jsonl([row("moved", 7)]),
        "--policy",
        policies / "observed.toml",
        "--baseline-policy",
        older,
    )

    (line,) = run.lines
    assert ("previous_status" in line, line.get("policy_change")) == (False, None)
    assert "against baseline policy old" in run.err


def test_an_ended_window_warns_once_and_decides_under_the_policy_alone(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    policies: Path,
    today: Callable[[date], None],
) -> None:
    """The day after until: exactly one WARNING line naming the file to delete; rows carry
    no previous rule and the failure is its own again."""
    today(date(2027, 1, 1))
    run = cli("gate", write_jsonl([row("moved", 7)]), "--policy", policies / "observed.toml")

    warnings = [line for line in run.err.splitlines() if line.startswith("WARNING")]
    assert warnings == [ENDED_WARNING.format(path=policies / "policy-2026-11.toml")]
    (line,) = run.lines
    assert ("previous_status" in line, line["owner"]) == (False, "product")


def test_score_warns_once_for_an_ended_window_from_the_environment(
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    policies: Path,
    today: Callable[[date], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EVIDENCE_POLICY_FILE with an ended window: score prints the WARNING once."""
    today(date(2027, 1, 1))
    monkeypatch.setenv("EVIDENCE_POLICY_FILE", str(policies / "observed.toml"))
    run = cli("score", write_jsonl([message_dict()]), "--store", store_url)

    warnings = [line for line in run.err.splitlines() if line.startswith("WARNING")]
    assert warnings == [ENDED_WARNING.format(path=policies / "policy-2026-11.toml")]


def test_score_summary_counts_rows_the_window_changed(
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """A window open until 2099: the line carries previous_status, the summary counts it."""
    (tmp_path / "old.toml").write_text(PREVIOUS, encoding="utf-8")
    policy = tmp_path / "new.toml"
    policy.write_text(
        OBSERVED.replace("policy-2026-11.toml", "old.toml").replace("2026-12-31", "2099-12-31"),
        encoding="utf-8",
    )
    run = cli("score", write_jsonl([message_dict()]), "--store", store_url, "--policy", policy)

    (record,) = run.records
    assert (record["status"], record["previous_status"], record["owner"]) == (
        "fail",
        "pass",
        "release-rule",
    )
    assert "; 1 row changed status against previous policy 2026-11-01 (observation window);" in (
        run.err
    )


def test_a_missing_previous_file_is_a_configuration_error(
    cli: Callable[..., Run], write_jsonl: Callable[..., Path], tmp_path: Path
) -> None:
    """One line, exit 2, nothing on stdout."""
    policy = tmp_path / "new.toml"
    policy.write_text(OBSERVED, encoding="utf-8")
    run = cli("gate", write_jsonl([row("ok", 9)]), "--policy", policy)

    assert (run.code, run.out) == (2, "")
    assert run.err == (
        f"evidence-worker: configuration error: policy file {policy}: observe.previous: cannot"
        f" read {tmp_path / 'policy-2026-11.toml'}: No such file or directory\n"
    )


def test_a_band_of_one_is_a_configuration_error(
    cli: Callable[..., Run], write_jsonl: Callable[..., Path], tmp_path: Path
) -> None:
    """review_band = 1: one line, exit 2."""
    policy = tmp_path / "p.toml"
    policy.write_text(BANDED.replace("0.1", "1"), encoding="utf-8")
    run = cli("gate", write_jsonl([row("ok", 9)]), "--policy", policy)

    assert (run.code, run.err) == (
        2,
        f"evidence-worker: configuration error: policy file {policy}:"
        " groups.default.review_band: must be above 0 and below 1 (e.g. 0.03)\n",
    )


@pytest.fixture
def stored(
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> Callable[[], None]:
    """Score three messages (three answers: three input hashes): 3 of 3, 2 of 3 and 1 of 3
    claims supported."""

    def run() -> None:
        claims = ["refund-window", "refund-method", "support-channel"]
        rows = [
            message_dict(case_id=f"case-{n}", supported_claim_ids=claims[:n], answer=f"A{n}.")
            for n in (3, 2, 1)
        ]
        assert cli("score", write_jsonl(rows), "--store", store_url).code in (0, 1)

    return run


def test_records_status_review_selects_the_band_s_rows(
    cli: Callable[..., Run], store_url: str, stored: Callable[[], None], tmp_path: Path
) -> None:
    """Under threshold 0.7, band 0.1: only 2 of 3 (0.667) is review."""
    stored()
    policy = tmp_path / "p.toml"
    policy.write_text(
        'version = "r"\n[groups.default]\nmin_coverage = 0.7\nreview_band = 0.1\n',
        encoding="utf-8",
    )
    run = cli("records", "--store", store_url, "--policy", policy, "--status", "review")

    assert [(r["case_id"], r["status"], r["review_band"]) for r in run.lines] == [
        ("case-2", "review", 0.1)
    ]


def test_records_previous_status_filters_on_the_previous_rule(
    cli: Callable[..., Run],
    store_url: str,
    stored: Callable[[], None],
    policies: Path,
    today: Callable[[date], None],
) -> None:
    """In the window (0.85 now, 0.6 before): previous_status pass selects 3/3 and 2/3, and
    with --status fail only 2/3, the row the switch changed."""
    stored()
    today(date(2026, 12, 20))
    observed = policies / "observed.toml"
    both = cli("records", "--store", store_url, "--policy", observed, "--previous-status", "pass")
    changed = cli(
        "records",
        "--store",
        store_url,
        "--policy",
        observed,
        "--previous-status",
        "pass",
        "--status",
        "fail",
    )

    assert sorted((r["case_id"], r["previous_status"]) for r in both.lines) == [
        ("case-2", "pass"),
        ("case-3", "pass"),
    ]
    assert [(r["case_id"], r["owner"]) for r in changed.lines] == [("case-2", "release-rule")]


def test_records_previous_status_matches_nothing_outside_a_window(
    cli: Callable[..., Run], store_url: str, stored: Callable[[], None], policies: Path
) -> None:
    """Without a window no row has a previous status: the filter selects none."""
    stored()
    run = cli(
        "records", "--store", store_url, "--policy", policies / "banded.toml",
        "--previous-status", "pass",
    )  # fmt: skip

    assert (run.code, run.out) == (0, "")


def test_explain_says_why_a_row_is_review(
    cli: Callable[..., Run], store_url: str, stored: Callable[[], None], tmp_path: Path
) -> None:
    """explain's status names the band, its owner line the band, threshold and next artifact;
    it exits 1, as for a failure."""
    stored()
    policy = tmp_path / "p.toml"
    policy.write_text(
        'version = "r"\n[groups.default]\nmin_coverage = 0.7\nreview_band = 0.1\n',
        encoding="utf-8",
    )
    run = cli("explain", "--case", "case-2", "--store", store_url, "--policy", policy)

    lines = run.out.splitlines()
    assert run.code == 1
    assert "status: review under policy r, group default, threshold 0.7, review_band 0.1" in lines
    assert (
        "owner: release-rule (review: value 0.6667 is below threshold 0.7 by less than"
        " review_band 0.1 (policy r, group default): a person decides; open the calibration"
        " sheet (`evidence-worker calibrate`))"
    ) in lines


def test_explain_in_a_window_says_the_previous_status(
    cli: Callable[..., Run],
    store_url: str,
    stored: Callable[[], None],
    policies: Path,
    today: Callable[[date], None],
) -> None:
    """In the window, explain's `previous:` line is the previous rule's decision."""
    stored()
    today(date(2026, 12, 20))
    run = cli(
        "explain", "--case", "case-2", "--store", store_url, "--policy", policies / "observed.toml"
    )

    assert "previous: pass under policy 2026-11-01, group default, threshold 0.6" in (
        run.out.splitlines()
    )
