"""SPEC §9 triage, rule by rule: every finding, the order of the four steps, the best of several
citations, the row owner's precedence, and the IDs the metric compares after stripping."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import AttributionResult, Policy, decide, input_hash
from contracts.metric import score_pair
from contracts.outcomes import Decision, Outcome
from contracts.policy import policy_from_threshold
from contracts.triage import OWNER_OF, Finding, FindingName, Triage, triage
from tests.conftest import BASE_MESSAGE
from worker.errors import InputError
from worker.pipeline.intake import admit

ANSWER = "Refunds within 30 days. Card refunds only. Ask support."  # 56 characters
REQUIRED = ["refund-window", "refund-method", "support-channel"]
POLICY = policy_from_threshold("0.9", name="test", origin="test")


def message(**fields: Any) -> AttributionResult:
    base: dict[str, Any] = {
        **BASE_MESSAGE,
        "answer": ANSWER,
        "contexts": [
            {"document_id": "kb-1", "text": "Refunds are accepted within 30 days."},
            {"document_id": "kb-2", "text": "Contact support by chat."},
        ],
        "required_claim_ids": REQUIRED,
        "supported_claim_ids": ["refund-window", "support-channel"],
        "citations": [
            {"claim_id": "refund-window", "document_id": "kb-1", "answer_span": [0, 23]},
            {"claim_id": "support-channel", "document_id": "kb-2", "answer_span": [43, 56]},
        ],
    }
    return AttributionResult.model_validate({**base, **fields})


def triaged(
    row: AttributionResult,
    policy: Policy | None = POLICY,
    *,
    contract_drift: bool = False,
    release_rule: bool = False,
) -> Triage:
    value, reason = score_pair(row.required_claim_ids, row.supported_claim_ids)
    outcome = Outcome(value=value, reason=reason)
    decision = decide(
        outcome,
        policy,
        policy_group=row.policy_group,
        blocking=row.blocking,
        contract_version=row.contract_version,
    )
    return triage(row, decision, contract_drift=contract_drift, release_rule=release_rule)


def found(claim: str, name: FindingName, *documents: str, **extra: Any) -> Finding:
    return Finding(
        claim_id=claim, finding=name, owner=OWNER_OF[name], document_ids=list(documents), **extra
    )


def cite(claim: str, document: str, start: int = 24, end: int = 42) -> dict[str, Any]:
    return {"claim_id": claim, "document_id": document, "answer_span": [start, end]}


BASE_CITATIONS = message().model_dump()["citations"]


# --- the missing claim's finding: the first of four steps that applies ----------------------

CASES: dict[str, tuple[dict[str, Any], Finding]] = {
    "cited to a document that was not retrieved (a parser renamed IDs)": (
        {"citations": [*BASE_CITATIONS, cite("refund-method", "kb-9")]},
        found("refund-method", "cited_document_not_retrieved", "kb-9"),
    ),
    "cited with a span past the answer's end": (
        {"citations": [*BASE_CITATIONS, cite("refund-method", "kb-1", 40, 57)]},
        found("refund-method", "cited_span_invalid", "kb-1"),
    ),
    "cited with a reversed span": (
        {"citations": [*BASE_CITATIONS, cite("refund-method", "kb-1", 30, 24)]},
        found("refund-method", "cited_span_invalid", "kb-1"),
    ),
    "cited with an empty span": (
        {"citations": [*BASE_CITATIONS, cite("refund-method", "kb-1", 24, 24)]},
        found("refund-method", "cited_span_invalid", "kb-1"),
    ),
    "cited with a negative span": (
        {"citations": [*BASE_CITATIONS, cite("refund-method", "kb-1", -1, 5)]},
        found("refund-method", "cited_span_invalid", "kb-1"),
    ),
    "cited to a retrieved document with a valid span, yet unsupported": (
        {"citations": [*BASE_CITATIONS, cite("refund-method", "kb-1")]},
        found("refund-method", "cited_not_supported", "kb-1"),
    ),
    "no citations at all": (
        {"citations": []},
        found("refund-method", "attribution_artifact_missing"),
    ),
    "expected evidence that was not retrieved": (
        {"expected_evidence": {"refund-method": ["kb-7", "kb-8"]}},
        found("refund-method", "evidence_not_retrieved", "kb-7", "kb-8"),
    ),
    "expected evidence retrieved, not used by the answer": (
        {"expected_evidence": {"refund-method": ["kb-7", "kb-1"]}},
        found("refund-method", "not_cited", "kb-1", evidence_retrieved=True),
    ),
    "no expected evidence declared": (
        {},
        found("refund-method", "not_cited", evidence_retrieved=None),
    ),
    # Step 1 before step 3: a citation decides even when the expected document was not retrieved.
    "a citation outranks the expected evidence": (
        {
            "citations": [*BASE_CITATIONS, cite("refund-method", "kb-1")],
            "expected_evidence": {"refund-method": ["kb-7"]},
        },
        found("refund-method", "cited_not_supported", "kb-1"),
    ),
    # Step 2 before step 3: without the artifact, retrieval cannot be blamed.
    "no citations outranks the expected evidence": (
        {"citations": [], "expected_evidence": {"refund-method": ["kb-7"]}},
        found("refund-method", "attribution_artifact_missing"),
    ),
}


@pytest.mark.parametrize(("fields", "expected"), CASES.values(), ids=CASES.keys())
def test_a_missing_claim_gets_the_first_finding_that_applies(
    fields: dict[str, Any], expected: Finding
) -> None:
    result = triaged(message(**fields))

    assert result.missing_claim_ids == ["refund-method"]
    assert result.findings[0] == expected
    assert result.owner == expected.owner  # 2/3 fails a 0.9 threshold


@pytest.mark.parametrize(
    ("citations", "document"),
    [
        # retrieved with a valid span wins over anything before it
        ([cite("refund-method", "kb-9"), cite("refund-method", "kb-2", 50, 40),
          cite("refund-method", "kb-2")], "kb-2"),
        # else a valid span, even to a document not retrieved
        ([cite("refund-method", "kb-1", 9, 3), cite("refund-method", "kb-9")], "kb-9"),
        # else the first
        ([cite("refund-method", "kb-9", 9, 3), cite("refund-method", "kb-1", 9, 3)], "kb-9"),
    ],
)  # fmt: skip
def test_of_several_citations_of_a_claim_the_best_decides(
    citations: list[dict[str, Any]], document: str
) -> None:
    result = triaged(message(citations=[*BASE_CITATIONS, *citations]))

    assert result.findings[0].document_ids == [document]


def test_ids_are_compared_after_stripping_and_kept_verbatim_otherwise() -> None:
    """Surrounding whitespace does not hide a citation or an expected-evidence key; commas
    and semicolons inside IDs stay intact in missing_claim_ids (the reason's list cannot)."""
    row = message(
        required_claim_ids=[" a,b ", "c;d", "refund-window"],
        supported_claim_ids=["refund-window"],
        citations=[cite("refund-window", "kb-1", 0, 5), cite("  a,b", "kb-9")],
        expected_evidence={"c;d ": ["kb-2"]},
    )

    result = triaged(row)

    assert result.missing_claim_ids == ["a,b", "c;d"]
    assert result.findings == [
        found("a,b", "cited_document_not_retrieved", "kb-9"),
        found("c;d", "not_cited", "kb-2", evidence_retrieved=True),
    ]


def test_stray_citations_and_uncited_supported_claims_come_after_the_missing() -> None:
    row = message(
        supported_claim_ids=["refund-window", "support-channel"],
        citations=[
            cite("retired-claim", "kb-1"),
            cite("refund-window", "kb-1", 0, 23),
            cite("other", "kb-2"),
        ],
    )

    result = triaged(row)

    assert result.findings == [
        found("refund-method", "not_cited", evidence_retrieved=None),
        found("retired-claim", "citation_unknown_claim", "kb-1"),
        found("other", "citation_unknown_claim", "kb-2"),
        found("support-channel", "supported_without_citation"),
    ]


def test_without_citations_no_supported_claim_is_reported_uncited() -> None:
    result = triaged(message(citations=[]))

    assert [f.finding for f in result.findings] == ["attribution_artifact_missing"]


# --- the row's owner -----------------------------------------------------------------------


def test_a_failing_row_goes_to_attribution_before_retrieval_before_product() -> None:
    required = ["a", "b", "c", "d"]
    product_only = message(
        required_claim_ids=required, supported_claim_ids=["a"], citations=[cite("a", "kb-1", 0, 5)]
    )
    retrieval = message(
        required_claim_ids=required,
        supported_claim_ids=["a"],
        citations=[cite("a", "kb-1", 0, 5)],
        expected_evidence={"b": ["kb-7"]},
    )
    attribution = message(
        required_claim_ids=required,
        supported_claim_ids=["a"],
        citations=[cite("a", "kb-1", 0, 5), cite("d", "kb-9")],
        expected_evidence={"b": ["kb-7"]},
    )  # fmt: skip

    assert [triaged(row).owner for row in (product_only, retrieval, attribution)] == [
        "product",
        "retrieval",
        "attribution",
    ]
    assert [f.finding for f in triaged(attribution).findings] == [
        "evidence_not_retrieved",
        "not_cited",
        "cited_document_not_retrieved",
    ]


def test_a_stray_citation_alone_makes_a_failing_row_attribution_s() -> None:
    row = message(citations=[*BASE_CITATIONS, cite("retired-claim", "kb-1")])

    assert triaged(row).owner == "attribution"


@pytest.mark.parametrize("policy", [policy_from_threshold("0.5", name="t", origin="t"), None])
def test_passing_and_report_only_rows_have_no_owner_but_keep_their_findings(
    policy: Policy | None,
) -> None:
    result = triaged(message(), policy)

    assert result.owner is None
    assert result.missing_claim_ids == ["refund-method"]
    assert result.findings == [found("refund-method", "not_cited", evidence_retrieved=None)]


def test_a_complete_row_has_nothing_missing() -> None:
    row = message(
        supported_claim_ids=REQUIRED,
        citations=[*BASE_CITATIONS, cite("refund-method", "kb-1")],
    )

    result = triaged(row)

    assert (result.missing_claim_ids, result.findings, result.owner) == ([], [], None)


def test_an_invalid_row_is_evaluation_data_s_with_no_findings() -> None:
    row = message(supported_claim_ids=["old-c1"])

    assert triaged(row) == Triage(missing_claim_ids=None, findings=[], owner="evaluation-data")


def test_a_valid_value_in_a_policy_group_not_defined_is_an_invalid_row() -> None:
    """decide() makes such a row invalid: triage follows the decision, not the value."""
    row = message(policy_group="no-such-group", citations=[cite("refund-method", "kb-9")])

    assert triaged(row) == Triage(missing_claim_ids=None, findings=[], owner="evaluation-data")


@pytest.mark.parametrize(
    ("flags", "owner"),
    [
        ({"contract_drift": True}, "evaluation-data"),
        ({"release_rule": True}, "release-rule"),
        ({"contract_drift": True, "release_rule": True}, "evaluation-data"),
    ],
)
def test_contract_drift_and_the_release_rule_win_over_the_findings(
    flags: dict[str, bool], owner: str
) -> None:
    row = message(citations=[*BASE_CITATIONS, cite("refund-method", "kb-9")])

    result = triaged(row, POLICY, **flags)

    assert result.owner == owner
    assert result.findings[0].finding == "cited_document_not_retrieved"  # kept


def test_triage_reads_the_decision_not_the_threshold() -> None:
    """A valid row that passes has no owner whatever its findings say."""
    decision = Decision(
        status="pass",
        value=2 / 3,
        reason="r",
        contract_version="c",
        policy_group="default",
        policy_version="v",
        threshold=0.5,
        blocking=True,
        owner=None,
    )
    row = message(citations=[])

    assert triage(row, decision).owner is None


# --- expected_evidence on the message (SPEC §9, Inputs) --------------------------------------


def test_expected_evidence_is_hashed_only_when_given() -> None:
    plain = message()
    empty = message(expected_evidence={})
    given = message(expected_evidence={"refund-method": ["kb-7"]})
    other = message(expected_evidence={"refund-method": ["kb-8"]})

    assert input_hash(plain) == input_hash(empty)
    assert len({input_hash(plain), input_hash(given), input_hash(other)}) == 3


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"nope": ["kb-1"], "zz": []}, "expected_evidence names unknown claim IDs: nope,zz"),
        ({"Refund-Method": ["kb-1"]}, "expected_evidence names unknown claim IDs: Refund-Method"),
        ({"refund-method": "kb-1"}, "Input should be a valid list"),
        ({"refund-method": [1]}, "Input should be a valid string"),
        (["refund-method"], "Input should be a valid dictionary"),
    ],
)
def test_expected_evidence_that_is_not_reviewed_claims_to_documents_is_refused(
    value: Any, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        message(expected_evidence=value)


@pytest.mark.parametrize(
    ("evidence", "reason"),
    [
        (
            {"refund-method": ["kb-\ud800"]},
            "expected_evidence contains a lone surrogate: IDs must be valid Unicode",
        ),
        (
            {"refund-method\ud800": ["kb-1"]},
            "schema: message: expected_evidence names unknown claim IDs: refund-method\\ud800",
        ),
    ],
)
def test_a_lone_surrogate_in_expected_evidence_is_a_rejection_not_a_crash(
    evidence: dict[str, list[str]], reason: str
) -> None:
    """A decoded body (kombu's JSON) can hold one; the hash and the stores cannot."""
    with pytest.raises(InputError) as raised:
        admit({**BASE_MESSAGE, "expected_evidence": evidence}, max_bytes=1_000_000)

    assert str(raised.value) == reason
