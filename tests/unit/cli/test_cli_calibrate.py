"""`evidence-worker calibrate`: the review sheet from ROWS, and the agreement of filled sheets
(SPEC §12)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts import AttributionResult, input_hash
from tests.conftest import Run
from worker.audit.safe_csv import restored
from worker.cli.calibrate_decisions import COLUMNS

REQUIRED = [f"c{i}" for i in range(10)]
POLICY = ("--min-coverage", "0.85")
CANDIDATES = ("--candidates", "0.8,0.85,0.9")


@pytest.fixture
def rows_file(
    write_jsonl: Callable[..., Path], message_dict: Callable[..., dict[str, Any]]
) -> Callable[..., Path]:
    """AttributionResults of 10 required claims, one per (case ID, supported count)."""

    def write(cases: list[tuple[str, int]], name: str = "rows.jsonl") -> Path:
        return write_jsonl(
            [
                message_dict(
                    case_id=case_id,
                    answer=f"answer of {case_id}",
                    required_claim_ids=REQUIRED,
                    supported_claim_ids=REQUIRED[:supported],
                )
                for case_id, supported in cases
            ],
            name=name,
        )

    return write


def hash_of(message_dict: Callable[..., dict[str, Any]], case_id: str) -> str:
    return input_hash(
        AttributionResult.model_validate(
            message_dict(
                case_id=case_id,
                answer=f"answer of {case_id}",
                required_claim_ids=REQUIRED,
                supported_claim_ids=[],
            )
        )
    )


def read(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


# Values 0.5 .. 1.0 (10 required claims): 0.8 and 0.9 lie in two bands of 0.8,0.85,0.9.
CASES = [("r5", 5), ("r7", 7), ("r8", 8), ("r8b", 8), ("r9", 9), ("r10", 10)]


def test_the_sheet_has_the_documented_columns_and_rows(
    rows_file: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    cli: Callable[..., Run],
    tmp_path: Path,
) -> None:
    """One row per (candidate, row in its band), side by the candidate, decision empty, the
    lists as JSON, the explain command with the store and the policy."""
    rows = rows_file([("r7", 7), ("r8", 8), ("r9", 9)])
    sheet = tmp_path / "sheet.csv"

    run = cli("calibrate", rows, *POLICY, "--candidates", "0.8,0.9", "--sheet", sheet)

    assert run.code == 0
    found = read(sheet)
    assert tuple(found[0]) == COLUMNS
    assert [(r[0], r[1], r[2]) for r in found[1:]] == [
        ("0.8", "above", "r8"),
        ("0.9", "above", "r9"),
    ]
    r8 = hash_of(message_dict, "r8")
    assert found[1] == [
        "0.8",
        "above",
        "r8",
        r8,
        "default",
        "support-faq/2026-10",
        "0.8",
        json.dumps(REQUIRED, separators=(",", ":")),
        json.dumps(REQUIRED[:8], separators=(",", ":")),
        '["c8","c9"]',
        "attribution",
        f"evidence-worker explain {r8} --store sqlite:///evidence-coverage.sqlite3 "
        "--min-coverage 0.85",
        "",
    ]
    assert run.err == (
        f"calibrate: wrote {sheet}: 2 rows (0.8: 0 below, 1 above; 0.9: 0 below, 1 above) of 3 "
        f"rows read, group default, band 0.05, at most 25 per side; {rows} (explain finds its "
        "rows in sqlite:///evidence-coverage.sqlite3 once score has recorded them there); "
        "policy cli:0.85\n"
    )


def test_the_same_call_writes_the_same_file_byte_for_byte(
    rows_file: Callable[..., Path], cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Run twice, the two sheets are identical bytes."""
    rows = rows_file([(f"case-{i}", i % 11) for i in range(40)])
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"

    cli("calibrate", rows, *POLICY, *CANDIDATES, "--band", "0.2", "--sample", "3", "--sheet", first)
    cli(
        "calibrate", rows, *POLICY, *CANDIDATES, "--band", "0.2", "--sample", "3", "--sheet", second
    )

    assert first.read_bytes() == second.read_bytes()
    assert len(read(first)) == 1 + 3 * 2 * 3  # every candidate and side holds 3 of its rows


