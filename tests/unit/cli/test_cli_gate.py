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

from contracts import AttributionResult, input_hash
from tests.conftest import EXAMPLES
from tests.unit.cli.factories import EXAMPLE_POLICY
from worker.cli import main

EXAMPLE_ROWS = EXAMPLES / "release-rows.jsonl"

GATE_FIELDS = [
    "line", "case_id", "status", "value", "reason", "contract_version", "policy_group",
    "policy_version", "threshold", "blocking", "owner", "score", "missing_claim_ids", "findings",
    "contract_drift",
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
            "missing_claim_ids": ["c2"],
            "findings": [],
            "contract_drift": False,
        }
    ]
    assert run.err == "gate: 1 row: fail 1; policy 2026-12-01; exit 1\n"


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
    assert (line["missing_claim_ids"], line["findings"]) == (None, [])


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
    """The example rows all pass except the non-blocking shipping row, so the gate exits 0,
    and its summary says that one row failed without blocking."""
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
    assert run.err == (
        "gate: 4 rows: fail 1, pass 3; policy 2026-12-01; 1 non-blocking row failed or invalid "
        "(reported, never the exit code); exit 0\n"
    )


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


def policy_file(tmp_path: Path, version: str, min_coverage: float, name: str = "old.toml") -> Path:
    path = tmp_path / name
    path.write_text(f'version = "{version}"\n[groups.default]\nmin_coverage = {min_coverage}\n')
    return path


# value 2/3: passes a 0.6 rule, fails the example policy's 0.85
TWO_OF_THREE = row(
    case_id="case-moved", required_claim_ids=["a", "b", "c"], supported_claim_ids=["a", "b"]
)


def test_row_failing_only_because_the_rule_moved_is_owned_by_release_rule(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path], tmp_path: Path
) -> None:
    """Same value, stricter rule: policy_change names the baseline, the owner is release-rule."""
    baseline = policy_file(tmp_path, "2026-11-01", 0.6)
    run = gate(
        write_jsonl([TWO_OF_THREE]), "--policy", EXAMPLE_POLICY, "--baseline-policy", baseline
    )

    (line,) = run.rows
    assert (line["status"], line["value"], line["owner"]) == ("fail", 2 / 3, "release-rule")
    assert line["policy_change"] == {
        "baseline_version": "2026-11-01",
        "baseline_status": "pass",
        "baseline_threshold": 0.6,
    }
    assert line["missing_claim_ids"] == ["c"]
    assert run.code == 1  # the current policy decides the exit code
    assert run.err == (
        "gate: 1 row: fail 1; policy 2026-12-01; "
        "1 row changed status against baseline policy 2026-11-01; exit 1\n"
    )


