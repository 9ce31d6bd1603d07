"""How stores spell outcomes and attempts: one definition of "same outcome", lossless entries."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts import Attempt
from tests.conftest import FIXED_NOW
from worker.stores import classify, outcome_json
from worker.stores.codec import (
    DRIFTED_TAIL,
    OUTCOME_FIELDS,
    OWN_FIELDS,
    SHARED_FIELDS,
    Expander,
    _shared_head_spelled,
    drifted,
    entry,
    required_set_json,
    same_shared_fields,
    script_args,
    shared_head,
    shared_json,
    whole,
)

TWO_THIRDS_REASON = "supported=2; required=3; missing=refund-method"
# The triage fields of an attempt (SPEC §9) in every spelling they have: a citation with and
# without an excerpt, findings with and without evidence_retrieved.
CITATIONS = [
    {"claim_id": "refund-window", "document_id": "kb-1", "answer_span": [0, 9]},
    {
        "claim_id": " refund-method",
        "document_id": 'kb "2"',
        "answer_span": [-1, 99],
        "excerpt": None,
    },
    {
        "claim_id": "support-channel",
        "document_id": "kb-3",
        "answer_span": [10, 20],
        "excerpt": "Réf ü\n",
    },
]
FINDINGS = [
    {
        "claim_id": "refund-method",
        "finding": "cited_span_invalid",
        "owner": "attribution",
        "document_ids": ['kb "2"'],
    },
    {
        "claim_id": "x",
        "finding": "not_cited",
        "owner": "product",
        "document_ids": ["kb-1"],
        "evidence_retrieved": True,
    },
]
TRIAGED = {
    "citations": CITATIONS,
    "missing_claim_ids": ["refund-method"],
    "findings": FINDINGS,
    "owner": "attribution",
}


def attempt(n: int = 1, **changes: Any) -> Attempt:
    """Attempt number n with its own case ID, task ID and time; fields changed as given."""
    fields: dict[str, Any] = {
        "case_id": f"refund-{n:03d}",
        "task_id": f"task-{n}",
        "required_claim_ids": ["refund-window", "refund-method", "support-channel"],
        "supported_claim_ids": ["refund-window", "support-channel"],
        "value": 2 / 3,
        "reason": TWO_THIRDS_REASON,
        "recorded_at": FIXED_NOW + timedelta(seconds=n),
        "metric_version": "evidence_coverage/1",
        "ragas_version": "0.4.3",
        "worker_version": "0.1.0",
    }
    return Attempt(**{**fields, **changes})


def round_trip(value: Attempt) -> Attempt:
    """An attempt as a store reads it back: through pydantic's JSON."""
    return Attempt.model_validate_json(value.model_dump_json())


EDGE_VALUES = [
    None,
    0.0,
    -0.0,
    1.0,
    0.5,
    0.50000000001,
    2 / 3,
    0.6666666666666667,
    1e-05,
    5e-324,
    1.7976931348623157e308,
]
texts = st.text(st.characters(exclude_categories=["Cs"]))  # stores keep UTF-8: no surrogates


# --- outcome_json: the definition of "same outcome" ---------------------------------------


@pytest.mark.parametrize("value", EDGE_VALUES)
@pytest.mark.parametrize("reason", ["", TWO_THIRDS_REASON, " x ", 'réf-ünïcode "q" \\ \n'])
def test_outcome_json_is_json_dumps_of_value_and_reason(value: float | None, reason: str) -> None:
    """The spelling Redis has kept since the first version: json.dumps([value, reason])."""
    outcome = attempt(value=value, reason=reason)

    assert outcome_json(outcome) == json.dumps([value, reason], ensure_ascii=False)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_spelled_as_stores_keep_them(value: float) -> None:
    """NaN and infinities are written as null by pydantic, so they compare as null."""
    assert outcome_json(attempt(value=value)) == json.dumps([None, TWO_THIRDS_REASON])
    assert round_trip(attempt(value=value)).value is None


@pytest.mark.parametrize("value", [*EDGE_VALUES, math.nan, math.inf])
def test_outcome_json_is_the_same_after_a_store_round_trip(value: float | None) -> None:
    """SQLite compares the first as read back, Redis the string made before: they agree."""
    first = attempt(value=value)

    assert outcome_json(round_trip(first)) == outcome_json(first)


