"""`evidence-worker score` (and show/alerts) in-process: records, exit codes, clear errors."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts import (
    AlertRecord,
    AttributionResult,
    ContractDriftRecord,
    CoverageRecord,
    PolicyError,
    input_hash,
    parse_policy,
    policy_from_threshold,
)
from contracts.records import CONTRACT_DRIFT
from tests.conftest import CITED_SUPPORTED, EXAMPLES, Run
from worker.cli import main

EXAMPLE_FILE = EXAMPLES / "attribution-results.jsonl"
EXAMPLE_POLICY = EXAMPLES / "policy.toml"
TWO_THIRDS = 2 / 3

# (line, case_id, event, status, value, cache) for the example file on a fresh store.
EXAMPLE_FIRST_RUN = [
    (1, "refund-001", "evidence_coverage.scored", "pass", 1.0, "miss"),
    (2, "refund-002", "evidence_coverage.scored", "fail", TWO_THIRDS, "miss"),
    (3, "refund-002-rerun", "evidence_coverage.scored", "fail", TWO_THIRDS, "hit"),
    (4, "refund-002-retry", "evidence_coverage.scored", "fail", TWO_THIRDS, "conflict"),
    (5, "transfer-fee-007", "evidence_coverage.scored", "fail", 0.5, "miss"),
    (6, "transfer-fee-008", "evidence_coverage.scored", "pass", 1.0, "miss"),
    (7, "refund-003", "evidence_coverage.rejected", "invalid", None, None),
    (8, "warranty-011", "evidence_coverage.scored", "invalid", None, "miss"),
    (9, "warranty-012", "evidence_coverage.scored", "invalid", None, "miss"),
    (10, "shipping-020", "evidence_coverage.scored", "fail", 0.25, "miss"),
]

CONFIG_ERROR_PREFIX = "evidence-worker: configuration error: "


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/s.sqlite3"


@pytest.fixture
def score(cli: Callable[..., Run], store_url: str) -> Callable[..., Run]:
    """Run `score PATH --store <tmp sqlite> ARGS`."""

    def run(path: str | Path, *argv: str | Path) -> Run:
        return cli("score", path, "--store", store_url, *argv)

    return run


@pytest.fixture
def one_message_file(
    write_jsonl: Callable[..., Path], message_dict: Callable[..., dict[str, Any]]
) -> Path:
    """A file holding one valid AttributionResult."""
    return write_jsonl([message_dict()], name="one.jsonl")


def example_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EXAMPLE_FILE.read_text().splitlines() if line.strip()]


def hash_of(row: dict[str, Any]) -> str:
    return input_hash(AttributionResult.model_validate(row))


def assert_published_shapes(run: Run) -> None:
    for line in run.lines:
        if line["event"] == "evidence_coverage.nondeterminism":
            AlertRecord.model_validate(line)
        elif line["event"] == "evidence_coverage.contract_drift":
            ContractDriftRecord.model_validate(line)
        else:
            CoverageRecord.model_validate(line)


def raw_texts(rows: list[dict[str, Any]]) -> set[str]:
    texts = {row["answer"] for row in rows}
    texts |= {context["text"] for row in rows for context in row["contexts"]}
    return texts | {row["grader"]["prompt"] for row in rows}


# The example file ------------------------------------------------------------------------


def test_example_file_exits_3_for_its_nondeterminism(score: Callable[..., Run]) -> None:
    """The example file holds one conflicting re-run, so score exits 3."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert run.code == 3
    assert run.summary == (
        "score: 10 rows: fail 5, invalid 3, pass 2; 1 rejected before scoring; "
        "cache conflict 1, hit 1, miss 7; 1 nondeterminism alert; policy 2026-12-01; exit 3"
    )


def test_example_file_gives_expected_record_per_line(score: Callable[..., Run]) -> None:
    """Each example line yields one record with the status, value and cache computed by hand."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert [
        (r["line"], r["case_id"], r["event"], r["status"], r["value"], r["cache"])
        for r in run.records
    ] == EXAMPLE_FIRST_RUN


def test_example_file_reasons_explain_each_record(score: Callable[..., Run]) -> None:
    """Reasons are the metric's exact texts, the schema error, or the Ragas-prefixed invalid."""
    reasons = {
        r["case_id"]: r["reason"] for r in score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY).records
    }

    assert reasons["refund-001"] == "supported=3; required=3; missing=none"
    assert reasons["refund-002"] == "supported=2; required=3; missing=refund-method"
    assert reasons["refund-002-retry"] == "supported=2; required=3; missing=refund-method"
    assert reasons["transfer-fee-007"] == "supported=1; required=2; missing=transfer-fee"
    assert reasons["refund-003"] == (
        "schema: supported_claim_ids: Field required; "
        "supported_claims: Extra inputs are not permitted"
    )
    assert reasons["warranty-011"].endswith(
        "supported_claim_ids contains unknown IDs: warranty-claims-old"
    )
    assert reasons["warranty-012"].endswith(
        "required_claim_ids contains duplicate claim IDs: warranty-term"
    )
    assert reasons["shipping-020"] == (
        "supported=1; required=4; missing=ship-cost,ship-region,ship-tracking"
    )