@pytest.mark.parametrize(
    ("rows", "baseline_coverage", "expected"),
    [
        pytest.param(
            [TWO_OF_THREE], 0.9, [("fail", "product", None)], id="failed-before-too-no-change"
        ),
        pytest.param([row()], 0.6, [("pass", None, None)], id="passes-under-both"),
        pytest.param(
            [row(case_id="loosened", supported_claim_ids=["c1"])],
            0.9,
            [("fail", "product", None)],
            id="fails-under-both",
        ),
        pytest.param(
            [row(case_id="case-1", required_claim_ids=["a", "b"], supported_claim_ids=["a"])],
            0.4,
            [("fail", "release-rule", ("pass", 0.4))],
            id="half-passed-at-0.4",
        ),
        pytest.param([INVALID], 0.1, [("invalid", "evaluation-data", None)], id="invalid-both"),
        pytest.param(
            [row(case_id="x", policy_group="disclosure")],
            0.1,
            [("pass", None, ("invalid", None))],
            id="group-unknown-to-baseline",
        ),
        pytest.param(
            [{**TWO_OF_THREE, "blocking": False}],
            0.6,
            [("fail", "release-rule", ("pass", 0.6))],
            id="non-blocking-still-triaged",
        ),
    ],
)
def test_status_under_both_policies(
    rows: list[Any],
    baseline_coverage: float,
    expected: list[tuple[str, str | None, tuple[str, float | None] | None]],
    gate: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """policy_change appears exactly when the status differs; release-rule only for a valid
    row that fails now and passed before."""
    baseline = policy_file(tmp_path, "old", baseline_coverage)
    run = gate(write_jsonl(rows), "--policy", EXAMPLE_POLICY, "--baseline-policy", baseline)

    got = []
    for line in run.rows:
        change = line.get("policy_change")
        assert change is None or change["baseline_version"] == "old"
        got.append(
            (
                line["status"],
                line["owner"],
                None
                if change is None
                else (change["baseline_status"], change["baseline_threshold"]),
            )
        )
    assert got == expected


def test_without_baseline_no_line_has_policy_change(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    run = gate(write_jsonl([TWO_OF_THREE, row()]), "--policy", EXAMPLE_POLICY)

    assert [("policy_change" in line, line["owner"]) for line in run.rows] == [
        (False, "product"),
        (False, None),
    ]


@pytest.mark.parametrize(
    ("content", "error"),
    [
        pytest.param(
            None, "cannot read policy file {path}: No such file or directory", id="absent"
        ),
        pytest.param(
            "[groups.default]\nmin_coverage = 0.5\n",
            "policy file {path}: version: Field required",
            id="no-version",
        ),
        pytest.param(b'version = "\xff"\n', "policy file {path} is not UTF-8 text", id="not-utf8"),
    ],
)
def test_bad_baseline_policy_gets_the_policy_errors(
    content: str | bytes | None,
    error: str,
    gate: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    tmp_path: Path,
) -> None:
    """The same reading as --policy: one clear line, exit 2, nothing on stdout."""
    path = tmp_path / "old.toml"
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    run = gate(write_jsonl([row()]), "--policy", EXAMPLE_POLICY, "--baseline-policy", path)

    assert (run.code, run.out) == (2, "")
    assert len(run.err.splitlines()) == 1
    assert run.err.startswith("evidence-worker: configuration error: " + error.format(path=path))
    assert "Traceback" not in run.err


def test_attribution_result_lines_are_triaged(
    gate: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A line with schema_version is an AttributionResult: scored, decided and triaged, with
    ReleaseRows beside it in the same file."""
    cited_old_id = message_dict(
        citations=[
            {
                "claim_id": "refund-window",
                "document_id": "policy/returns#window",
                "answer_span": [0, 36],
            },
            {"claim_id": "refund-method", "document_id": "kb-9", "answer_span": [0, 10]},
            {
                "claim_id": "support-channel",
                "document_id": "help/contact#chat",
                "answer_span": [37, 69],
            },
        ]
    )
    run = gate(write_jsonl([cited_old_id, row()]), "--policy", EXAMPLE_POLICY)

    first, second = run.rows
    assert sorted(first) == sorted(GATE_FIELDS)
    assert (first["case_id"], first["status"], first["contract_version"]) == (
        "refund-001",
        "fail",
        "support-faq/2026-10",
    )
    assert first["missing_claim_ids"] == ["refund-method"]
    assert first["findings"] == [
        {
            "claim_id": "refund-method",
            "finding": "cited_document_not_retrieved",
            "owner": "attribution",
            "document_ids": ["kb-9"],
            "evidence_retrieved": None,
        }
    ]
    assert first["owner"] == "attribution"
    assert (second["status"], second["owner"], second["findings"]) == ("pass", None, [])
    assert run.code == 1


def test_invalid_attribution_result_line_names_the_problem(
    gate: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """An AttributionResult is held to its own schema (unknown keys rejected), not ReleaseRow's."""
    run = gate(write_jsonl([message_dict(blocking=True, colour="red")]), "--policy", EXAMPLE_POLICY)

    (line,) = run.rows
    assert (line["case_id"], line["status"], line["owner"], line["findings"]) == (
        "refund-001",
        "invalid",
        "evaluation-data",
        [],
    )
    assert line["reason"] == "schema: colour: Extra inputs are not permitted"
    assert run.code == 2


def test_attribution_result_failing_only_by_the_rule_is_release_rule(
    gate: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """release-rule wins over the findings' owner (here: no citations, attribution)."""
    baseline = policy_file(tmp_path, "old", 0.6)
    run = gate(
        write_jsonl([message_dict()]), "--policy", EXAMPLE_POLICY, "--baseline-policy", baseline
    )

    (line,) = run.rows
    assert (line["status"], line["owner"]) == ("fail", "release-rule")
    assert [f["finding"] for f in line["findings"]] == ["attribution_artifact_missing"]


def test_a_later_row_with_another_required_set_drifted_as_in_the_store(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """Same case and contract version, two more required claims: the second row is owned by
    evaluation data with its drift named, as `score` has it, and gate exits 2."""
    first = row(case_id="drift", contract_version="faq/1")
    later = row(
        case_id="drift", contract_version="faq/1", required_claim_ids=["c1", "c2", "c3", "c4"]
    )
    run = gate(write_jsonl([first, later, first]), "--policy", EXAMPLE_POLICY)

    assert [(r["owner"], r["contract_drift"]) for r in run.rows] == [
        (None, False),
        ("evaluation-data", True),
        (None, False),
    ]
    assert run.rows[1]["drift"] == {
        "first_required_claim_ids": ["c1", "c2"],
        "first_line": 1,
        "added_claim_ids": ["c3", "c4"],
        "removed_claim_ids": [],
    }
    assert run.code == 2
    assert run.err == (
        "gate: 3 rows: fail 1, pass 2; 1 row with contract drift; policy 2026-12-01; exit 2\n"
    )


@pytest.mark.parametrize(
    "later",
    [
        row(case_id="drift", contract_version="faq/2", required_claim_ids=["c1"]),
        row(case_id="other", contract_version="faq/1", required_claim_ids=["c1"]),
        row(case_id="drift", required_claim_ids=["c1"]),  # no contract version: nothing kept
        row(case_id="drift", contract_version="faq/1", required_claim_ids=["c1", " c1"]),
    ],
    ids=["other-version", "other-case", "no-version", "metric-invalid"],
)
def test_rows_of_another_pair_or_invalid_ones_never_drift(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path], later: dict[str, Any]
) -> None:
    """Only a metric-valid row of the same (contract version, case ID) is compared."""
    run = gate(
        write_jsonl([row(case_id="drift", contract_version="faq/1"), later]),
        "--policy",
        EXAMPLE_POLICY,
    )

    assert [r["contract_drift"] for r in run.rows] == [False, False]
    assert "drift" not in run.rows[1]


def test_with_a_store_a_row_drifts_from_the_stores_first_set(
    gate: Callable[..., Run],
    cli: Callable[..., Any],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """The store's first set for the pair wins over gate's own first row: both later rows
    drifted from it, named by its input hash, as `score` would record them."""
    store = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    scored = message_dict()  # refund-001 under support-faq/2026-10, three required claims
    assert cli("score", write_jsonl([scored]), "--store", store).code == 0
    first_hash = input_hash(AttributionResult.model_validate(scored))
    fewer = row(
        case_id="refund-001",
        contract_version="support-faq/2026-10",
        required_claim_ids=["refund-window", "refund-method"],
        supported_claim_ids=["refund-window", "refund-method"],
    )

    run = gate(write_jsonl([fewer, fewer]), "--policy", EXAMPLE_POLICY, "--store", store)

    assert [(r["owner"], r["contract_drift"]) for r in run.rows] == [("evaluation-data", True)] * 2
    assert run.rows[0]["drift"] == {
        "first_required_claim_ids": ["refund-method", "refund-window", "support-channel"],
        "first_input_hash": first_hash,
        "added_claim_ids": [],
        "removed_claim_ids": ["support-channel"],
    }
    assert run.code == 2


def test_gate_with_a_store_that_does_not_exist_is_one_line_and_exit_2(
    gate: Callable[..., Run], write_jsonl: Callable[..., Path], tmp_path: Path
) -> None:
    run = gate(
        write_jsonl([row()]), "--policy", EXAMPLE_POLICY, "--store", f"sqlite:///{tmp_path}/no.db"
    )

    assert (run.code, run.out) == (2, "")
    assert len(run.err.splitlines()) == 1, run.err
