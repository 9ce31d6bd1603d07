"""`evidence-worker gate`: one JSON line per ReleaseRow, exit codes per SPEC §7."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from worker.cli import main

EXAMPLE_ROWS = EXAMPLES / "release-rows.jsonl"
EXAMPLE_POLICY = EXAMPLES / "policy.toml"

GATE_FIELDS = [
    "line", "case_id", "status", "value", "reason", "contract_version", "policy_group",
    "policy_version", "threshold", "blocking", "owner", "score",
]  # fmt: skip


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines()]


@pytest.fixture
def gate(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run `evidence-worker gate PATH ARGS` in-process and capture what it printed."""

    def run(path: str | Path, *argv: str | Path) -> Run:
        code = main(["gate", str(path), *(str(arg) for arg in argv)])
        captured = capsys.readouterr()
        return Run(code=code, out=captured.out, err=captured.err)

    return run


def row(**overrides: Any) -> dict[str, Any]:
    """A reviewed ReleaseRow that passes the default group (2 of 2 claims supported)."""
    return {
        "case_id": "case-1",
        "required_claim_ids": ["c1", "c2"],
        "supported_claim_ids": ["c1", "c2"],
        **overrides,
    }


FAILING = row(case_id="case-fail", supported_claim_ids=["c1"])
INVALID = row(case_id="case-invalid", supported_claim_ids=["c1", "old-c2"])


@pytest.mark.parametrize(
    ("rows", "statuses", "code"),
    [
        pytest.param([row(), row(case_id="case-2")], ["pass", "pass"], 0, id="all-pass"),
        pytest.param([row(), FAILING], ["pass", "fail"], 1, id="one-blocking-fail"),
        pytest.param([row(), INVALID], ["pass", "invalid"], 2, id="one-metric-invalid"),
        pytest.param([FAILING, INVALID], ["fail", "invalid"], 2, id="invalid-outranks-fail"),
        pytest.param([row(), '{"case_id": "x",'], ["pass", "invalid"], 2, id="bad-json"),
        pytest.param(
            [row(), {"case_id": "case-2", "required_claim_ids": ["c1"]}],
            ["pass", "invalid"],
            2,
            id="missing-key",
        ),
        pytest.param(
            [row(), row(case_id="case-2", blocking="no")],
            ["pass", "invalid"],
            2,
            id="wrong-type",
        ),
        pytest.param([row(), {**FAILING, "blocking": False}], ["pass", "fail"], 0, id="nb-fail"),
        pytest.param(
            [row(), {**INVALID, "blocking": False}], ["pass", "invalid"], 0, id="nb-invalid"
        ),
        pytest.param(
            [row(), {**FAILING, "policy_group": "disclosure"}],
            ["pass", "fail"],
            1,
            id="require-all-missing-claim",
        ),
        pytest.param(
            [row(), row(case_id="case-2", policy_group="legal")],
            ["pass", "invalid"],
            2,
            id="unknown-policy-group",
        ),
    ],
)
def test_exit_code_for_each_mix(
    rows: list[Any],
    statuses: list[str],
    code: int,
    gate: Callable[..., Run],
    write_jsonl: Callable[..., Path],
) -> None:
    """The exit code is the highest that applies; non-blocking rows never change it."""
    run = gate(write_jsonl(rows), "--policy", EXAMPLE_POLICY)

    assert [r["status"] for r in run.rows] == statuses
    assert run.code == code