@given(value=st.none() | st.floats(), reason=texts)
def test_outcome_json_survives_any_round_trip(value: float | None, reason: str) -> None:
    """For every value and reason, reading an attempt back does not change its outcome_json."""
    first = attempt(value=value, reason=reason)

    assert outcome_json(round_trip(first)) == outcome_json(first)


@pytest.mark.parametrize(
    ("first", "later", "expected"),
    [
        pytest.param((0.5, "r"), (0.5, "r"), "hit", id="equal"),
        pytest.param((0.5, "r"), (0.50000000001, "r"), "conflict", id="0.5-vs-0.50000000001"),
        pytest.param((0.0, "r"), (-0.0, "r"), "conflict", id="zero-vs-negative-zero"),
        pytest.param((None, "r"), (0.0, "r"), "conflict", id="none-vs-zero"),
        pytest.param((0.5, "a b"), (0.5, "a  b"), "conflict", id="reason-inner-whitespace"),
        pytest.param((0.5, "r"), (0.5, "r "), "conflict", id="reason-trailing-space"),
        pytest.param((0.5, "é"), (0.5, "e\u0301"), "conflict", id="reason-unnormalized"),
        pytest.param((math.nan, "r"), (None, "r"), "hit", id="nan-is-kept-as-null"),
    ],
)
def test_classify_compares_outcome_json(
    first: tuple[float | None, str], later: tuple[float | None, str], expected: str
) -> None:
    """classify() says hit exactly when the two outcome_json() strings are equal."""
    a = attempt(1, value=first[0], reason=first[1])
    b = attempt(2, value=later[0], reason=later[1])

    assert classify(a, b) == expected
    assert (outcome_json(a) == outcome_json(b)) == (expected == "hit")


# --- entries ---------------------------------------------------------------------------------


def test_field_groups_cover_every_attempt_field_once() -> None:
    """Each Attempt field is spelled by exactly one group: none is lost from an entry."""
    groups = [*OWN_FIELDS, *OUTCOME_FIELDS, *SHARED_FIELDS]

    assert sorted(groups) == sorted(Attempt.model_fields)


def test_whole_reads_back_as_the_attempt() -> None:
    """A first attempt kept whole parses to the very attempt."""
    first = attempt(1, case_id=None, task_id='tâche "1"', redelivered=True)

    assert Attempt.model_validate_json(whole(first)) == first


def test_a_hit_with_the_first_lists_is_stored_as_its_identity_only() -> None:
    """The entry of a hit sharing the first's lists and versions is [case, task, time]."""
    assert entry(attempt(2), same_outcome=True, same_shared=True) == (
        '["refund-002","task-2","2026-12-01T12:00:02Z"]'
    )


def test_a_conflict_with_other_lists_stores_what_differs() -> None:
    """A conflict with other supported IDs keeps its outcome and its lists in the entry."""
    later = attempt(2, value=1 / 3, reason="other", supported_claim_ids=["refund-window"])

    stored = json.loads(entry(later, same_outcome=False, same_shared=False))

    assert stored[:3] == ["refund-002", "task-2", "2026-12-01T12:00:02Z"]
    assert stored[3]["supported_claim_ids"] == ["refund-window"]
    assert (stored[3]["value"], stored[3]["reason"]) == (1 / 3, "other")


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({}, id="hit"),
        pytest.param({"value": 0.5}, id="conflict"),
        pytest.param({"supported_claim_ids": ["refund-window"]}, id="other-lists"),
        pytest.param({"required_claim_ids": ["refund-method", "refund-window"]}, id="reordered"),
        pytest.param({"worker_version": "0.2.0"}, id="other-version"),
        pytest.param({"redelivered": True}, id="redelivered"),
        pytest.param({"value": None, "reason": "", "case_id": None, "task_id": None}, id="nulls"),
        pytest.param({"value": -0.0}, id="negative-zero"),
        pytest.param(TRIAGED, id="triaged"),
        pytest.param({**TRIAGED, "contract_drift": True, "owner": "evaluation-data"}, id="drift"),
        pytest.param({"citations": [], "findings": [], "missing_claim_ids": None}, id="empty"),
        pytest.param(
            {"retrieved_document_ids": ['kb "1"', "ü"], "policy_group": "disclosure"},
            id="explain-fields",
        ),
        pytest.param({"retrieved_document_ids": []}, id="nothing-retrieved"),
    ],
)
def test_every_entry_expands_to_the_attempt(changes: dict[str, Any]) -> None:
    """An entry written beside the first reads back, with the first, as the whole attempt."""
    first = attempt(1)
    later = attempt(2, **changes)
    stored = entry(
        later,
        same_outcome=classify(first, later) == "hit",
        same_shared=same_shared_fields(first, later),
    )

    expanded = Expander(first).attempt(stored)

    assert expanded == later
    assert expanded.model_dump_json() == later.model_dump_json()