def test_example_file_decisions_carry_policy_threshold_and_owner(
    score: Callable[..., Run],
) -> None:
    """Every record names the policy version, its group's threshold, blocking and the owner."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert [
        (r["case_id"], r["policy_group"], r["threshold"], r["blocking"], r["owner"])
        for r in run.records
    ] == [
        ("refund-001", "default", 0.85, True, None),
        ("refund-002", "default", 0.85, True, "attribution"),
        ("refund-002-rerun", "default", 0.85, True, "attribution"),
        ("refund-002-retry", "default", 0.85, True, "attribution"),
        ("transfer-fee-007", "disclosure", 1.0, True, "attribution"),
        ("transfer-fee-008", "disclosure", 1.0, True, None),
        ("refund-003", None, None, None, "evaluation-data"),
        ("warranty-011", "default", None, True, "evaluation-data"),
        ("warranty-012", "default", None, True, "evaluation-data"),
        ("shipping-020", "default", 0.85, False, "attribution"),
    ]
    assert {r["policy_version"] for r in run.records} == {"2026-12-01"}


def test_example_file_conflict_keeps_first_and_reports_observed(
    score: Callable[..., Run],
) -> None:
    """The conflicting re-run carries the first outcome and its own as observed_*."""
    rows = example_rows()
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    retry = run.records[3]

    assert retry["input_hash"] == hash_of(rows[1])
    assert retry["level"] == "warning"
    assert retry["value"] == TWO_THIRDS
    assert retry["observed_value"] == 1 / 3
    assert retry["observed_reason"] == (
        "supported=1; required=3; missing=refund-method,support-channel"
    )


def test_example_file_raises_exactly_one_alert(score: Callable[..., Run]) -> None:
    """One ERROR nondeterminism line names the hash, both case IDs and both lists."""
    rows = example_rows()
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert len(run.alerts) == 1
    alert = run.alerts[0]
    assert alert["level"] == "error"
    assert alert["input_hash"] == hash_of(rows[1])
    assert alert["decision"] == "kept_first"
    assert alert["line"] == 4
    assert (alert["first"]["case_id"], alert["observed"]["case_id"]) == (
        "refund-002",
        "refund-002-retry",
    )
    assert alert["first"]["supported_claim_ids"] == ["refund-window", "support-channel"]
    assert alert["observed"]["supported_claim_ids"] == ["refund-window"]


def test_example_file_alert_follows_its_conflicting_record(score: Callable[..., Run]) -> None:
    """The alert line comes right after the record of the attempt that disagreed."""
    events = [(line["event"], line.get("case_id")) for line in score(EXAMPLE_FILE).lines]

    assert events[3:5] == [
        ("evidence_coverage.scored", "refund-002-retry"),
        ("evidence_coverage.nondeterminism", None),
    ]


def test_example_file_has_exactly_one_rejected_line(score: Callable[..., Run]) -> None:
    """Only the line with a misspelt field is rejected; it is kept in line order."""
    run = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    rejected = [r for r in run.records if r["event"] == "evidence_coverage.rejected"]

    assert [(r["line"], r["case_id"], r["input_hash"]) for r in rejected] == [
        (7, "refund-003", None)
    ]


def test_second_run_of_example_gives_no_miss(score: Callable[..., Run]) -> None:
    """Re-running the same file confirms every outcome: hits, and the known conflict again."""
    score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    second = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert [(r["case_id"], r["cache"]) for r in second.records] == [
        ("refund-001", "hit"),
        ("refund-002", "hit"),
        ("refund-002-rerun", "hit"),
        ("refund-002-retry", "conflict"),
        ("transfer-fee-007", "hit"),
        ("transfer-fee-008", "hit"),
        ("refund-003", None),
        ("warranty-011", "hit"),
        ("warranty-012", "hit"),
        ("shipping-020", "hit"),
    ]
    assert second.code == 3


def test_second_run_of_example_keeps_first_outcomes(score: Callable[..., Run]) -> None:
    """Status, value and reason of every record are the same on the second run."""

    def outcomes(run: Run) -> list[tuple[Any, ...]]:
        return [(r["case_id"], r["status"], r["value"], r["reason"]) for r in run.records]

    first = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    second = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)

    assert outcomes(second) == outcomes(first)


def test_second_run_of_example_reports_hits_as_observed(score: Callable[..., Run]) -> None:
    """A hit's observed_* equal its canonical value and reason."""
    score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)
    first_line = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY).records[0]

    assert (first_line["observed_value"], first_line["observed_reason"]) == (
        1.0,
        "supported=3; required=3; missing=none",
    )