def test_every_line_has_the_documented_fields(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """Each stdout line is a JSON object with line, case_id and the decision's fields."""
    run = gate(write_jsonl([row(), FAILING, INVALID, "{bad"]), "--policy", EXAMPLE_POLICY)

    assert len(run.rows) == 4
    for line in run.rows:
        assert sorted(line) == sorted(GATE_FIELDS)
    assert [(r["line"], r["case_id"]) for r in run.rows] == [
        (1, "case-1"),
        (2, "case-fail"),
        (3, "case-invalid"),
        (4, None),
    ]


def test_failing_row_line_is_exact(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """A blocking row below policy names value, threshold, policy version and the product owner."""
    run = gate(write_jsonl([FAILING]), "--policy", EXAMPLE_POLICY)

    assert run.rows == [
        {
            "line": 1,
            "case_id": "case-fail",
            "status": "fail",
            "value": 0.5,
            "score": 0.5,
            "reason": "supported=1; required=2; missing=c2",
            "contract_version": None,
            "policy_group": "default",
            "policy_version": "2026-12-01",
            "threshold": 0.85,
            "blocking": True,
            "owner": "product",
        }
    ]
    assert run.err == "gate: 1 rows: fail 1; policy 2026-12-01; exit 1\n"


def test_metric_invalid_row_line_is_exact(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """An unknown supported ID makes the row invalid, with no value, owned by evaluation-data."""
    (line,) = gate(write_jsonl([INVALID]), "--policy", EXAMPLE_POLICY).rows

    assert (line["status"], line["value"], line["score"], line["threshold"]) == (
        "invalid",
        None,
        None,
        None,
    )
    assert (line["owner"], line["blocking"], line["policy_version"]) == (
        "evaluation-data",
        True,
        "2026-12-01",
    )
    assert line["reason"].endswith("supported_claim_ids contains unknown IDs: old-c2")


def test_bad_json_line_has_null_case_id_and_its_line_number(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """An unparsable line is reported with its physical line number and case_id null."""
    run = gate(write_jsonl([row(), "", '{"case_id": "x",']), "--policy", EXAMPLE_POLICY)

    bad = run.rows[1]
    assert (bad["line"], bad["case_id"], bad["status"], bad["owner"]) == (
        3,
        None,
        "invalid",
        "evaluation-data",
    )
    assert bad["reason"].startswith("invalid JSON: ")
    assert run.code == 2


@pytest.mark.parametrize(
    ("line", "case_id", "reason"),
    [
        pytest.param(
            {"case_id": "case-2", "required_claim_ids": ["c1"]},
            "case-2",
            "schema: supported_claim_ids: Field required",
            id="missing-key",
        ),
        pytest.param(
            row(case_id="case-2", supported_claim_ids="c1"),
            "case-2",
            "schema: supported_claim_ids: Input should be a valid array",
            id="wrong-type",
        ),
        pytest.param(
            row(case_id="case-2", answer="text"),
            "case-2",
            "schema: answer: Extra inputs are not permitted",
            id="unknown-key",
        ),
        pytest.param(
            row(case_id=""),
            None,
            "schema: case_id: String should have at least 1 character",
            id="empty-case-id",
        ),
        pytest.param(
            b'{"case_id": "case-\xff"}',
            None,
            "message is not valid UTF-8 (invalid start byte at byte 18)",
            id="non-utf8",
        ),
    ],
)
def test_schema_invalid_row_names_the_problem(
    line: Any,
    case_id: str | None,
    reason: str,
    gate: Callable[..., Run],
    write_jsonl: Callable[..., Path],
) -> None:
    """A row that is not a ReleaseRow is invalid (exit 2) with a reason naming the field."""
    run = gate(write_jsonl([line]), "--policy", EXAMPLE_POLICY)

    assert run.code == 2
    assert [(r["case_id"], r["status"], r["reason"], r["blocking"]) for r in run.rows] == [
        (case_id, "invalid", reason, None)
    ]


def test_require_all_fails_where_min_coverage_passes(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """9 of 10 claims pass a 0.85 group but fail a require_all group."""
    claims = [f"c{n}" for n in range(10)]
    almost = {"required_claim_ids": claims, "supported_claim_ids": claims[:9]}
    run = gate(
        write_jsonl(
            [row(case_id="faq", **almost), row(case_id="fee", policy_group="disclosure", **almost)]
        ),
        "--policy",
        EXAMPLE_POLICY,
    )

    assert [(r["case_id"], r["status"], r["value"], r["threshold"]) for r in run.rows] == [
        ("faq", "pass", 0.9, 0.85),
        ("fee", "fail", 0.9, 1.0),
    ]
    assert run.code == 1


def test_example_release_rows(gate: Callable[..., Run]) -> None:
    """The example rows all pass except the non-blocking shipping row, so the gate exits 0."""
    run = gate(EXAMPLE_ROWS, "--policy", EXAMPLE_POLICY)

    assert [
        (r["line"], r["case_id"], r["status"], r["value"], r["blocking"], r["owner"])
        for r in run.rows
    ] == [
        (1, "refund-001", "pass", 1.0, True, None),
        (2, "refund-002", "pass", 1.0, True, None),
        (3, "transfer-fee-008", "pass", 1.0, True, None),
        (4, "shipping-020", "fail", 0.25, False, "product"),
    ]
    assert run.code == 0
    assert run.err == "gate: 4 rows: fail 1, pass 3; policy 2026-12-01; exit 0\n"


def test_min_coverage_option_is_a_policy(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """--min-coverage 0.5 gates the default group at 0.5 with version cli:0.5."""
    run = gate(write_jsonl([FAILING]), "--min-coverage", "0.5")

    assert [(r["status"], r["threshold"], r["policy_version"]) for r in run.rows] == [
        ("pass", 0.5, "cli:0.5")
    ]
    assert run.code == 0


def test_min_evidence_coverage_env_is_a_policy(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MIN_EVIDENCE_COVERAGE configures the gate when no option does."""
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", "0.75")
    run = gate(write_jsonl([FAILING]))

    assert [(r["status"], r["threshold"], r["policy_version"]) for r in run.rows] == [
        ("fail", 0.75, "env:0.75")
    ]
    assert run.code == 1


def test_gate_without_policy_exits_2(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """gate always needs a policy: without one it prints one clear line and exits 2."""
    run = gate(write_jsonl([row()]))

    assert run.code == 2
    assert run.out == ""
    assert len(run.err.splitlines()) == 1
    assert run.err.startswith("evidence-worker: configuration error: no policy configured")
    for remedy in ("MIN_EVIDENCE_COVERAGE", "EVIDENCE_POLICY_FILE", "--policy", "--min-coverage"):
        assert remedy in run.err


def test_empty_file_exits_2(gate: Callable[..., Run], write_jsonl: Callable[..., Path]) -> None:
    """A file with no rows is an input error, not a pass."""
    path = write_jsonl([""])
    run = gate(path, "--policy", EXAMPLE_POLICY)

    assert (run.code, run.out) == (2, "")
    assert run.err == f"evidence-worker: {path} contains no rows\n"


def test_missing_file_exits_2(gate: Callable[..., Run], tmp_path: Path) -> None:
    """A path that does not exist exits 2 with one 'cannot read' line."""
    path = tmp_path / "absent.jsonl"
    run = gate(path, "--policy", EXAMPLE_POLICY)

    assert (run.code, run.out) == (2, "")
    assert run.err == f"evidence-worker: cannot read {path}: No such file or directory\n"


def test_bad_min_coverage_option_exits_2(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """--min-coverage outside 0..1 is a configuration error naming the option, not the variable."""
    run = gate(write_jsonl([row()]), "--min-coverage", "85")

    assert (run.code, run.out) == (2, "")
    assert (
        run.err == "evidence-worker: configuration error: --min-coverage='85' is outside 0.0..1.0\n"
    )


def test_stdin_dash_is_read(gate: Callable[..., Run], monkeypatch: pytest.MonkeyPatch) -> None:
    """`gate -` reads rows from stdin."""
    body = (json.dumps(row()) + "\n" + json.dumps(FAILING) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    run = gate("-", "--policy", EXAMPLE_POLICY)

    assert [(r["line"], r["status"]) for r in run.rows] == [(1, "pass"), (2, "fail")]
    assert run.code == 1