def test_the_store_in_the_explain_command_is_masked(
    rows_file: Callable[..., Path],
    cli: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A password in the store URL is never written into the sheet: ** stands for it."""
    monkeypatch.setenv("EVIDENCE_STORE_URL", "redis://ops:s3cret@redis.internal:6379/2")
    rows = rows_file([("r8", 8)])
    sheet = tmp_path / "sheet.csv"

    cli("calibrate", rows, *POLICY, *CANDIDATES, "--sheet", sheet)

    text = sheet.read_text()
    assert "s3cret" not in text
    assert "--store 'redis://ops:**@redis.internal:6379/2'" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--candidates", "0.8;0.9"), "--candidates '0.8;0.9': '0.8;0.9' is not a number; give "
         "thresholds in 0..1 separated by commas, e.g. 0.8,0.85,0.9"),
        (("--candidates", "abc"), "--candidates 'abc': 'abc' is not a number; give thresholds "
         "in 0..1 separated by commas, e.g. 0.8,0.85,0.9"),
        (("--candidates", "0.8,1.5"), "--candidates '0.8,1.5': 1.5 is outside 0..1"),
        ((*CANDIDATES, "--band", "1"), "--band 1.0 must be more than 0 and less than 1, e.g. 0.05"),
        ((*CANDIDATES, "--band", "1.5"), "--band 1.5 must be more than 0 and less than 1, "
         "e.g. 0.05"),
        ((*CANDIDATES, "--band", "0"), "--band 0.0 must be more than 0 and less than 1, e.g. 0.05"),
        ((*CANDIDATES, "--band", "-0.1"), "--band -0.1 must be more than 0 and less than 1, "
         "e.g. 0.05"),
        ((*CANDIDATES, "--band", "x"), "--band 'x' is not a number"),
        ((*CANDIDATES, "--group", "nope"), "--group 'nope' is not a group of policy cli:0.85 "
         "(groups: default)"),
    ],
)  # fmt: skip
def test_bad_sheet_options_are_one_line_exit_2_and_write_nothing(
    argv: tuple[str, ...],
    message: str,
    rows_file: Callable[..., Path],
    cli: Callable[..., Run],
    tmp_path: Path,
) -> None:
    """Each bad option: one line, exit 2, no sheet and no temporary file left behind."""
    rows = rows_file(CASES)
    sheet = tmp_path / "out" / "sheet.csv"
    sheet.parent.mkdir()

    run = cli("calibrate", rows, *POLICY, *argv, "--sheet", sheet)

    assert (run.code, run.out, run.err) == (2, "", f"evidence-worker: {message}\n")
    assert list(sheet.parent.iterdir()) == []


def test_release_rows_cannot_be_placed_on_a_sheet(
    write_jsonl: Callable[..., Path], cli: Callable[..., Run], tmp_path: Path
) -> None:
    """ReleaseRows carry no input hash, the sheet's key: one line, exit 2, nothing written."""
    rows = write_jsonl([{"case_id": "a", "required_claim_ids": ["c1"], "supported_claim_ids": []}])
    sheet = tmp_path / "sheet.csv"

    run = cli("calibrate", rows, *POLICY, *CANDIDATES, "--sheet", sheet)

    assert (run.code, run.err) == (
        2,
        "evidence-worker: row 1 (a) is a ReleaseRow: calibrate needs AttributionResults, whose "
        "input hash is the sheet's key (or use --store)\n",
    )
    assert not sheet.exists()


def test_invalid_rows_are_counted_apart_on_stderr(
    rows_file: Callable[..., Path],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    cli: Callable[..., Run],
    tmp_path: Path,
) -> None:
    """An invalid row of the group never reaches the sheet; stderr says why it matters."""
    rows = write_jsonl(
        [
            message_dict(case_id="ok", supported_claim_ids=["refund-window", "support-channel"]),
            message_dict(case_id="bad", answer="other", supported_claim_ids=["old-c1"]),
        ]
    )

    run = cli("calibrate", rows, *POLICY, "--candidates", "0.7", "--band", "0.1", "--sheet",
              tmp_path / "s.csv")  # fmt: skip

    assert run.err.splitlines()[1] == (
        "calibrate: 1 invalid row counted apart: a threshold chosen before they are repaired "
        "is chosen on the wrong population (owner evaluation-data)"
    )
    assert [r[2] for r in read(tmp_path / "s.csv")[1:]] == ["ok"]


INJECTIONS = ['=HYPERLINK("x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\t=1+1", "\r=1"]


def test_formula_case_ids_are_neutralised_and_read_back(
    rows_file: Callable[..., Path], cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Every cell read back with the csv module: none starts a formula; restored() gives the
    case IDs back exactly."""
    rows = rows_file([(case_id, 8) for case_id in INJECTIONS])
    sheet = tmp_path / "sheet.csv"

    cli("calibrate", rows, *POLICY, "--candidates", "0.8", "--sheet", sheet)

    found = read(sheet)
    for cells in found:
        for cell in cells:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    assert sorted(restored(r[2]) for r in found[1:]) == sorted(INJECTIONS)
    assert sorted(r[2] for r in found[1:]) == sorted("'" + c for c in INJECTIONS)


# Filled sheets


def filled(path: Path, sheet: Path, decide: Callable[[list[str]], str]) -> Path:
    """A copy of `sheet` with each row's decision set by `decide(cells)`."""
    rows = read(sheet)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(rows[0])
        for cells in rows[1:]:
            writer.writerow([*cells[:-1], decide(cells)])
    return path


@pytest.fixture
def sheet(rows_file: Callable[..., Path], cli: Callable[..., Run], tmp_path: Path) -> Path:
    """A sheet of 12 rows: values 0.7 and 0.8 at candidate 0.8, 0.8 and 0.9 at 0.9 (band 0.1),
    three rows each."""
    rows = rows_file([(f"case-{i}", 7 + i % 4) for i in range(12)])
    out = tmp_path / "sheet.csv"
    cli("calibrate", rows, *POLICY, "--candidates", "0.8,0.9", "--band", "0.1", "--sheet", out)
    return out


def by_value(cells: list[str]) -> str:
    """The candidate's own decision."""
    return "pass" if cells[1] == "above" else "fail"


def test_agreeing_reviewers_get_a_recommendation(
    sheet: Path, cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Two reviewers who decide every row as the candidate does: κ 1, the lowest candidate of
    the tie recommended, exit 0."""
    a = filled(tmp_path / "a.csv", sheet, by_value)
    b = filled(tmp_path / "b.csv", sheet, lambda cells: by_value(cells).upper())

    run = cli("calibrate", "--decisions", a, b, "--json")

    found = json.loads(run.out)
    assert run.code == 0
    assert [
        (c["candidate"], c["n"], c["kappa"], c["threshold_agreement"]) for c in found["candidates"]
    ] == [
        (0.8, 6, 1.0, 1.0),
        (0.9, 6, 1.0, 1.0),
    ]
    assert found["recommendation"] == 0.8
    assert run.err == (
        "calibrate: 2 sheets; 12 rows decided in every sheet; 0 rows left out (missing or "
        "undecided in a sheet: never guessed)\n"
    )


def test_rows_missing_or_undecided_in_one_sheet_are_left_out_and_counted(
    sheet: Path, cli: Callable[..., Run], tmp_path: Path
) -> None:
    """A row undecided in one sheet and a row deleted from another are never guessed."""
    a = filled(tmp_path / "a.csv", sheet, by_value)
    b = filled(tmp_path / "b.csv", sheet, lambda c: "" if c[2] == "case-1" else by_value(c))
    lines = (tmp_path / "b.csv").read_text().splitlines(keepends=True)
    (tmp_path / "b.csv").write_text("".join(lines[:-1]))

    run = cli("calibrate", "--decisions", a, b, "--json")

    assert sum(c["n"] for c in json.loads(run.out)["candidates"]) == 12 - 3
    assert "9 rows decided in every sheet; 3 rows left out" in run.err


def test_three_reviewers_are_measured_with_fleiss_kappa(
    sheet: Path, cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Three sheets: Fleiss' κ, named in the output."""
    a = filled(tmp_path / "a.csv", sheet, by_value)
    b = filled(tmp_path / "b.csv", sheet, by_value)
    c = filled(
        tmp_path / "c.csv", sheet, lambda cells: "fail" if cells[2] == "case-1" else by_value(cells)
    )

    run = cli("calibrate", "--decisions", a, b, c, "--json")

    found = json.loads(run.out)
    assert found["estimator"].startswith("Fleiss' kappa")
    assert found["candidates"][0]["percent_agreement"] < 1.0


def test_reviewers_who_disagree_get_no_recommendation(
    sheet: Path, cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Opposite decisions everywhere: no candidate qualifies, the message, exit 1."""
    a = filled(tmp_path / "a.csv", sheet, by_value)
    b = filled(tmp_path / "b.csv", sheet, lambda c: "fail" if by_value(c) == "pass" else "pass")

    run = cli("calibrate", "--decisions", a, b)

    assert run.code == 1
    assert run.out.splitlines()[-1] == (
        "reviewers disagree at every candidate: improve the claim contract, split the "
        "population, or route borderline rows to review (review_band)"
    )


def test_a_decision_other_than_pass_or_fail_names_file_line_and_value(
    sheet: Path, cli: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'maybe' on the sheet's third line: one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    filled(tmp_path / "a.csv", sheet, by_value)
    filled(tmp_path / "b.csv", sheet, lambda c: "maybe" if c[2] == read(sheet)[2][2] else "pass")

    run = cli("calibrate", "--decisions", "a.csv", "b.csv")

    assert (run.code, run.out, run.err) == (
        2,
        "",
        "evidence-worker: b.csv line 3: decision 'maybe' is not pass or fail (leave it empty "
        "when undecided)\n",
    )


def test_sheets_of_another_candidate_set_are_refused(
    sheet: Path,
    rows_file: Callable[..., Path],
    cli: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sheet of candidates 0.8,0.85 beside one of 0.8,0.9: one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other.csv"
    rows = rows_file([(f"case-{i}", 7 + i % 4) for i in range(12)], name="more.jsonl")
    cli("calibrate", rows, *POLICY, "--candidates", "0.8,0.85", "--band", "0.1", "--sheet", other)
    filled(tmp_path / "a.csv", sheet, by_value)
    filled(tmp_path / "b.csv", other, by_value)

    run = cli("calibrate", "--decisions", "a.csv", "b.csv")

    assert (run.code, run.err) == (
        2,
        "evidence-worker: b.csv: candidates 0.8,0.85 differ from a.csv's 0.8,0.9: give sheets "
        "of one calibrate run\n",
    )


def test_the_same_sheet_twice_is_refused(
    sheet: Path, cli: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reviewer's sheet given twice (even by another path) is not two reviewers."""
    monkeypatch.chdir(tmp_path)
    filled(tmp_path / "a.csv", sheet, by_value)

    run = cli("calibrate", "--decisions", "a.csv", "./a.csv")

    assert (run.code, run.err) == (
        2,
        "evidence-worker: ./a.csv is given twice: give each reviewer's sheet once\n",
    )


def test_one_sheet_is_not_enough(sheet: Path, cli: Callable[..., Run]) -> None:
    """Agreement needs two reviewers at least."""
    run = cli("calibrate", "--decisions", sheet)

    assert (run.code, run.err) == (
        2,
        "evidence-worker: --decisions needs two or more filled sheets, one per reviewer\n",
    )


def test_a_file_that_is_not_a_sheet_is_refused(
    sheet: Path, cli: Callable[..., Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CSV without the sheet's header: one line naming it, exit 2."""
    monkeypatch.chdir(tmp_path)
    Path("other.csv").write_text("case_id,score\na,1\n")

    run = cli("calibrate", "--decisions", sheet, "other.csv")

    assert run.code == 2
    assert run.err.startswith("evidence-worker: other.csv: not a calibration sheet (its header")


def test_the_reader_reads_back_neutralised_cells(
    rows_file: Callable[..., Path], cli: Callable[..., Run], tmp_path: Path
) -> None:
    """Sheets whose case IDs were neutralised are joined and counted like any."""
    rows = rows_file([(case_id, 8 + i % 2) for i, case_id in enumerate(INJECTIONS)])
    out = tmp_path / "sheet.csv"
    cli("calibrate", rows, *POLICY, "--candidates", "0.85", "--band", "0.1", "--sheet", out)
    a = filled(tmp_path / "a.csv", out, by_value)
    b = filled(tmp_path / "b.csv", out, by_value)

    run = cli("calibrate", "--decisions", a, b, "--json")

    (found,) = json.loads(run.out)["candidates"]
    assert (found["n"], found["kappa"]) == (6, 1.0)
