"""contracts/examples/ tells one story: its files share no input with a different outcome and
no (contract version, case ID) with another required set, except where that is the point
(the refund-002 retry's nondeterminism, the refund-drift-104 pair's contract drift)."""

from __future__ import annotations

from collections import defaultdict

from pydantic import ValidationError

from contracts import AttributionResult, input_hash
from tests.conftest import EXAMPLES

SCORED_FILES = ("attribution-results.jsonl", "triage-rows.jsonl")


def example_messages() -> list[tuple[str, AttributionResult]]:
    """(file:line, message) for every valid AttributionResult the examples hold."""
    found = []
    for name in SCORED_FILES:
        for number, line in enumerate((EXAMPLES / name).read_text("utf-8").splitlines(), 1):
            try:
                found.append((f"{name}:{number}", AttributionResult.model_validate_json(line)))
            except ValidationError:
                continue  # refund-003: rejected before scoring, so it has no input hash
    return found


def test_only_the_refund_002_rows_share_an_input_hash() -> None:
    """Scoring both files on one store gives one conflict: the deliberate refund-002 retry."""
    by_hash: dict[str, list[tuple[str, str, list[str]]]] = defaultdict(list)
    for where, message in example_messages():
        by_hash[input_hash(message)].append(
            (where, message.case_id, sorted(message.supported_claim_ids))
        )
    shared = [rows for rows in by_hash.values() if len(rows) > 1]

    assert shared == [
        [
            ("attribution-results.jsonl:2", "refund-002", ["refund-window", "support-channel"]),
            (
                "attribution-results.jsonl:3",
                "refund-002-rerun",
                ["refund-window", "support-channel"],
            ),
            ("attribution-results.jsonl:4", "refund-002-retry", ["refund-window"]),
        ]
    ]


def test_only_refund_drift_104_has_two_required_sets() -> None:
    """Scoring both files on one store gives one contract drift: the deliberate pair."""
    sets: dict[tuple[str, str], set[tuple[str, ...]]] = defaultdict(set)
    for _, message in example_messages():
        sets[message.contract_version, message.case_id].add(
            tuple(sorted(message.required_claim_ids))
        )

    assert {pair: found for pair, found in sets.items() if len(found) > 1} == {
        ("support-faq/2026-10", "refund-drift-104"): {
            ("refund-method", "refund-window"),
            ("refund-exceptions", "refund-method", "refund-receipt", "refund-window"),
        }
    }
