"""`explain`'s text (SPEC §9, looking a row up): a History and a policy in, plain text out."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import RAGAS_VERSION, Attempt, Policy, parse_policy, policy_from_threshold
from contracts.triage import Finding
from tests import factories
from worker.audit.explain import NEXT_ARTIFACT, explain
from worker.stores import History

HASH = "9f" * 32
POLICY = parse_policy(
    'version = "2026-12-01"\n[groups.default]\nmin_coverage = 0.85\n'
    "[groups.disclosure]\nrequire_all = true\n"
)
RETRIEVED = ["kb-1", "kb-2"]
HEAD = f"""\
case: refund-001
input hash: {HASH}
contract version: support-faq/2026-10
metric version: evidence_coverage/1 (Ragas {RAGAS_VERSION}, worker 0.1.0)
"""
TWO_THIRDS = """\
value: 0.6667
reason: supported=2; required=3; missing=refund-method
"""
FAILS = "status: fail under policy 2026-12-01, group default, threshold 0.85\n"


def finding(claim: str, name: Any, documents: list[str], **fields: Any) -> Finding:
    return Finding(
        claim_id=claim,
        finding=name,
        owner="product"
        if name == "not_cited"
        else "retrieval"
        if name == "evidence_not_retrieved"
        else "attribution",
        document_ids=documents,
        **fields,
    )


def triaged(*findings: Finding, **fields: Any) -> Attempt:
    """The base attempt (refund-method missing) as the worker records it now."""
    values: dict[str, Any] = {
        "contract_version": "support-faq/2026-10",
        "worker_version": "0.1.0",
        "citations": [],
        "missing_claim_ids": ["refund-method"],
        "findings": list(findings),
        "retrieved_document_ids": RETRIEVED,
        "policy_group": "default",
        **fields,
    }
    return factories.attempt(**values)


def history(first: Attempt, *later: Attempt, total: int | None = None) -> History:
    attempts = [first, *later]
    return History(
        input_hash=HASH,
        first=first,
        attempts=attempts,
        total_attempts=len(attempts) if total is None else total,
    )


def test_a_join_failure_names_the_cited_and_the_retrieved_documents() -> None:
    """SPEC §9's example, whole: the trail from the number to the citation join."""
    first = triaged(finding("refund-method", "cited_document_not_retrieved", ["kb-9"]))

    assert explain(history(first), POLICY) == (
        HEAD + TWO_THIRDS + FAILS + "owner: attribution\n"
        "missing claims: 1\n"
        "  refund-method: cited to kb-9, which was not retrieved (retrieved: kb-1, kb-2):"
        " check the citation join\n"
        "attempts: 1 recorded\n"
    )


@pytest.mark.parametrize(
    ("found", "line"),
    [
        pytest.param(
            finding("refund-method", "cited_document_not_retrieved", ["kb-9"]),
            "refund-method: cited to kb-9, which was not retrieved (retrieved: kb-1, kb-2):"
            " check the citation join",
            id="cited_document_not_retrieved",
        ),
        pytest.param(
            finding("refund-method", "cited_span_invalid", ["kb-2"]),
            "refund-method: cited to kb-2 with span [40, 12], outside the answer:"
            " check the citation spans in the attribution job output",
            id="cited_span_invalid",
        ),
        pytest.param(
            finding("refund-method", "cited_not_supported", ["kb-2"]),
            "refund-method: cited to kb-2, which was retrieved, yet the claim is not supported:"
            " check the support mapper",
            id="cited_not_supported",
        ),
        pytest.param(
            finding("refund-method", "attribution_artifact_missing", []),
            "refund-method: the message carries no citations, so a dropped claim ID looks like"
            " a missing one: open the attribution job output",
            id="attribution_artifact_missing",
        ),
        pytest.param(
            finding("refund-method", "evidence_not_retrieved", ["kb-4", "kb-5"]),
            "refund-method: its expected evidence (kb-4, kb-5) was not retrieved"
            " (retrieved: kb-1, kb-2): check the retriever index for kb-4, kb-5",
            id="evidence_not_retrieved",
        ),
        pytest.param(
            finding("refund-method", "not_cited", ["kb-2"], evidence_retrieved=True),
            "refund-method: its expected evidence (kb-2) was retrieved, yet the answer does not"
            " cite it: check the answer (prompt, generation)",
            id="not_cited-evidence-retrieved",
        ),
        pytest.param(
            finding("refund-method", "not_cited", []),
            "refund-method: not cited, and no expected evidence is declared for it:"
            " check the answer (prompt, generation)",
            id="not_cited-nothing-declared",
        ),
    ],
)
def test_each_missing_claims_finding_names_the_next_artifact(found: Finding, line: str) -> None:
    citations = [{"claim_id": "refund-method", "document_id": "kb-2", "answer_span": [40, 12]}]
    first = triaged(found, citations=citations)

    text = explain(history(first), POLICY)

    assert text.splitlines()[8:10] == ["missing claims: 1", f"  {line}"]


