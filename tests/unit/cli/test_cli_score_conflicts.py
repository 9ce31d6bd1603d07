"""`evidence-worker score` when inputs come back different: nondeterminism across runs (kept
first, one alert), `show` and `alerts` on it, and contract drift (SPEC §9)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts.record_models import CONTRACT_DRIFT
from tests.conftest import CITED_SUPPORTED, Run
from tests.unit.cli.factories import TWO_THIRDS, assert_published_shapes, hash_of


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
        "score: 1 row: scored 1; cache conflict 1; 1 nondeterminism alert; "
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
    assert run.err == f"alerts: 1 nondeterminism, 0 contract drift (store {store_url})\n"


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
        f" (the newest 2 of 3 kept; raise --limit to see more) (store {store_url})\n"
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
    assert run.err == f"alerts: 0 nondeterminism, 0 contract drift (store {store_url})\n"


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
    assert listed.err == (
        f"alerts: 0 nondeterminism, 1 contract drift (--kind contract_drift) (store {store_url})\n"
    )
    assert cli("alerts", "--kind", "nondeterminism", "--store", store_url).code == 0
