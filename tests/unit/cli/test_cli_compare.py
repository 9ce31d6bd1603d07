"""`evidence-worker compare ROWS --legacy FILE`: every row in one class, disagreements row by
row, exit codes (SPEC §12)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, Run
from tests.unit.cli.factories import EXAMPLE_POLICY

REQUIRED = ["c1", "c2", "c3", "c4"]
POLICY = ("--min-coverage", "0.75")
INVALID_NOTE = (
    "a threshold chosen before they are repaired is chosen on the wrong population "
    "(owner evaluation-data)"
)


def release_row(case_id: str, supported: int, **fields: Any) -> dict[str, Any]:
    """A ReleaseRow with 4 required claims, the first `supported` of them supported."""
    return {
        "case_id": case_id,
        "required_claim_ids": REQUIRED,
        "supported_claim_ids": REQUIRED[:supported],
        **fields,
    }


@pytest.fixture
def crafted(write_jsonl: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """ROWS and a legacy file with one or more rows of every class."""
    rows = write_jsonl(
        [
            release_row("both-pass", 4),
            release_row("both-fail", 1),
            release_row("old-pass", 2),  # 0.5: fails now
            release_row("old-fail", 3),  # 0.75: passes now
            release_row("old-fail-too", 4),
            release_row("invalid", 0, supported_claim_ids=["c9"]),
            release_row("new-only", 4),
            "{not json",
        ],
        name="rows.jsonl",
    )
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"case_id": "both-pass", "score": 0.9},
                {"case_id": "both-fail", "score": 0.1},
                {"case_id": "old-pass", "score": 0.2, "passed": True},
                {"case_id": "old-fail", "score": 0.6},
                {"case_id": "old-fail-too", "score": 0.69},
                {"case_id": "invalid", "score": 0.95},
                {"case_id": "old-only", "score": 0.5},
            ]
        )
        + "\n"
    )
    return rows, legacy


def test_every_class_is_counted_and_each_row_to_read_is_printed(
    crafted: tuple[Path, Path], cli: Callable[..., Run]
) -> None:
    """Exact counts per class on stderr; stdout lists the disagreements, the invalid and the
    unmatched rows, in input order; exit 1 for the disagreements."""
    rows, legacy = crafted

    run = cli("compare", rows, "--legacy", legacy, "--legacy-threshold", "0.7", *POLICY)

    assert run.code == 1
    assert [(line["case_id"], line["class"]) for line in run.lines] == [
        ("old-pass", "legacy_pass_new_fail"),
        ("old-fail", "legacy_fail_new_pass"),
        ("old-fail-too", "legacy_fail_new_pass"),
        ("invalid", "new_invalid"),
        ("new-only", "unmatched"),
        (None, "new_invalid"),
        ("old-only", "unmatched"),
    ]
    assert run.err.splitlines() == [
        f"compare: 9 rows: both_pass 1, both_fail 1, legacy_pass_new_fail 1, "
        f"legacy_fail_new_pass 2, new_invalid 2, unmatched 2; rows {rows}; legacy {legacy}; "
        "policy cli:0.75; exit 1",
        f"compare: 2 invalid rows counted apart: {INVALID_NOTE}",
    ]


def test_a_disagreeing_line_has_exactly_the_documented_keys(
    crafted: tuple[Path, Path], cli: Callable[..., Run]
) -> None:
    """case_id, class, legacy_score, value, status, owner, missing_claim_ids, reason."""
    rows, legacy = crafted

    run = cli("compare", rows, "--legacy", legacy, "--legacy-threshold", "0.7", *POLICY)

    assert run.lines[0] == {
        "case_id": "old-pass",
        "class": "legacy_pass_new_fail",
        "legacy_score": 0.2,
        "value": 0.5,
        "status": "fail",
        "owner": "product",
        "missing_claim_ids": ["c3", "c4"],
        "reason": "supported=2; required=4; missing=c3,c4",
    }


def test_json_is_one_object_with_the_six_counts_and_the_rows(
    crafted: tuple[Path, Path], cli: Callable[..., Run]
) -> None:
    """--json: the counts keyed by class name, and the rows stdout would list."""
    rows, legacy = crafted

    run = cli("compare", rows, "--legacy", legacy, "--legacy-threshold", "0.7", *POLICY, "--json")

    (found,) = run.lines
    assert {key: value for key, value in found.items() if key != "rows"} == {
        "both_pass": 1,
        "both_fail": 1,
        "legacy_pass_new_fail": 1,
        "legacy_fail_new_pass": 2,
        "new_invalid": 2,
        "unmatched": 2,
    }
    assert len(found["rows"]) == 7


def test_agreement_on_every_matched_valid_row_exits_0(
    write_jsonl: Callable[..., Path], tmp_path: Path, cli: Callable[..., Run]
) -> None:
    """Unmatched rows alone do not fail the comparison: exit 0, no invalid note."""
    rows = write_jsonl([release_row("a", 4), release_row("b", 1), release_row("c", 4)])
    legacy = tmp_path / "legacy.csv"
    legacy.write_text("case_id,score,passed\r\na,0.1,true\r\nb,0.9,FALSE\r\n")

    run = cli("compare", rows, "--legacy", legacy, *POLICY)

    assert run.code == 0
    assert [line["class"] for line in run.lines] == ["unmatched"]
    assert len(run.err.splitlines()) == 1


def test_a_legacy_csv_is_recognised_by_its_content(
    write_jsonl: Callable[..., Path], tmp_path: Path, cli: Callable[..., Run]
) -> None:
    """A file named neither .csv nor .jsonl whose first line is not a JSON object is CSV."""
    rows = write_jsonl([release_row("a", 4)])
    legacy = tmp_path / "legacy.txt"
    legacy.write_text("score,case_id\n0.9,a\n")

    run = cli("compare", rows, "--legacy", legacy, "--legacy-threshold", "0.5", *POLICY, "--json")

    assert (run.code, run.lines[0]["both_pass"]) == (0, 1)


def test_the_shipped_examples_show_every_class(cli: Callable[..., Run]) -> None:
    """The examples' legacy scores against attribution-results.jsonl: every class present."""
    run = cli(
        "compare",
        EXAMPLES / "attribution-results.jsonl",
        "--legacy",
        EXAMPLES / "legacy-scores.jsonl",
        "--legacy-threshold",
        "0.7",
        "--policy",
        EXAMPLE_POLICY,
        "--json",
    )

    found = run.lines[0]
    assert (run.code, {key: found[key] for key in found if key != "rows"}) == (
        1,
        {
            "both_pass": 1,
            "both_fail": 2,
            "legacy_pass_new_fail": 2,
            "legacy_fail_new_pass": 1,
            "new_invalid": 3,
            "unmatched": 2,
        },
    )