def test_findings_about_other_claims_are_listed_apart() -> None:
    """A stray citation and an uncited supported claim: they never change the status."""
    first = triaged(
        finding("refund-speed", "citation_unknown_claim", ["kb-1"]),
        finding("support-channel", "supported_without_citation", []),
        supported_claim_ids=["refund-window", "refund-method", "support-channel"],
        value=1.0,
        reason="supported=3; required=3; missing=none",
        missing_claim_ids=[],
    )

    assert explain(history(first), POLICY) == (
        HEAD + "value: 1.0\n"
        "reason: supported=3; required=3; missing=none\n"
        "status: pass under policy 2026-12-01, group default, threshold 0.85\n"
        "owner: none (the row passes)\n"
        "missing claims: none\n"
        "other findings: 2\n"
        "  refund-speed: cited to kb-1, yet it is not one of the required claims:"
        " check the contract's required claim list\n"
        "  support-channel: supported, yet no citation names it:"
        " check the attribution job output\n"
        "attempts: 1 recorded\n"
    )


def test_every_finding_has_a_next_artifact() -> None:
    assert sorted(NEXT_ARTIFACT) == sorted(
        [
            "cited_document_not_retrieved",
            "cited_span_invalid",
            "cited_not_supported",
            "attribution_artifact_missing",
            "evidence_not_retrieved",
            "not_cited",
            "citation_unknown_claim",
            "supported_without_citation",
        ]
    )


def test_an_invalid_row_says_invalid_its_reason_and_evaluation_data() -> None:
    reason = (
        "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: old-c1"
    )
    first = triaged(value=None, reason=reason, missing_claim_ids=None, findings=[])

    assert explain(history(first), POLICY) == (
        HEAD + "value: none (invalid)\n"
        f"reason: {reason}\n"
        "status: invalid\n"
        "owner: evaluation-data (an invalid row: fix the row's claim lists or its group)\n"
        "findings: none (an invalid row is not triaged)\n"
        "attempts: 1 recorded\n"
    )


def test_a_group_the_policy_lacks_makes_the_row_invalid_under_it() -> None:
    first = triaged(finding("refund-method", "not_cited", []), policy_group="fees")

    lines = explain(history(first), POLICY).splitlines()

    assert lines[6:9] == [
        "status: invalid under policy 2026-12-01: policy_group 'fees' is not defined in policy"
        " 2026-12-01 (groups: default,disclosure)",
        "owner: evaluation-data (an invalid row: fix the row's claim lists or its group)",
        "findings: none (an invalid row is not triaged)",
    ]


def test_a_require_all_group_says_so() -> None:
    first = triaged(finding("refund-method", "not_cited", []), policy_group="disclosure")

    lines = explain(history(first), POLICY).splitlines()

    assert lines[6:8] == [
        "status: fail under policy 2026-12-01, group disclosure, require_all",
        "owner: product",
    ]


