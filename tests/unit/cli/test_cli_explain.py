"""Looking a row up (SPEC §9): `show --case CASE_ID` and `explain HASH | --case CASE_ID`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts import AttributionResult, input_hash
from tests.conftest import EXAMPLES, Run
from worker.cli import main

POLICY = EXAMPLES / "policy.toml"
HINT = (
    "(an input hash is 64 lowercase hex digits, as in a record's input_hash; to look a row up"
    " by its case ID: evidence-worker {command} --case CASE_ID)"
)
# SPEC §9's example: refund-method cited to a document that was not retrieved.
JOIN_BROKEN: list[dict[str, Any]] = [
    {"claim_id": "refund-window", "document_id": "kb-1", "answer_span": [0, 36]},
    {"claim_id": "refund-method", "document_id": "kb-9", "answer_span": [0, 36]},
    {"claim_id": "support-channel", "document_id": "kb-2", "answer_span": [37, 69]},
]
CONTEXTS = [
    {"document_id": "kb-1", "text": "Items may be returned within 30 days."},
    {"document_id": "kb-2", "text": "Support is available by live chat."},
]


@pytest.fixture
def scored(
    cli: Callable[..., Run],
    store_url: str,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> Callable[..., str]:
    """Score one message (fields as given) in a run of its own; returns its input hash."""

    def run(**fields: Any) -> str:
        row = message_dict(**fields)
        result = cli("score", write_jsonl([row]), "--store", store_url)
        assert result.code in (0, 2, 3), result.err
        return input_hash(AttributionResult.model_validate(row))

    return run


# --- show --case -----------------------------------------------------------------------------


def test_show_case_prints_every_hash_of_the_case_newest_first(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    """A JSON array of histories, each with its attempts' citations and findings."""
    older = scored(citations=JOIN_BROKEN, contexts=CONTEXTS)
    scored(case_id="refund-002", answer="Another answer.")
    newer = scored(answer="Returns within 30 days.")

    run = cli("show", "--case", "refund-001", "--store", store_url)

    assert (run.code, run.err) == (
        0,
        f"show: 2 input hashes of case refund-001 (store {store_url})\n",
    )
    shown = json.loads(run.out)
    assert [history["input_hash"] for history in shown] == [newer, older]
    attempt = shown[1]["attempts"][0]
    assert [c["document_id"] for c in attempt["citations"]] == ["kb-1", "kb-9", "kb-2"]
    assert attempt["findings"] == [
        {
            "claim_id": "refund-method",
            "finding": "cited_document_not_retrieved",
            "owner": "attribution",
            "document_ids": ["kb-9"],
            "evidence_retrieved": None,
        }
    ]
    assert (attempt["retrieved_document_ids"], attempt["policy_group"]) == (
        ["kb-1", "kb-2"],
        "default",
    )


