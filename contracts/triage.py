"""Triage (SPEC §9): from a row's number to the artifact to open and the team that owns it.

Pure and deterministic: the message's contexts, citations and `expected_evidence` and the
policy's decision on its outcome in; the missing claim IDs, one finding per missing claim
(and one per stray citation or uncited supported claim), and the row's owner out. The metric
is not involved: triage explains its number, it never changes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from contracts.messages import AttributionResult, Citation
from contracts.outcomes import Decision, Owner
from contracts.trusted import trusted

FindingName = Literal[
    "cited_document_not_retrieved",
    "cited_span_invalid",
    "cited_not_supported",
    "attribution_artifact_missing",
    "evidence_not_retrieved",
    "not_cited",
    "citation_unknown_claim",
    "supported_without_citation",
]
FindingOwner = Literal["attribution", "retrieval", "product"]

OWNER_OF: Final[dict[FindingName, FindingOwner]] = {
    "cited_document_not_retrieved": "attribution",
    "cited_span_invalid": "attribution",
    "cited_not_supported": "attribution",
    "attribution_artifact_missing": "attribution",
    "evidence_not_retrieved": "retrieval",
    "not_cited": "product",
    "citation_unknown_claim": "attribution",
    "supported_without_citation": "attribution",
}
# A failed row goes to the first of these its findings name: the attribution artifact is
# checked before retrieval, retrieval before the answer.
OWNER_PRECEDENCE: Final[tuple[FindingOwner, ...]] = ("attribution", "retrieval", "product")


class Finding(BaseModel):
    """What triage found for one claim: the finding, its owner, the documents it is about.

    `evidence_retrieved` is set by `not_cited` alone: True when an expected document was
    retrieved, None when the reviewed data declares none for the claim.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    claim_id: str
    finding: FindingName
    owner: FindingOwner
    document_ids: list[str]
    evidence_retrieved: bool | None = None


class Triage(NamedTuple):
    """A row's triage: `missing_claim_ids` is None for an invalid row, whose findings are [].

    A tuple, not a model: it only carries triage()'s result to the record and the attempt,
    once per message, and a model's validation cost more than the tuple's whole life."""

    missing_claim_ids: list[str] | None
    findings: list[Finding]
    owner: Owner | None


def triage(
    message: AttributionResult,
    decision: Decision,
    *,
    contract_drift: bool = False,
    release_rule: bool = False,
) -> Triage:
    """SPEC §9 for one row.

    `contract_drift`: the store saw another required set for this (contract version, case ID);
    `release_rule`: the row fails now and passed under the baseline policy with the same
    value. Either makes the owner of a valid row `evaluation-data` or `release-rule`, drift
    first (when the required set itself moved, comparing two rules over it says nothing).
    """
    if decision.status == "invalid":  # the metric's rules, or a policy group not defined
        return Triage(missing_claim_ids=None, findings=[], owner="evaluation-data")
    missing, findings = _findings(message)
    return Triage(
        missing_claim_ids=missing,
        findings=findings,
        owner=row_owner(
            decision, findings, contract_drift=contract_drift, release_rule=release_rule
        ),
    )


def release_row_triage(
    required_claim_ids: Sequence[str],
    supported_claim_ids: Sequence[str],
    decision: Decision,
    *,
    contract_drift: bool = False,
    release_rule: bool = False,
) -> Triage:
    """A ReleaseRow's triage: it carries no contexts or citations, so no findings, and a row
    that fails for its claims is the product's (precedence as in triage())."""
    if decision.status == "invalid":
        return Triage(missing_claim_ids=None, findings=[], owner="evaluation-data")
    return Triage(
        missing_claim_ids=sorted(_claims(required_claim_ids) - _claims(supported_claim_ids)),
        findings=[],
        owner=row_owner(decision, [], contract_drift=contract_drift, release_rule=release_rule),
    )


def _claims(claim_ids: Iterable[str]) -> set[str]:
    return set(map(str.strip, claim_ids))


def _findings(message: AttributionResult) -> tuple[list[str], list[Finding]]:
    """findings_of() a message's parts: its contexts' document IDs are read only when a claim
    is missing."""
    return findings_of(
        message.required_claim_ids,
        message.supported_claim_ids,
        message.citations,
        retrieved_document_ids=(context.document_id for context in message.contexts),
        expected_evidence=message.expected_evidence,
        answer_length=len(message.answer),
    )