def test_a_whole_attempt_entry_reads_as_before() -> None:
    """Entries written before this encoding (whole attempts) read back unchanged."""
    later = attempt(2, supported_claim_ids=[])

    assert Expander(attempt(1)).attempt(later.model_dump_json()) == later
    assert Expander(attempt(1)).attempt(later.model_dump_json().encode()) == later


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"supported_claim_ids": ["refund-window"]},
        {"required_claim_ids": ["refund-method", "refund-window", "support-channel"]},
        {"metric_version": "evidence_coverage/2"},
        {"ragas_version": "0.4.4"},
        {"worker_version": "0.1.1"},
        {"redelivered": True},
        {"supported_claim_ids": ["refund-window", "support-channel", ""]},
        TRIAGED,
        {"citations": []},
        {"citations": CITATIONS[:1]},
        {"findings": []},
        {"missing_claim_ids": []},
        {"contract_drift": True},
        {"owner": "product"},
        {"contract_version": "support-faq/2026-10"},
        {"retrieved_document_ids": []},
        {"retrieved_document_ids": ["kb-1"]},
        {"policy_group": "default"},
        {"grader_name": "judge", "grader_version": "1", "grader_model": "m"},
    ],
)
def test_same_shared_fields_is_equality_of_shared_json(changes: dict[str, Any]) -> None:
    """The SQLite comparison (values) and the Redis one (strings) agree."""
    first, later = attempt(1), attempt(2, **changes)

    assert same_shared_fields(first, later) == (shared_json(first) == shared_json(later))
    assert same_shared_fields(first, later) == (not changes)


@pytest.mark.parametrize(
    "grader",
    [{}, {"grader_name": 'say "judge"', "grader_version": "ü\n", "grader_model": "m"}],
    ids=["no-grader", "grader"],
)
def test_shared_json_is_json_of_the_shared_fields(grader: dict[str, str]) -> None:
    """shared_json() is valid JSON members: the shared fields json.dumps would write, a
    citation as an array, and answer_length, the grader's names and expected_evidence left
    out when None."""
    later = attempt(
        2, supported_claim_ids=['say "hi"', "ü\n"], redelivered=True, **TRIAGED, **grader
    )

    members = json.loads(f"{{{shared_json(later)}}}")
    dumped = later.model_dump(mode="json", include=set(SHARED_FIELDS))
    dumped["citations"] = [
        [c["claim_id"], c["document_id"], *c["answer_span"]]
        + ([] if c["excerpt"] is None else [c["excerpt"]])
        for c in dumped["citations"]
    ]
    for finding in dumped["findings"]:  # left out when None
        if finding["evidence_retrieved"] is None:
            del finding["evidence_retrieved"]
    for name in ("grader_name", "grader_version", "grader_model"):
        if dumped[name] is None:
            del dumped[name]
    assert members == json.loads(json.dumps(dumped, ensure_ascii=False))