# Nondeterminism across runs, show and alerts ---------------------------------------------


@pytest.fixture
def conflicting_runs(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> tuple[Run, Run, str]:
    """Score one message, then the same inputs with one supported ID fewer."""
    original = message_dict()
    changed = message_dict(case_id="refund-001-retry", supported_claim_ids=["refund-window"])
    first = score(write_jsonl([original], name="first.jsonl"))
    second = score(write_jsonl([changed], name="second.jsonl"))
    return first, second, hash_of(original)


def test_changed_supported_list_exits_3(conflicting_runs: tuple[Run, Run, str]) -> None:
    """Changing a supported ID under the same inputs is nondeterminism: exit 3."""
    first, second, _ = conflicting_runs

    assert (first.code, second.code) == (0, 3)
    assert second.summary == (
        "score: 1 rows: scored 1; cache conflict 1; 1 nondeterminism alert; "
        "report-only (no policy); exit 3"
    )


def test_changed_supported_list_raises_one_alert(conflicting_runs: tuple[Run, Run, str]) -> None:
    """The second run prints its record and exactly one alert for the shared hash."""
    _, second, hash_ = conflicting_runs

    assert [r["cache"] for r in second.records] == ["conflict"]
    assert [
        (a["input_hash"], a["first"]["value"], a["observed"]["value"]) for a in second.alerts
    ] == [(hash_, TWO_THIRDS, 1 / 3)]


def test_changed_supported_list_keeps_first_outcome(conflicting_runs: tuple[Run, Run, str]) -> None:
    """The conflicting record keeps the first value and reason; its own go to observed_*."""
    _, second, _ = conflicting_runs
    record = second.records[0]

    assert (record["value"], record["reason"]) == (
        TWO_THIRDS,
        "supported=2; required=3; missing=refund-method",
    )
    assert (record["observed_value"], record["observed_reason"]) == (
        1 / 3,
        "supported=1; required=3; missing=refund-method,support-channel",
    )


def test_show_lists_both_attempts_with_first_unchanged(
    conflicting_runs: tuple[Run, Run, str], cli: Callable[..., Run], store_url: str
) -> None:
    """`show HASH` prints the first outcome and both attempts with their exact lists."""
    _, _, hash_ = conflicting_runs
    run = cli("show", hash_, "--store", store_url)
    history = json.loads(run.out)

    assert run.code == 0
    assert history["input_hash"] == hash_
    assert history["total_attempts"] == 2
    assert (history["first"]["case_id"], history["first"]["value"]) == ("refund-001", TWO_THIRDS)
    assert history["first"]["reason"] == "supported=2; required=3; missing=refund-method"
    assert [(a["case_id"], a["supported_claim_ids"], a["value"]) for a in history["attempts"]] == [
        ("refund-001", ["refund-window", "support-channel"], TWO_THIRDS),
        ("refund-001-retry", ["refund-window"], 1 / 3),
    ]


def test_show_unknown_hash_exits_2(
    score: Callable[..., Run], one_message_file: Path, cli: Callable[..., Run], store_url: str
) -> None:
    """`show` for a hash never recorded in an existing store says so in one line, with what
    a hash looks like and how to look a case up instead, and exits 2."""
    score(one_message_file)
    run = cli("show", "0" * 64, "--store", store_url)

    assert run.code == 2
    assert run.out == ""
    assert run.err == (
        f"evidence-worker: no outcome recorded for input hash {'0' * 64} (an input hash is 64"
        " lowercase hex digits, as in a record's input_hash; to look a row up by its case ID:"
        " evidence-worker show --case CASE_ID)\n"
    )


def test_alerts_lists_the_conflict_and_exits_3(
    conflicting_runs: tuple[Run, Run, str], cli: Callable[..., Run], store_url: str
) -> None:
    """`alerts` prints one JSON line per alert and exits 3 when there are any."""
    _, _, hash_ = conflicting_runs
    run = cli("alerts", "--store", store_url)
    alerts = run.lines

    assert run.code == 3
    assert [(a["input_hash"], a["decision"]) for a in alerts] == [(hash_, "kept_first")]
    assert (alerts[0]["first"]["case_id"], alerts[0]["observed"]["case_id"]) == (
        "refund-001",
        "refund-001-retry",
    )
    assert run.err == "alerts: 1 nondeterminism, 0 contract drift\n"


def test_alerts_says_how_many_are_kept_when_it_shows_fewer(
    score: Callable[..., Run],
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """With more alerts kept than --limit shows, the summary says how many there are."""
    first = message_dict()
    changed = [message_dict(case_id=f"retry-{n}", supported_claim_ids=ids) for n, ids in
               enumerate([["refund-window"], ["support-channel"], []])]  # fmt: skip
    score(write_jsonl([first, *changed]))

    run = cli("alerts", "--store", store_url, "--limit", "2")

    assert (run.code, len(run.lines)) == (3, 2)
    assert [alert["observed"]["case_id"] for alert in run.lines] == ["retry-1", "retry-2"]
    assert run.err == (
        "alerts: 2 nondeterminism, 0 contract drift"
        " (the newest 2 of 3 kept; raise --limit to see more)\n"
    )


def test_alerts_on_a_clean_store_exits_0(
    score: Callable[..., Run],
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """With no nondeterminism recorded, `alerts` prints nothing on stdout and exits 0."""
    score(write_jsonl([message_dict(), message_dict(case_id="refund-001-rerun")]))
    run = cli("alerts", "--store", store_url)

    assert (run.code, run.out) == (0, "")
    assert run.err == "alerts: 0 nondeterminism, 0 contract drift\n"


# Policy modes and exit codes -------------------------------------------------------------


def test_report_only_without_policy(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """With no policy, valid rows are `scored` with no threshold, no policy version, exit 0."""
    path = write_jsonl([message_dict(), message_dict(case_id="refund-009", answer="Other.")])
    run = score(path)

    assert run.code == 0
    assert [
        (r["status"], r["value"], r["threshold"], r["policy_version"], r["owner"])
        for r in run.records
    ] == [("scored", TWO_THIRDS, None, None, None)] * 2
    assert run.summary == ("score: 2 rows: scored 2; cache miss 2; report-only (no policy); exit 0")


def test_min_evidence_coverage_env_defines_the_policy(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MIN_EVIDENCE_COVERAGE=0.5 gives policy version env:0.5 and threshold 0.5."""
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", "0.5")
    run = score(write_jsonl([message_dict()]))

    record = run.records[0]
    assert (record["status"], record["policy_version"], record["threshold"]) == (
        "pass",
        "env:0.5",
        0.5,
    )
    assert run.code == 0


def test_policy_file_env_defines_the_policy(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EVIDENCE_POLICY_FILE is used when no option names a policy."""
    monkeypatch.setenv("EVIDENCE_POLICY_FILE", str(EXAMPLE_POLICY))
    run = score(write_jsonl([message_dict()]))

    record = run.records[0]
    assert (record["status"], record["policy_version"], record["threshold"]) == (
        "fail",
        "2026-12-01",
        0.85,
    )


def test_min_coverage_option_overrides_environment(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--min-coverage wins over MIN_EVIDENCE_COVERAGE."""
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", "0.5")
    record = score(write_jsonl([message_dict()]), "--min-coverage", "0.9").records[0]

    assert (record["status"], record["threshold"], record["policy_version"]) == (
        "fail",
        0.9,
        "cli:0.9",
    )


def test_blocking_failure_exits_1(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A valid blocking row below policy exits 1 and is routed to its owner: product, when the
    supported claims are cited and the missing one is not (SPEC §9's not_cited)."""
    cited = message_dict(citations=CITED_SUPPORTED)
    run = score(write_jsonl([cited, message_dict(case_id="no-citations")]), "--min-coverage", "0.9")

    assert run.code == 1
    assert [
        (r["status"], r["owner"], [f["finding"] for f in r["findings"]]) for r in run.records
    ] == [
        ("fail", "product", ["not_cited"]),
        ("fail", "attribution", ["attribution_artifact_missing"]),
    ]


def test_non_blocking_failure_does_not_change_exit_code(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A non-blocking row below policy is reported as fail but exits 0."""
    run = score(write_jsonl([message_dict(blocking=False)]), "--min-coverage", "0.9")

    assert run.code == 0
    assert [(r["status"], r["blocking"]) for r in run.records] == [("fail", False)]


def test_non_blocking_invalid_row_does_not_change_exit_code(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A non-blocking metric-invalid row is reported as invalid but exits 0."""
    row = message_dict(blocking=False, supported_claim_ids=["old-c1"])
    run = score(write_jsonl([row]), "--min-coverage", "0.5")

    assert run.code == 0
    assert [(r["status"], r["blocking"]) for r in run.records] == [("invalid", False)]


def test_invalid_row_without_alert_exits_2(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """One rejected row among valid passing rows exits 2."""
    path = write_jsonl([message_dict(), message_dict(case_id="refund-002", extra=1)])
    run = score(path, "--min-coverage", "0.5")

    assert run.code == 2
    assert [r["status"] for r in run.records] == ["pass", "invalid"]
    assert run.alerts == []


def test_invalid_outranks_failure(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A blocking fail and a metric-invalid row together exit 2, not 1."""
    path = write_jsonl(
        [
            message_dict(),
            message_dict(case_id="refund-002", answer="Other.", supported_claim_ids=["old-c1"]),
        ]
    )
    run = score(path, "--min-coverage", "0.9")

    assert run.code == 2
    assert [r["status"] for r in run.records] == ["fail", "invalid"]


def test_stdin_dash_is_read(
    cli: Callable[..., Run],
    store_url: str,
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`score -` reads JSON lines from stdin."""
    body = (json.dumps(message_dict()) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    run = cli("score", "-", "--store", store_url)

    assert run.code == 0
    assert [(r["line"], r["case_id"], r["status"]) for r in run.records] == [
        (1, "refund-001", "scored")
    ]


def test_empty_stdin_is_named_as_stdin(
    cli: Callable[..., Run], store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty stdin exits 2 with a message that says stdin, not '-'."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    run = cli("score", "-", "--store", store_url)

    assert run.code == 2
    assert run.err == "evidence-worker: stdin contains no messages\n"


def test_blank_lines_are_skipped_but_counted(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """Blank lines produce no record; `line` is still the physical line number."""
    run = score(write_jsonl(["", message_dict(), "   ", message_dict(case_id="refund-002")]))

    assert [(r["line"], r["case_id"]) for r in run.records] == [
        (2, "refund-001"),
        (4, "refund-002"),
    ]


# Published shapes and privacy ------------------------------------------------------------


def test_every_stdout_line_matches_a_published_schema(score: Callable[..., Run]) -> None:
    """Every line of both example runs validates as a CoverageRecord or an AlertRecord; the
    second run meets the known conflict again and raises no second alert."""
    for lines, run in (
        (11, score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)),
        (10, score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY)),
    ):
        assert len(run.lines) == lines
        assert_published_shapes(run)


def test_records_share_the_documented_field_set(score: Callable[..., Run]) -> None:
    """Every record carries the SPEC §6 fields, led by timestamp, level, event."""
    spec_fields = {
        "timestamp", "level", "event", "case_id", "input_hash", "contract_version",
        "metric_version", "ragas_version", "value", "reason", "status", "policy_group",
        "policy_version", "threshold", "blocking", "owner", "cache", "task_id",
        "duration_ms", "trace_id",
    }  # fmt: skip
    for record in score(EXAMPLE_FILE).records:
        assert spec_fields <= record.keys()
        assert list(record)[:3] == ["timestamp", "level", "event"]
        assert (record["metric_version"], record["ragas_version"]) == (
            "evidence_coverage/1",
            "0.4.3",
        )


def test_stdout_never_contains_answer_context_or_prompt_text(score: Callable[..., Run]) -> None:
    """No raw answer, context or grader prompt text from the example reaches stdout."""
    out = score(EXAMPLE_FILE, "--policy", EXAMPLE_POLICY).out
    texts = raw_texts(example_rows())

    assert len(texts) == 14  # 6 answers, 7 contexts, 1 prompt
    assert [text for text in texts if text in out] == []


def test_rejected_row_reason_does_not_echo_raw_text(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A context sent with the wrong shape is rejected without quoting its text."""
    secret = "Confidential passage: card ends 4242"
    run = score(write_jsonl([message_dict(contexts=secret, answer=7)]))

    assert run.records[0]["reason"] == (
        "schema: answer: Input should be a valid string; contexts: Input should be a valid array"
    )
    assert secret not in run.out
    assert_published_shapes(run)


# Bad rows: reported per line, processing continues --------------------------------------


def _line_without(field: str, message_dict: Callable[..., dict[str, Any]]) -> str:
    row = message_dict()
    del row[field]
    return json.dumps(row)


@pytest.mark.parametrize(
    ("make_line", "reason"),
    [
        pytest.param(
            lambda m: b'{"case_id": "refund-001", ',
            "invalid JSON: EOF while parsing a value at line 1 column 26",
            id="malformed-json",
        ),
        pytest.param(
            lambda m: json.dumps(m(extra_field=1)),
            "schema: extra_field: Extra inputs are not permitted",
            id="unknown-field",
        ),
        pytest.param(
            lambda m: _line_without("grader", m),
            "schema: grader: Field required",
            id="missing-field",
        ),
        pytest.param(
            lambda m: json.dumps(m(blocking="yes")),
            "schema: blocking: Input should be a valid boolean",
            id="wrong-type",
        ),
        pytest.param(
            lambda m: b'{"case_id": "refund-\xff"}',
            "message is not valid UTF-8 (invalid start byte at byte 20)",
            id="non-utf8",
        ),
        pytest.param(
            lambda m: "[1, 2]",
            "schema: message: Input should be an object",
            id="not-an-object",
        ),
    ],
)
def test_bad_line_is_rejected_and_run_continues(
    make_line: Callable[[Callable[..., dict[str, Any]]], str | bytes],
    reason: str,
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A bad line becomes one rejected record with its line number; the next line is scored."""
    path = write_jsonl([make_line(message_dict), message_dict(case_id="refund-002")])
    run = score(path)

    assert run.code == 2
    bad, good = run.records
    assert (bad["line"], bad["event"], bad["status"], bad["owner"]) == (
        1,
        "evidence_coverage.rejected",
        "invalid",
        "evaluation-data",
    )
    assert bad["reason"] == reason
    assert (good["line"], good["case_id"], good["status"]) == (2, "refund-002", "scored")
    assert run.summary == (
        "score: 2 rows: invalid 1, scored 1; 1 rejected before scoring; cache miss 1; "
        "report-only (no policy); exit 2"
    )
    assert_published_shapes(run)


def test_malformed_json_reason_names_json(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A truncated line in the middle of a file reports its own line number as invalid JSON."""
    run = score(write_jsonl([message_dict(), "{not json", message_dict(case_id="refund-002")]))

    assert [(r["line"], r["status"]) for r in run.records] == [
        (1, "scored"),
        (2, "invalid"),
        (3, "scored"),
    ]
    assert run.records[1]["reason"].startswith("invalid JSON")
    assert run.records[1]["case_id"] is None


def test_rejected_row_keeps_its_case_id(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A schema-invalid but parseable row is still routed by its case_id."""
    record = score(write_jsonl([message_dict(case_id="refund-077", blocking="no")])).records[0]

    assert (record["case_id"], record["input_hash"], record["cache"]) == (
        "refund-077",
        None,
        None,
    )


def test_unknown_policy_group_is_invalid(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A row naming a group the policy lacks is invalid and the reason names the group."""
    run = score(write_jsonl([message_dict(policy_group="legal")]), "--policy", EXAMPLE_POLICY)

    assert run.code == 2
    record = run.records[0]
    assert (record["status"], record["value"], record["owner"], record["policy_group"]) == (
        "invalid",
        None,
        "evaluation-data",
        "legal",
    )
    assert record["reason"] == (
        "policy_group 'legal' is not defined in policy 2026-12-01 (groups: default,disclosure)"
    )


# Unusable input files and configuration: one line on stderr, exit 2 ---------------------


def assert_one_line_error(run: Run, message: str) -> None:
    assert run.code == 2
    assert run.out == ""
    assert run.err == f"evidence-worker: {message}\n"
    assert "Traceback" not in run.err


def test_empty_file_contains_no_messages(
    score: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """A file with no non-blank line exits 2: '<path> contains no messages'."""
    path = write_jsonl(["", "  "])

    assert_one_line_error(score(path), f"{path} contains no messages")


def test_missing_path_cannot_be_read(score: Callable[..., Run], tmp_path: Path) -> None:
    """A path that does not exist exits 2: 'cannot read <path>: <why>'."""
    path = tmp_path / "absent.jsonl"

    assert_one_line_error(score(path), f"cannot read {path}: No such file or directory")


def test_directory_path_cannot_be_read(score: Callable[..., Run], tmp_path: Path) -> None:
    """A directory exits 2: 'cannot read <path>: it is a directory'."""
    assert_one_line_error(score(tmp_path), f"cannot read {tmp_path}: it is a directory")


def contract_error(build: Callable[[], object]) -> str:
    """The PolicyError text contracts/ gives for a bad threshold or policy file."""
    with pytest.raises(PolicyError) as raised:
        build()
    return str(raised.value)


@pytest.mark.parametrize("raw", ["nan", "1.5", "-0.1", "inf", "abc", ""])
def test_bad_min_evidence_coverage_is_a_configuration_error(
    raw: str,
    score: Callable[..., Run],
    one_message_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A threshold that is not a finite number in 0..1 stops the run in one line, naming it."""
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", raw)
    problem = contract_error(lambda: policy_from_threshold(raw))

    run = score(one_message_file)

    assert_one_line_error(run, f"configuration error: {problem}")
    assert f"MIN_EVIDENCE_COVERAGE={raw!r}" in run.err


def test_bad_min_coverage_option_names_the_option(
    score: Callable[..., Run], one_message_file: Path
) -> None:
    """A bad --min-coverage is reported against the option the user typed."""
    run = score(one_message_file, "--min-coverage", "abc")

    assert_one_line_error(
        run, "configuration error: --min-coverage='abc' is not a number; set a value in 0.0..1.0"
    )


@pytest.mark.parametrize(
    ("toml", "names"),
    [
        pytest.param(
            'version = "v1"\n[groups.default]\nmin_coverage = 1.5\n',
            "groups.default.min_coverage",
            id="threshold-above-1",
        ),
        pytest.param(
            'version = "v1"\n[groups.default]\nmin_coverage = nan\n',
            "groups.default.min_coverage",
            id="threshold-nan",
        ),
        pytest.param(
            'version = "v1"\n[groups.default]\nmin_coverage = "0.8"\n',
            "groups.default.min_coverage",
            id="threshold-string",
        ),
        pytest.param(
            'version = "v1"\n[groups.default]\nminimum = 0.8\n',
            "groups.default.minimum",
            id="unknown-group-key",
        ),
        pytest.param(
            'version = "v1"\nowner = "me"\n[groups.default]\nmin_coverage = 0.8\n',
            "owner",
            id="unknown-top-level-key",
        ),
        pytest.param('version = "v1"\n[groups.default]\n', "groups.default", id="no-threshold"),
        pytest.param("version = \n", "not valid TOML", id="not-toml"),
    ],
)
def test_bad_policy_file_is_a_configuration_error(
    toml: str,
    names: str,
    score: Callable[..., Run],
    one_message_file: Path,
    tmp_path: Path,
) -> None:
    """A policy file with a bad, missing or unknown setting stops the run in one line naming it."""
    policy = tmp_path / "policy.toml"
    policy.write_text(toml)
    problem = contract_error(lambda: parse_policy(toml, source=f"policy file {policy}"))

    run = score(one_message_file, "--policy", policy)

    assert_one_line_error(run, f"configuration error: {problem}")
    assert run.err.startswith(f"evidence-worker: configuration error: policy file {policy}")
    assert names in run.err


def test_missing_policy_file_is_a_configuration_error(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """--policy naming a file that does not exist exits 2 with 'cannot read policy file'."""
    policy = tmp_path / "absent.toml"

    assert_one_line_error(
        score(write_jsonl([message_dict()]), "--policy", policy),
        f"configuration error: cannot read policy file {policy}: No such file or directory",
    )


def test_unknown_store_scheme_is_a_configuration_error(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A store URL that is neither sqlite:/// nor redis:// exits 2 naming the scheme."""
    run = cli("score", write_jsonl([message_dict()]), "--store", "postgres://db/x")

    assert run.code == 2
    assert run.out == ""
    assert run.err.startswith(
        "evidence-worker: configuration error: unknown store scheme 'postgres'"
    )
    assert len(run.err.splitlines()) == 1


def test_unknown_store_scheme_from_environment(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EVIDENCE_STORE_URL with an unknown scheme is reported the same way."""
    monkeypatch.setenv("EVIDENCE_STORE_URL", "memcached://localhost")

    assert_one_line_error(
        cli("score", write_jsonl([message_dict()])),
        "configuration error: unknown store scheme 'memcached' in store URL "
        "(EVIDENCE_STORE_URL or --store): "
        "use sqlite:///path/to.db or redis://host:port/db",
    )


def test_unopenable_sqlite_store_is_a_configuration_error(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """A SQLite path in a missing directory exits 2 in one line."""
    database = tmp_path / "no-such-dir" / "s.sqlite3"

    run = cli("score", write_jsonl([message_dict()]), "--store", f"sqlite:///{database}")

    assert (run.code, run.out) == (2, "")
    assert len(run.err.splitlines()) == 1
    assert run.err.startswith(
        f"evidence-worker: configuration error: cannot open SQLite store {database}: "
    )


def test_bad_setting_names_its_variable(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unusable EVIDENCE_* value is a configuration error naming the variable."""
    monkeypatch.setenv("EVIDENCE_LOG_FORMAT", "xml")

    run = score(write_jsonl([message_dict()]))

    assert (run.code, run.out) == (2, "")
    assert len(run.err.splitlines()) == 1
    assert run.err.startswith("evidence-worker: configuration error: EVIDENCE_LOG_FORMAT: ")
    assert "'json'" in run.err
    assert "Traceback" not in run.err


# Usage --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        pytest.param([], "the following arguments are required: COMMAND", id="no-command"),
        pytest.param(["bogus"], "argument COMMAND: invalid choice: 'bogus'", id="unknown-command"),
        pytest.param(["score"], "the following arguments are required: PATH", id="score-no-path"),
        pytest.param(["gate"], "the following arguments are required: PATH", id="gate-no-path"),
        pytest.param(["show"], "one of the arguments HASH --case is required", id="show-no-hash"),
        pytest.param(["score", "x", "--bogus"], "unrecognized arguments: --bogus", id="bad-flag"),
    ],
)
def test_usage_error_prints_help_and_exits_2(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage error prints the help and the error to stderr and exits 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()

    assert exit_info.value.code == 2
    assert captured.out == ""
    assert captured.err.startswith("usage: evidence-worker")
    assert error in captured.err.splitlines()[-1]
    assert "Traceback" not in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["score", "--help"],
        ["gate", "--help"],
        ["publish", "--help"],
        ["bench", "--help"],
        ["show", "--help"],
        ["alerts", "--help"],
        ["schema", "--help"],
    ],
    ids=" ".join,
)
def test_help_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` prints usage for the command on stdout and exits 0."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out = capsys.readouterr().out

    assert exit_info.value.code == 0
    command = " ".join(argv[:-1])
    assert out.startswith(f"usage: evidence-worker {command}".rstrip())


# Contract drift (SPEC §9) ------------------------------------------------------------------


def test_optional_claims_added_without_a_new_contract_version_are_contract_drift(
    score: Callable[..., Run],
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """The same answer with two more required claims under the same contract version: scored
    under its own hash, marked, owned by evaluation data, one ERROR line, exit 2; a re-run
    meets it again without a second alert; `alerts --kind contract_drift` lists it once."""
    first = message_dict(citations=CITED_SUPPORTED)
    grown = message_dict(
        case_id=first["case_id"],
        citations=CITED_SUPPORTED,
        required_claim_ids=[*first["required_claim_ids"], "refund-fee", "refund-receipt"],
    )
    path = write_jsonl([first, grown])

    runs = [score(path, "--min-coverage", "0.5"), score(path, "--min-coverage", "0.5")]

    for run in runs:
        assert run.code == 2
        assert [(r["contract_drift"], r["owner"], r["status"]) for r in run.records] == [
            (False, None, "pass"),
            (True, "evaluation-data", "fail"),
        ]
        assert_published_shapes(run)
    (drift,) = [line for line in runs[0].lines if line["event"] == CONTRACT_DRIFT]
    assert drift["level"] == "error"
    assert (drift["added_claim_ids"], drift["removed_claim_ids"]) == (
        ["refund-fee", "refund-receipt"],
        [],
    )
    assert (drift["first_input_hash"], drift["input_hash"]) == (
        runs[0].records[0]["input_hash"],
        runs[0].records[1]["input_hash"],
    )
    assert [line["event"] for line in runs[1].lines if line["event"] == CONTRACT_DRIFT] == []
    assert "1 row with contract drift (1 new alert)" in runs[0].summary
    assert "1 row with contract drift (0 new alerts)" in runs[1].summary
    listed = cli("alerts", "--kind", "contract_drift", "--store", store_url)
    assert (listed.code, [line["kind"] for line in listed.lines]) == (2, ["contract_drift"])
    assert listed.err == "alerts: 0 nondeterminism, 1 contract drift (--kind contract_drift)\n"
    assert cli("alerts", "--kind", "nondeterminism", "--store", store_url).code == 0
