"""Models built without validation (contracts.trusted) are the models validation builds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from contracts import AttributionResult, Decision, Outcome, Policy, judging
from contracts.policy import PolicyGroup, decide
from contracts.triage import Finding, triage
from contracts.trusted import trusted
from worker.bench.drain import sample_messages

POLICIES = [
    None,
    Policy(version="v1", groups={"default": PolicyGroup(min_coverage=0.75)}),
    Policy(version="v2", groups={"other": PolicyGroup(require_all=True)}),
]


def same_as_validated(instance: BaseModel) -> None:
    """The instance is what validating its own field values builds: equal, the same fields in
    the model's order, the same JSON, the same fields set."""
    model = type(instance)
    validated = model.model_validate(dict(instance.__dict__))
    assert instance == validated
    assert list(instance.__dict__) == list(model.model_fields)
    assert instance.model_dump_json() == validated.model_dump_json()
    assert instance.model_fields_set == set(model.model_fields)


def valid_messages() -> list[AttributionResult]:
    messages = []
    for body in sample_messages(400):
        try:
            messages.append(AttributionResult.model_validate(body))
        except ValidationError:
            continue
    return messages


def test_trusted_keeps_the_fields_as_given() -> None:
    """The instance holds the dict it is given, reads, dumps, copies and hashes as a model."""
    fields: dict[str, Any] = {"value": 0.5, "reason": "supported=1; required=2; missing=b"}

    outcome = trusted(Outcome, fields)

    assert outcome.__dict__ is fields
    assert outcome == Outcome(value=0.5, reason="supported=1; required=2; missing=b")
    assert outcome.model_dump() == {"value": 0.5, "reason": "supported=1; required=2; missing=b"}
    assert outcome.model_copy(update={"value": 1.0}).value == 1.0
    assert hash(outcome) == hash(Outcome(value=0.5, reason=outcome.reason))


def test_a_trusted_instance_stays_frozen() -> None:
    """Frozen models refuse assignment whichever way they were built."""
    outcome = trusted(Outcome, {"value": None, "reason": "required_claim_ids must not be empty"})

    with pytest.raises(ValidationError, match="frozen"):
        outcome.value = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("policy", POLICIES, ids=["report-only", "min-0.75", "no-such-group"])
def test_outcomes_decisions_and_findings_are_what_validation_builds(policy: Policy | None) -> None:
    """Over the bench's messages: judge()'s outcome, decision and findings."""
    statuses = set()
    for message in valid_messages():
        outcome, decision, found, _ = judging.judge(message, policy)
        for instance in (outcome, decision, *found.findings):
            same_as_validated(instance)
        statuses.add(decision.status)
    assert (
        statuses
        == {
            None: {"scored", "invalid"},
            "v1": {"pass", "fail", "invalid"},
            "v2": {"invalid"},
        }[policy.version if policy else None]
    )


@pytest.mark.parametrize(
    ("value", "policy", "expected"),
    [
        (0.5, POLICIES[1], ("fail", 0.75, "product")),
        (0.75, POLICIES[1], ("pass", 0.75, None)),
        (None, POLICIES[1], ("invalid", None, "evaluation-data")),
        (0.5, None, ("scored", None, None)),
        (1.0, POLICIES[2], ("invalid", None, "evaluation-data")),
    ],
)
def test_decide_sets_status_threshold_and_owner(
    value: float | None, policy: Policy | None, expected: tuple[Any, ...]
) -> None:
    """Each branch of decide() builds the decision validation would."""
    decision = decide(
        Outcome(value=value, reason="r"),
        policy,
        policy_group="default",
        blocking=False,
        contract_version="c/1",
    )

    same_as_validated(decision)
    assert isinstance(decision, Decision)
    assert (decision.status, decision.threshold, decision.owner) == expected


def test_findings_of_every_kind_are_what_validation_builds() -> None:
    """not_cited with and without retrieved evidence, evidence_not_retrieved, and the rest."""
    message = AttributionResult.model_validate(
        {
            "schema_version": 1,
            "case_id": "c-1",
            "contract_version": "faq/1",
            "required_claim_ids": ["a", "b", "c", "d"],
            "supported_claim_ids": ["d"],
            "answer": "0123456789",
            "contexts": [{"document_id": "doc-1", "text": "t"}],
            "citations": [{"claim_id": "a", "document_id": "doc-1", "answer_span": [0, 99]}],
            "expected_evidence": {"b": ["doc-1"], "c": ["doc-9"]},
            "grader": {"name": "g", "version": "1", "model": "m", "prompt": "p", "params": {}},
        }
    )

    found = triage(message, judging.judge(message, None).decision)

    assert [(f.claim_id, f.finding, f.evidence_retrieved) for f in found.findings] == [
        ("a", "cited_span_invalid", None),
        ("b", "not_cited", True),
        ("c", "evidence_not_retrieved", None),
        ("d", "supported_without_citation", None),
    ]
    for finding in found.findings:
        assert type(finding) is Finding
        same_as_validated(finding)