LEGACY_ERRORS = {
    "duplicate case": (
        '{"case_id": "a", "score": 0.9}\n{"case_id": "a", "score": 0.8}\n',
        "legacy.jsonl line 2: case_id 'a' repeats line 1: give each case one legacy score",
    ),
    "no score": ('{"case_id": "a"}\n', "legacy.jsonl line 1: no score for case 'a'"),
    "score not a number": (
        '{"case_id": "a", "score": "high"}\n',
        "legacy.jsonl line 1: score 'high' is not a finite number",
    ),
    "passed not a boolean": (
        '{"case_id": "a", "score": 0.9, "passed": "yes"}\n',
        "legacy.jsonl line 1: passed 'yes' is not true or false",
    ),
    "no case_id": ('{"score": 0.9}\n', "legacy.jsonl line 1: no case_id (a non-empty string)"),
    "not JSON": ('{"case_id": \n', "legacy.jsonl line 1: not a JSON object"),
    "empty": ("\n", "legacy file legacy.jsonl holds no rows"),
}


@pytest.mark.parametrize(("content", "message"), LEGACY_ERRORS.values(), ids=LEGACY_ERRORS.keys())
def test_a_bad_legacy_file_is_one_line_and_exit_2(
    content: str,
    message: str,
    write_jsonl: Callable[..., Path],
    tmp_path: Path,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each bad legacy file: one line naming the file and line, exit 2, nothing on stdout."""
    monkeypatch.chdir(tmp_path)
    rows = write_jsonl([release_row("a", 4)])
    Path("legacy.jsonl").write_text(content)

    run = cli("compare", rows, "--legacy", "legacy.jsonl", "--legacy-threshold", "0.5", *POLICY)

    assert (run.code, run.out, run.err) == (2, "", f"evidence-worker: {message}\n")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("case_id,passed\na,true\n", "legacy.csv: the CSV header lacks score (columns: "
         "case_id, score, optionally passed)"),
        ("case_id,score\na,\n", "legacy.csv line 2: no score for case 'a'"),
        ("case_id,score,passed\na,0.9,maybe\n", "legacy.csv line 2: passed 'maybe' is not "
         "true or false"),
        ("case_id,score\na,0.9\na,0.8\n", "legacy.csv line 3: case_id 'a' repeats line 2: "
         "give each case one legacy score"),
    ],
)  # fmt: skip
def test_a_bad_legacy_csv_is_one_line_and_exit_2(
    content: str,
    message: str,
    write_jsonl: Callable[..., Path],
    tmp_path: Path,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CSV form's errors name the file and the line, as the JSON form's do."""
    monkeypatch.chdir(tmp_path)
    rows = write_jsonl([release_row("a", 4)])
    Path("legacy.csv").write_text(content)

    run = cli("compare", rows, "--legacy", "legacy.csv", "--legacy-threshold", "0.5", *POLICY)

    assert (run.code, run.out, run.err) == (2, "", f"evidence-worker: {message}\n")


def test_without_passed_or_a_threshold_the_legacy_verdict_is_not_guessed(
    crafted: tuple[Path, Path], cli: Callable[..., Run]
) -> None:
    """A legacy row with no passed and no --legacy-threshold: one line, exit 2."""
    rows, legacy = crafted

    run = cli("compare", rows, "--legacy", legacy, *POLICY)

    assert (run.code, run.out) == (2, "")
    assert run.err == (
        f"evidence-worker: {legacy} line 1: no passed and no --legacy-threshold: give the old "
        "gate's threshold with --legacy-threshold X, or a passed column\n"
    )


def test_without_a_policy_compare_says_how_to_give_one(
    crafted: tuple[Path, Path], cli: Callable[..., Run]
) -> None:
    """No --policy, --min-coverage or environment policy: gate's one line, exit 2."""
    rows, legacy = crafted

    run = cli("compare", rows, "--legacy", legacy, "--legacy-threshold", "0.7")

    assert (run.code, run.out, len(run.err.splitlines())) == (2, "", 1)
    assert run.err.startswith("evidence-worker: configuration error: no policy configured: set ")


def test_a_bad_legacy_threshold_is_one_line(
    crafted: tuple[Path, Path], cli: Callable[..., Run]
) -> None:
    """--legacy-threshold must be a finite number."""
    rows, legacy = crafted

    run = cli("compare", rows, "--legacy", legacy, "--legacy-threshold", "abc", *POLICY)

    assert (run.code, run.err) == (
        2,
        "evidence-worker: --legacy-threshold 'abc' is not a number\n",
    )


def test_an_empty_rows_file_is_bad_input(
    write_jsonl: Callable[..., Path], crafted: tuple[Path, Path], cli: Callable[..., Run]
) -> None:
    """No new row at all: nothing was compared, so exit 2, not a vacuous agreement."""
    _, legacy = crafted
    rows = write_jsonl([], name="empty.jsonl")

    run = cli("compare", rows, "--legacy", legacy, "--legacy-threshold", "0.7", *POLICY)

    assert (run.code, run.out, run.err) == (2, "", f"evidence-worker: {rows} contains no rows\n")


def test_an_empty_store_is_bad_input(
    crafted: tuple[Path, Path], cli: Callable[..., Run], store_url: str
) -> None:
    """A store with no first outcome (the wrong --store, say): one line naming it, exit 2."""
    _, legacy = crafted
    Path(store_url.removeprefix("sqlite:///")).touch()  # an empty SQLite file

    run = cli("compare", "--store", store_url, "--legacy", legacy, "--legacy-threshold", "0.7",
              *POLICY)  # fmt: skip

    assert (run.code, run.out) == (2, "")
    assert run.err == (
        f"evidence-worker: store {store_url} holds no first outcomes: nothing to compare (pass "
        "--store the store score or the worker recorded to)\n"
    )