def test_contract_drift_makes_the_row_evaluation_datas() -> None:
    first = triaged(
        finding("refund-method", "cited_document_not_retrieved", ["kb-9"]),
        contract_drift=True,
        owner="evaluation-data",
    )

    lines = explain(history(first), POLICY).splitlines()

    assert lines[6:8] == [
        FAILS.strip(),
        "owner: evaluation-data (contract drift: case refund-001 had another required set"
        " under contract version support-faq/2026-10; see evidence-worker alerts"
        " --kind contract_drift)",
    ]


def test_without_a_policy_the_row_is_not_decided() -> None:
    """Report-only: no status, and the owner the worker recorded under its own policy."""
    first = triaged(finding("refund-method", "not_cited", []), owner="product")

    lines = explain(history(first), None).splitlines()

    assert lines[6:8] == [
        "status: not decided: pass --policy/--min-coverage",
        "owner: none until decided; the worker recorded owner product",
    ]


def test_a_threshold_policy_is_named_by_its_version() -> None:
    first = triaged(finding("refund-method", "not_cited", []))

    lines = explain(history(first), policy_from_threshold("0.5", origin="cli")).splitlines()

    assert lines[6:8] == [
        "status: pass under policy cli:0.5, group default, threshold 0.5",
        "owner: none (the row passes)",
    ]


def test_an_attempt_recorded_before_triage_says_what_it_does_not_keep() -> None:
    """An attempt of a store written before triage: no contract version, citations,
    findings, retrieved documents or policy group."""
    first = factories.attempt(worker_version="0.1.0")

    assert explain(history(first), POLICY) == (
        "case: refund-001\n"
        f"input hash: {HASH}\n"
        "contract version: not kept by this store\n"
        f"metric version: evidence_coverage/1 (Ragas {RAGAS_VERSION}, worker 0.1.0)\n"
        + TWO_THIRDS
        + "status: fail under policy 2026-12-01, group default, threshold 0.85"
        " (no group kept by this attempt: default assumed)\n"
        "owner: not known: recorded before findings were kept (score the message again)\n"
        "missing claims: refund-method (no findings kept by this store: recorded before"
        " triage)\n"
        "attempts: 1 recorded\n"
    )


def test_retrieved_documents_not_kept_are_said_so() -> None:
    """Attempts kept findings before they kept the retrieved documents."""
    first = triaged(
        finding("refund-method", "cited_document_not_retrieved", ["kb-9"]),
        retrieved_document_ids=None,
    )

    assert explain(history(first), POLICY).splitlines()[9] == (
        "  refund-method: cited to kb-9, which was not retrieved (retrieved: not kept by this"
        " store): check the citation join"
    )


def test_attempts_that_disagree_and_other_cases_are_named() -> None:
    first = triaged(finding("refund-method", "not_cited", []))
    hit = first.model_copy(update={"case_id": "refund-001-retry"})
    other = first.model_copy(update={"value": 1 / 3, "reason": "other"})

    lines = explain(history(first, hit, other, total=5), POLICY).splitlines()

    assert lines[0] == "case: refund-001 (also recorded for: refund-001-retry)"
    assert lines[-1] == (
        "attempts: 5 recorded, the newest 3 kept; 1 gave another outcome, the first stands"
        " (nondeterminism: evidence-worker alerts --kind nondeterminism)"
    )


def test_looked_up_by_case_it_says_how_to_see_the_older_hashes() -> None:
    first = triaged(finding("refund-method", "not_cited", []))
    again = first.model_copy(update={"task_id": "task-2"})

    text = explain(history(first, again), POLICY, case_id="refund-001", older=2)

    assert text.splitlines()[-2:] == [
        "attempts: 2 recorded; all kept gave this outcome",
        "case refund-001 has 2 older input hashes:"
        " evidence-worker show --case refund-001 lists them all",
    ]


def test_the_explanation_takes_no_policy_from_anywhere_else() -> None:
    """Pure: the same history and policy give the same text."""
    first = triaged(finding("refund-method", "not_cited", []))
    policy = Policy.model_validate(POLICY.model_dump())

    assert explain(history(first), policy) == explain(history(first), POLICY)