def findings_of(
    required_claim_ids: Sequence[str],
    supported_claim_ids: Sequence[str],
    citations: Sequence[Citation],
    *,
    retrieved_document_ids: Iterable[str],
    expected_evidence: Mapping[str, Sequence[str]],
    answer_length: int,
) -> tuple[list[str], list[Finding]]:
    """The missing claim IDs (sorted) and the findings of a valid row: the missing claims' in
    that order, then each citation of an unknown claim in citation order, then each uncited
    supported claim in sorted order. Each citation's claim ID is stripped once: this runs on
    every message. Its parts are what a stored attempt keeps, so a store derives an attempt's
    findings on read rather than keeping them (worker/stores/codec.py)."""
    strip = str.strip
    required = _claims(required_claim_ids)
    supported = _claims(supported_claim_ids)
    missing = sorted(required - supported)
    if not citations:
        return missing, [_finding(claim, "attribution_artifact_missing", []) for claim in missing]
    cited: dict[str, list[Citation]] = {}
    unknown = []
    for citation in citations:
        claim = strip(citation.claim_id)
        cited.setdefault(claim, []).append(citation)
        if claim not in required:
            unknown.append(_finding(claim, "citation_unknown_claim", [citation.document_id]))
    findings = []
    if missing:
        retrieved = set(retrieved_document_ids)
        expected = {
            strip(claim): _unique(documents) for claim, documents in expected_evidence.items()
        }
        findings = [
            _missing(claim, cited.get(claim), retrieved, expected.get(claim, []), answer_length)
            for claim in missing
        ]
    findings += unknown
    findings += [
        _finding(claim, "supported_without_citation", [])
        for claim in sorted(supported - cited.keys())
    ]
    return missing, findings


def _missing(
    claim: str,
    citations: Sequence[Citation] | None,
    retrieved: set[str],
    expected: list[str],
    answer_length: int,
) -> Finding:
    """The first of SPEC §9's four steps that applies to one missing claim of a message with
    citations (one without any is attribution_artifact_missing throughout)."""
    if citations:
        best = _best(citations, retrieved, answer_length)
        if best.document_id not in retrieved:
            name: FindingName = "cited_document_not_retrieved"
        elif not _valid_span(best, answer_length):
            name = "cited_span_invalid"
        else:
            name = "cited_not_supported"
        return _finding(claim, name, [best.document_id])
    found = [document for document in expected if document in retrieved]
    if expected and not found:
        return _finding(claim, "evidence_not_retrieved", expected)
    return trusted(
        Finding,
        {
            "claim_id": claim,
            "finding": "not_cited",
            "owner": OWNER_OF["not_cited"],
            "document_ids": found,
            "evidence_retrieved": True if found else None,
        },
    )


def _best(citations: Sequence[Citation], retrieved: set[str], answer_length: int) -> Citation:
    """A retrieved document with a valid span, else a valid span, else the first citation."""
    for citation in citations:
        if citation.document_id in retrieved and _valid_span(citation, answer_length):
            return citation
    for citation in citations:
        if _valid_span(citation, answer_length):
            return citation
    return citations[0]


def _valid_span(citation: Citation, answer_length: int) -> bool:
    start, end = citation.answer_span
    return 0 <= start < end <= answer_length


def _finding(claim: str, name: FindingName, document_ids: list[str]) -> Finding:
    """A finding from triage's own values (a claim ID of the message's, a document ID list
    made for this finding alone), built without validating them again (contracts.trusted):
    several per message."""
    return trusted(
        Finding,
        {
            "claim_id": claim,
            "finding": name,
            "owner": OWNER_OF[name],
            "document_ids": document_ids,
            "evidence_retrieved": None,
        },
    )


def findings_json(findings: list[Finding]) -> list[dict[str, Any]]:
    """Findings as JSON values (a log line, a gate row): each one's field values, which are
    JSON values already (text, a list of text, a bool or None), in its field order, copied;
    what model_dump(mode="json") gives, without its walk: every scored line carries them."""
    return [dict(finding.__dict__) for finding in findings]


def row_owner(
    decision: Decision, findings: Iterable[Finding], *, contract_drift: bool, release_rule: bool
) -> Owner | None:
    """The owner of a row with these findings (SPEC §9's precedence); see triage()."""
    if decision.status == "invalid":
        return "evaluation-data"
    if contract_drift:
        return "evaluation-data"
    if release_rule or decision.status == "review":  # review: the rule's band (SPEC §12)
        return "release-rule"
    if decision.status != "fail":
        return None  # passed, or report-only: the findings stay, nobody is paged
    named = {finding.owner for finding in findings}
    return next((owner for owner in OWNER_PRECEDENCE if owner in named), "product")


# Where a `review` row sends its reader (SPEC §12): the rows around the threshold, decided by
# people, are what settles it; the findings still say what is missing.
REVIEW_NEXT_ARTIFACT: Final = "the calibration sheet (`evidence-worker calibrate`)"


def review_note(decision: Decision) -> str | None:
    """Why a `review` row is one, in the words `explain` and `gate` print; None for any other
    status. The metric's reason stays as it is: this is the rule's word, not the metric's."""
    if decision.status != "review" or decision.value is None:
        return None
    return (
        f"review: value {_number(decision.value)} is below threshold"
        f" {_number(decision.threshold)} by less than review_band"
        f" {_number(decision.review_band)} (policy {decision.policy_version}, group"
        f" {decision.policy_group}): a person decides; open {REVIEW_NEXT_ARTIFACT}"
    )


def _number(value: float | None) -> str:
    return "none" if value is None else repr(round(value, 4))


def _unique(documents: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(documents))
