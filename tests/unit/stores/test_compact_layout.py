"""The compact layout (issue 24, item 3): a stored attempt keeps triage's inputs and not its
findings, which are derived on read exactly as triage made them; a first attempt is kept once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contracts import Attempt, AttributionResult, Policy
from contracts.policy import PolicyGroup, parse_policy
from worker.bench.drain import sample_messages
from worker.pipeline.scoring import Delivery, judge, make_attempt
from worker.stores import outcome_json
from worker.stores.codec import (
    Expander,
    _shared_head_spelled,
    derivable,
    drifted,
    entry,
    kept_comparands,
    shared_head,
    shared_json,
    whole,
    with_first,
)

NOW = datetime(2026, 12, 6, 12, 0, 0, 123456, tzinfo=UTC)
EXAMPLES = Path(__file__).resolve().parents[3] / "contracts" / "examples"
POLICIES = {
    "report-only": None,
    "min-0.75": Policy(version="v1", groups={"default": PolicyGroup(min_coverage=0.75)}),
    "examples": parse_policy((EXAMPLES / "policy.toml").read_text()),
}


def messages() -> list[AttributionResult]:
    """The bench's varied messages and every example row (span, retrieval and citation
    findings, expected evidence, invalid rows)."""
    bodies: list[dict[str, Any]] = list(sample_messages(600))
    for name in ("attribution-results.jsonl", "triage-rows.jsonl"):
        bodies += [json.loads(line) for line in (EXAMPLES / name).open()]
    found = []
    for body in bodies:
        try:
            found.append(AttributionResult.model_validate(body))
        except ValidationError:
            continue
    return found


@pytest.mark.parametrize("excerpt_chars", [None, 12])
@pytest.mark.parametrize("policy", POLICIES.values(), ids=POLICIES.keys())
def test_every_attempt_reads_back_whole_from_its_compact_form(
    policy: Policy | None, excerpt_chars: int | None
) -> None:
    attempts = [
        make_attempt(
            judge(message, Delivery(task_id="t"), policy), now=NOW, excerpt_chars=excerpt_chars
        )
        for message in messages()
    ]
    for attempt in [*attempts, *map(drifted, attempts)]:
        stored = whole(attempt)
        # Derived everywhere but where a valid value was decided invalid (no policy group
        # for the row): triage then ran on no claim (below).
        groupless = attempt.value is not None and attempt.missing_claim_ids is None
        assert derivable(attempt) == (not groupless)
        assert ('"findings"' not in stored) == derivable(attempt)
        assert Attempt.model_validate_json(stored) == attempt
    assert len(attempts) > 550
    assert any(derivable(attempt) and attempt.findings for attempt in attempts)


def test_an_attempt_invalid_under_its_policy_keeps_its_empty_triage() -> None:
    """A valid value decided invalid (no policy group for it): triage ran on no claim, so
    the findings are not what the inputs give, and are kept."""
    message = next(m for m in messages() if m.supported_claim_ids and m.citations)
    groupless = Policy(version="v1", groups={"other": PolicyGroup(min_coverage=0.5)})
    attempt = make_attempt(judge(message, Delivery(), groupless), now=NOW)

    assert (attempt.value is not None, attempt.missing_claim_ids, attempt.findings) == (
        True,
        None,
        [],
    )
    assert not derivable(attempt)
    assert '"missing_claim_ids":null,"findings":[]' in whole(attempt)
    assert Attempt.model_validate_json(whole(attempt)) == attempt


def test_a_retrieved_id_with_a_lone_surrogate_keeps_the_findings() -> None:
    attempt = make_attempt(judge(messages()[0], Delivery(), None), now=NOW)
    odd = attempt.model_copy(update={"retrieved_document_ids": ["doc-\\udc80"]})

    assert derivable(attempt)
    assert not derivable(odd)
    assert Attempt.model_validate_json(whole(odd)) == odd


def test_a_compact_first_holds_its_outcome_and_shared_members() -> None:
    """What the stores compare a later attempt with is read out of the first itself: for
    every attempt (invalid rows' null values, reasons with quotes and commas included)."""
    attempts = [
        make_attempt(judge(message, Delivery(task_id="t"), None), now=NOW) for message in messages()
    ]
    assert any(attempt.value is None for attempt in attempts)
    for attempt in attempts:
        stored = whole(attempt)
        assert stored.count(',"answer_length":') == 1
        assert kept_comparands(stored) == (outcome_json(attempt), shared_json(attempt))
        odd = attempt.model_copy(update={"reason": 'a, "reason": b,"value":1'})
        assert kept_comparands(whole(odd)) == (outcome_json(odd), shared_json(odd))
    without = whole(attempts[3].model_copy(update={"answer_length": None}))
    assert kept_comparands(without) is None


def test_a_later_entry_with_its_own_lists_derives_its_own_findings() -> None:
    message = next(m for m in messages() if len(m.supported_claim_ids) >= 2 and m.citations)
    first = make_attempt(judge(message, Delivery(task_id="a"), None), now=NOW)
    fewer = message.model_copy(update={"supported_claim_ids": message.supported_claim_ids[:1]})
    later = make_attempt(judge(fewer, Delivery(task_id="b"), None), now=NOW)
    assert later.findings != first.findings

    stored = entry(later, same_outcome=False, same_shared=False)

    assert '"findings"' not in stored
    assert Expander(first).attempt(stored) == later


@pytest.mark.parametrize(
    ("total", "entries", "bound", "expected"),
    [
        (1, 0, 100, ["first"]),
        (3, 2, 100, ["first", "e1", "e2"]),
        (3, 2, 2, ["e1", "e2"]),  # the newest `bound`
        (5, 2, 2, ["e1", "e2"]),  # the first and two more were trimmed
    ],
)
def test_a_compact_first_leads_its_entries_until_they_are_trimmed(
    total: int, entries: int, bound: int, expected: list[str]
) -> None:
    first = make_attempt(judge(messages()[0], Delivery(task_id="first"), None), now=NOW)
    later = [first.model_copy(update={"task_id": f"e{n}"}) for n in range(1, entries + 1)]

    found = with_first(first, later, total, bound)

    assert [a.task_id for a in found] == expected


def test_a_first_stored_before_keeps_its_own_entry() -> None:
    first = make_attempt(judge(messages()[0], Delivery(task_id="first"), None), now=NOW)
    old = first.model_copy(update={"answer_length": None})

    assert with_first(old, [old], 1, 100) == [old]


def test_the_python_spelling_of_a_compact_attempt_is_orjsons() -> None:
    """What orjson refuses (lone surrogates) takes the Python spelling: the two agree on
    everything else, expected evidence and kept findings included."""
    attempts = [
        make_attempt(judge(message, Delivery(), policy), now=NOW, excerpt_chars=12)
        for message in messages()
        for policy in POLICIES.values()
    ]
    assert any(attempt.expected_evidence for attempt in attempts)
    assert any(not derivable(attempt) for attempt in attempts)
    for attempt in attempts:
        assert shared_head(attempt) == _shared_head_spelled(attempt)