def test_triage_fields_read_back_and_spell_the_same_after_a_round_trip() -> None:
    """A triaged attempt kept whole parses to itself, and its shared_json() is the same
    string after a round trip through pydantic's JSON (what a store reads back). Without
    triage's inputs (answer_length) its findings are kept as they are."""
    first = attempt(1, **TRIAGED)

    assert Attempt.model_validate_json(whole(first)) == first
    assert shared_json(round_trip(first)) == shared_json(first)
    members = json.loads(f"{{{shared_json(first)}}}")
    assert members["citations"][0] == ["refund-window", "kb-1", 0, 9]  # no excerpt: 4 items
    assert members["citations"][2] == ["support-channel", "kb-3", 10, 20, "Réf ü\n"]
    assert "evidence_retrieved" not in members["findings"][0]
    assert members["findings"][1]["evidence_retrieved"] is True


@given(
    st.lists(
        st.tuples(texts, texts, st.integers(-(2**40), 2**40), st.integers(), st.none() | texts)
    ),
    st.none() | st.lists(texts),
)
def test_any_citations_spell_the_same_after_a_round_trip(
    citations: list[tuple[str, str, int, int, str | None]], missing: list[str] | None
) -> None:
    kept = [
        {"claim_id": c, "document_id": d, "answer_span": [a, b], "excerpt": e}
        for c, d, a, b, e in citations
    ]
    first = attempt(1, citations=kept, missing_claim_ids=missing)

    assert Attempt.model_validate_json(whole(first)) == first
    assert shared_json(round_trip(first)) == shared_json(first)


def test_script_args_are_the_pieces_of_whole() -> None:
    """What the Redis script is given rebuilds the whole attempt exactly as whole() does, and
    its drifted tail the whole drifted attempt."""
    first = attempt(1, **{**TRIAGED, "contract_version": "support-faq/2026-10"})
    case_id, task_id, recorded_at, outcome, members, head, tail, version, required = script_args(
        first
    )

    def rebuilt(end: str) -> str:
        return (
            f'{{"case_id":{case_id},"task_id":{task_id},"recorded_at":{recorded_at},'
            f"{members},{head}{end}}}"
        )

    assert rebuilt(tail) == whole(first)
    assert rebuilt(DRIFTED_TAIL) == whole(drifted(first))
    assert drifted(first).owner == "evaluation-data"
    assert outcome == outcome_json(first)
    assert (version, required) == (
        '"support-faq/2026-10"',
        '["refund-method","refund-window","support-channel"]',
    )


@pytest.mark.parametrize(
    "changes",
    [{"value": None}, {"contract_version": None}, {"case_id": None}],
)
def test_only_a_valid_attempt_with_a_contract_and_a_case_is_checked_for_drift(
    changes: dict[str, Any],
) -> None:
    assert required_set_json(attempt(1, **{"contract_version": "c", **changes})) == ""


# Any text, lone surrogates (legal JSON escapes) included.
any_texts = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.characters())


@given(
    st.lists(
        st.tuples(
            any_texts,
            any_texts,
            st.integers(),
            st.integers(-(2**63), 2**63),
            st.none() | any_texts,
        ),
        max_size=4,
    ),
    st.lists(any_texts, max_size=3),
    any_texts,
)
def test_shared_json_is_the_python_spelling_whatever_the_text(
    citations: list[tuple[str, str, int, int, str | None]], supported: list[str], grader: str
) -> None:
    """orjson's spelling of the shared fields is the Python one; lone surrogates and integers
    beyond 64 bits, which orjson refuses, take the Python one."""
    kept = [
        {"claim_id": c, "document_id": d, "answer_span": [a, b], "excerpt": e}
        for c, d, a, b, e in citations
    ]
    later = attempt(2, **TRIAGED).model_copy(
        update={
            "citations": attempt(2, citations=kept).citations,
            "supported_claim_ids": supported,
            "grader_name": grader,
            "grader_version": grader[:1],
            "grader_model": "m",
        }
    )

    assert shared_head(later) == _shared_head_spelled(later)


def test_shared_json_of_a_lone_surrogate_is_its_python_spelling() -> None:
    """orjson refuses a lone surrogate; the Python spelling keeps it as json.dumps does."""
    later = attempt(
        2, citations=[{"claim_id": "a", "document_id": "d\udc80", "answer_span": [0, 1]}]
    )

    assert '["a","d\udc80",0,1]' in shared_json(later)
    assert shared_head(later) == _shared_head_spelled(later)