def test_show_case_limit_keeps_the_newest_and_says_there_are_more(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    scored()
    newer = scored(answer="Returns within 30 days.")

    run = cli("show", "--case", "refund-001", "--limit", "1", "--store", store_url)
    every = cli("show", "--case", "refund-001", "--limit", "2", "--store", store_url)

    assert run.code == 0
    assert [history["input_hash"] for history in json.loads(run.out)] == [newer]
    assert run.err == (
        "evidence-worker show: the newest 1 input hashes of case refund-001 shown; it has more"
        " (raise --limit)\n"
        f"show: 1 input hash of case refund-001 (store {store_url})\n"
    )
    assert (len(json.loads(every.out)), every.err) == (
        2,
        f"show: 2 input hashes of case refund-001 (store {store_url})\n",
    )


def test_show_case_with_nothing_recorded_says_so_and_exits_2(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    scored()

    run = cli("show", "--case", "refund-404", "--store", store_url)

    assert (run.code, run.out) == (2, "")
    assert run.err == "evidence-worker: no input hash recorded for case refund-404\n"


@pytest.mark.parametrize("command", ["show", "explain"])
@pytest.mark.parametrize(
    ("argv", "error"),
    [
        pytest.param(
            ["0" * 64, "--case", "refund-001"],
            "argument --case: not allowed with argument HASH",
            id="both",
        ),
        pytest.param([], "one of the arguments HASH --case is required", id="neither"),
    ],
)
def test_exactly_one_of_a_hash_and_a_case_is_required(
    command: str, argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both or neither: a usage error, two lines on stderr, exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        main([command, *argv])
    err = capsys.readouterr().err

    assert exit_info.value.code == 2
    assert err.splitlines() == [
        f"evidence-worker {command}: error: {error}",
        f"run 'evidence-worker {command} --help' for the options",
    ]


def test_show_limit_without_case_is_an_error(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    known = scored()

    run = cli("show", known, "--limit", "1", "--store", store_url)

    assert (run.code, run.err) == (
        2,
        "evidence-worker: --limit applies to show --case CASE_ID only\n",
    )


@pytest.mark.parametrize("command", ["show", "explain"])
@pytest.mark.parametrize("text", ["refund-001", "0" * 64, "F" * 64])
def test_an_unknown_hash_says_what_a_hash_looks_like_and_how_to_look_a_case_up(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str, command: str, text: str
) -> None:
    """A case ID given as a hash, a hash never recorded, an upper-case one: one line, exit 2."""
    scored()

    run = cli(command, text, "--store", store_url)

    assert (run.code, run.out) == (2, "")
    assert run.err == (
        f"evidence-worker: no outcome recorded for input hash {text} "
        + HINT.format(command=command)
        + "\n"
    )


# --- explain ---------------------------------------------------------------------------------


def test_explain_hash_prints_the_trail_and_exits_1_for_a_failed_row(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    known = scored(citations=JOIN_BROKEN, contexts=CONTEXTS)

    run = cli("explain", known, "--store", store_url, "--policy", POLICY)

    assert (run.code, run.err) == (1, f"explain: input hash {known} (store {store_url})\n")
    lines = run.out.splitlines()
    assert lines[0:2] == ["case: refund-001", f"input hash: {known}"]
    assert lines[2] == "contract version: support-faq/2026-10"
    assert lines[4:] == [
        "value: 0.6667",
        "reason: supported=2; required=3; missing=refund-method",
        "status: fail under policy 2026-12-01, group default, threshold 0.85",
        "owner: attribution",
        "missing claims: 1",
        "  refund-method: cited to kb-9, which was not retrieved (retrieved: kb-1, kb-2):"
        " check the citation join",
        "attempts: 1 recorded",
    ]


def test_explain_case_explains_its_newest_hash_and_counts_the_others(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    scored(citations=JOIN_BROKEN, contexts=CONTEXTS)
    newest = scored(answer="Returns within 30 days.")

    run = cli("explain", "--case", "refund-001", "--store", store_url, "--min-coverage", "0.5")

    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[1] == f"input hash: {newest}"
    assert lines[6] == "status: pass under policy cli:0.5, group default, threshold 0.5"
    assert lines[-1] == (
        "case refund-001 has 1 older input hash:"
        " evidence-worker show --case refund-001 lists them all"
    )


def test_explain_without_a_policy_does_not_decide_and_exits_0(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    known = scored()

    run = cli("explain", known, "--store", store_url)

    assert run.code == 0
    assert run.out.splitlines()[6:10] == [
        "status: not decided: pass --policy/--min-coverage",
        "owner: none until decided",
        "missing claims: 1",
        "  refund-method: the message carries no citations, so a dropped claim ID looks like"
        " a missing one: open the attribution job output",
    ]


def test_explain_takes_the_policy_from_the_environment(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str, monkeypatch: Any
) -> None:
    known = scored()
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", "0.9")

    run = cli("explain", known, "--store", store_url)

    assert run.code == 1
    assert run.out.splitlines()[6] == (
        "status: fail under policy env:0.9, group default, threshold 0.9"
    )


def test_explain_an_invalid_row_exits_2(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    known = scored(supported_claim_ids=["old-c1"])

    run = cli("explain", known, "--store", store_url, "--policy", POLICY)

    assert run.code == 2
    assert run.out.splitlines()[4:9] == [
        "value: none (invalid)",
        "reason: Error executing metric evidence_coverage: supported_claim_ids contains"
        " unknown IDs: old-c1",
        "status: invalid",
        "owner: evaluation-data (an invalid row: fix the row's claim lists or its group)",
        "findings: none (an invalid row is not triaged)",
    ]


def test_explain_a_hash_whose_attempts_disagree_exits_3(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    known = scored()
    assert scored(supported_claim_ids=["refund-window"]) == known

    run = cli("explain", known, "--store", store_url, "--policy", POLICY)

    assert run.code == 3
    assert run.out.splitlines()[-1] == (
        "attempts: 2 recorded; 1 gave another outcome, the first stands (nondeterminism:"
        " evidence-worker alerts --kind nondeterminism)"
    )


def test_explain_case_with_nothing_recorded_exits_2(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str
) -> None:
    scored()

    run = cli("explain", "--case", "refund-404", "--store", store_url)

    assert (run.code, run.out) == (2, "")
    assert run.err == "evidence-worker: no input hash recorded for case refund-404\n"


def test_explain_with_a_baseline_policy_names_the_release_rule_and_both_thresholds(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str, tmp_path: Path
) -> None:
    """2/3 passes a 0.6 rule and fails 0.85: the owner is the release rule, as gate says."""
    known = scored(citations=JOIN_BROKEN, contexts=CONTEXTS)
    baseline = tmp_path / "old.toml"
    baseline.write_text('version = "2026-11-01"\n[groups.default]\nmin_coverage = 0.6\n')

    run = cli(
        "explain", known, "--store", store_url, "--policy", POLICY, "--baseline-policy", baseline
    )

    # the current policy alone sets the exit code
    assert (run.code, run.err) == (1, f"explain: input hash {known} (store {store_url})\n")
    assert run.out.splitlines()[6:9] == [
        "status: fail under policy 2026-12-01, group default, threshold 0.85",
        "baseline: pass under policy 2026-11-01, group default, threshold 0.6",
        "owner: release-rule (the same value passed policy 2026-11-01's threshold 0.6 and fails"
        " policy 2026-12-01's threshold 0.85: the rule moved, not the row)",
    ]


def test_explain_with_a_baseline_the_row_also_fails_keeps_the_findings_owner(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str, tmp_path: Path
) -> None:
    """Failing under both rules is not the release rule's: the owner is the findings'."""
    known = scored(citations=JOIN_BROKEN, contexts=CONTEXTS)
    baseline = tmp_path / "old.toml"
    baseline.write_text('version = "2026-11-01"\n[groups.default]\nmin_coverage = 0.75\n')

    run = cli(
        "explain", known, "--store", store_url, "--policy", POLICY, "--baseline-policy", baseline
    )

    assert run.out.splitlines()[7:9] == [
        "baseline: fail under policy 2026-11-01, group default, threshold 0.75",
        "owner: attribution",
    ]


def test_explain_with_a_bad_baseline_policy_is_one_line_and_exit_2(
    cli: Callable[..., Run], scored: Callable[..., str], store_url: str, tmp_path: Path
) -> None:
    known = scored(citations=JOIN_BROKEN, contexts=CONTEXTS)

    run = cli(
        "explain", known, "--store", store_url, "--baseline-policy", tmp_path / "missing.toml"
    )

    assert run.code == 2
    assert len(run.err.splitlines()) == 1, run.err
    assert run.out == ""
