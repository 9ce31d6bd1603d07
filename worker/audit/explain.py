"""`explain`'s text (SPEC §9, looking a row up): one hash's first outcome, for a person.

Pure: the History a store keeps and the policy to decide under in, plain text out. It reads
what triage found when the attempt was recorded (contracts/triage.py) and says, per finding,
which artifact to open next; it never triages again (the answer and contexts are not kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from contracts import Attempt, Decision, Policy
from contracts.drift import Drift
from contracts.judging import Judgement, judge_kept
from contracts.record_models import KeptCitation
from contracts.triage import Finding, FindingName, review_note
from worker.stores.contract import History, classify

NOT_KEPT: Final = "not kept by this store"
NOT_DECIDED: Final = "not decided: pass --policy/--min-coverage"
# The artifact each finding sends a reader to, in the words of the line that names it.
NEXT_ARTIFACT: Final[dict[FindingName, str]] = {
    "cited_document_not_retrieved": "check the citation join",
    "cited_span_invalid": "check the citation spans in the attribution job output",
    "cited_not_supported": "check the support mapper",
    "attribution_artifact_missing": "open the attribution job output",
    "evidence_not_retrieved": "check the retriever index for the expected documents",
    "not_cited": "check the answer (prompt, generation)",
    "citation_unknown_claim": "check the contract's required claim list",
    "supported_without_citation": "check the attribution job output",
}


def judgement_of(
    first: Attempt, policy: Policy | None, baseline: Policy | None = None
) -> Judgement | None:
    """The first attempt judged under `policy`, and under `baseline` too when given
    (contracts.judging.judge_kept: the release rule as `gate` decides it); None without a
    policy: `explain` says the row is not decided."""
    return None if policy is None else judge_kept(first, policy, baseline=baseline)


def conflicting(history: History) -> int:
    """How many kept attempts gave another outcome than the first."""
    return sum(classify(history.first, attempt) == "conflict" for attempt in history.attempts)


def explain(
    history: History,
    policy: Policy | None,
    *,
    case_id: str | None = None,
    older: int = 0,
    baseline: Policy | None = None,
    drift: Drift | None = None,
    observing: bool = False,
) -> str:
    """The trail from the number to the artifact and its owner, one fact per line.

    `case_id`, `older`: it was looked up by case (`explain --case`), which has `older`
    input hashes besides this, its newest. `baseline`: the policy released before
    (`--baseline-policy`): its status is said too, and a row that fails only because the
    rule moved is owned by the release rule. `drift`: the first attempt's contract drift,
    as its alert tells it (None when the row did not drift, or its alert is gone): the claims
    it added are said to be the drift's, not the answer's. `observing`: `baseline` is the
    previous rule of the policy's open observation window (SPEC §12), said as `previous:`.
    """
    first = history.first
    judgement = judgement_of(first, policy, baseline)
    decision = None if judgement is None else judgement.decision
    before = None if judgement is None else judgement.baseline
    lines = [
        f"case: {_case_line(history)}",
        f"input hash: {history.input_hash}",
        f"contract version: {first.contract_version or NOT_KEPT}",
        f"metric version: {first.metric_version} (Ragas {first.ragas_version},"
        f" worker {first.worker_version})",
        f"value: {'none (invalid)' if first.value is None else _number(first.value)}",
        f"reason: {first.reason}",
        f"status: {_status(first, decision, policy)}",
        *(
            []
            if before is None
            else [f"{'previous' if observing else 'baseline'}: {_status(first, before, baseline)}"]
        ),
        f"owner: {_owner(first, judgement)}",
        *_drift(first, history.input_hash, drift),
        *_findings(first, decision, drift),
        f"attempts: {_attempts(history)}",
    ]
    if case_id is not None and older:
        lines.append(
            f"case {case_id} has {older} older input hash{'es' * (older != 1)}:"
            f" evidence-worker show --case {case_id} lists them all"
        )
    return "\n".join(lines) + "\n"


def _attempts(history: History) -> str:
    kept, total = len(history.attempts), history.total_attempts
    counted = f"{total} recorded" + ("" if kept == total else f", the newest {kept} kept")
    others = conflicting(history)
    if others:
        return (
            f"{counted}; {others} gave another outcome, the first stands (nondeterminism:"
            " evidence-worker alerts --kind nondeterminism)"
        )
    return counted if total == 1 else f"{counted}; all kept gave this outcome"


def _case_line(history: History) -> str:
    first = history.first.case_id or "none"
    others = sorted(
        {a.case_id for a in history.attempts if a.case_id and a.case_id != history.first.case_id}
    )
    return f"{first} (also recorded for: {', '.join(others)})" if others else first


def _number(value: float) -> str:
    return repr(round(value, 4))


def _status(first: Attempt, decision: Decision | None, policy: Policy | None) -> str:
    if decision is None or policy is None:
        return "invalid" if first.value is None else NOT_DECIDED
    assumed = "" if first.policy_group else " (no group kept by this attempt: default assumed)"
    where = f"under policy {policy.version}"
    if decision.status == "invalid":
        if first.value is None:  # the metric's own rules: the reason says which
            return "invalid"
        return f"invalid {where}: {decision.reason}{assumed}"
    group = policy.groups[decision.policy_group]
    rule = "require_all" if group.require_all else f"threshold {_number(group.threshold)}"
    if group.review_band is not None:
        rule += f", review_band {_number(group.review_band)}"
    return f"{decision.status} {where}, group {decision.policy_group}, {rule}{assumed}"


def _owner(first: Attempt, judgement: Judgement | None) -> str:
    decision = None if judgement is None else judgement.decision
    if first.value is None or (decision is not None and decision.status == "invalid"):
        return "evaluation-data (an invalid row: fix the row's claim lists or its group)"
    if first.contract_drift:
        return (
            f"evaluation-data (contract drift: case {first.case_id} had another required set"
            f" under contract version {first.contract_version}; see evidence-worker alerts"
            " --kind contract_drift)"
        )
    if judgement is None:
        recorded = f"; the worker recorded owner {first.owner}" if first.owner else ""
        return f"none until decided{recorded}"
    if judgement.decision.status not in ("fail", "review"):
        return "none (the row passes)"
    owner = judgement.triage.owner
    if owner is None:  # judge_kept(): a failed row kept before findings were has none
        return (
            "not known: recorded before findings were kept (score the message again)"
            if first.findings is None
            else "none"
        )
    return _release_rule(judgement) if owner == "release-rule" else owner


def _release_rule(judgement: Judgement) -> str:
    """The release rule's line names both thresholds: the one the row passed and the one it
    fails, for the same value; or, for a row in review, its band (review_note())."""
    before, now = judgement.baseline, judgement.decision
    if now.status == "review":  # the band's: a person decides (SPEC §12)
        return f"release-rule ({review_note(now)})"
    assert before is not None  # judge_kept() names the release rule only with a baseline
    return (
        f"release-rule (the same value passed policy {before.policy_version}'s threshold"
        f" {_threshold(before)} and fails policy {now.policy_version}'s threshold"
        f" {_threshold(now)}: the rule moved, not the row)"
    )


def _threshold(decision: Decision) -> str:
    return "none" if decision.threshold is None else _number(decision.threshold)


def _drift(first: Attempt, input_hash: str, drift: Drift | None) -> list[str]:
    """A drifted row's line: the two required sets, both input hashes, what changed."""
    if not first.contract_drift:
        return []
    if drift is None:
        return [
            "contract drift: its alert is no longer kept, so the first required set is not"
            " known here (evidence-worker show --case lists the case's hashes)"
        ]
    return [
        f"contract drift: first required set {_listed(drift.first_required_claim_ids)}"
        f" (input hash {drift.first_input_hash}), this row's"
        f" {_listed(sorted(first.required_claim_ids))} (input hash {input_hash}):"
        f" added {_listed(drift.added_claim_ids)}; removed {_listed(drift.removed_claim_ids)}"
    ]


def _findings(first: Attempt, decision: Decision | None, drift: Drift | None) -> list[str]:
    if first.value is None or (decision is not None and decision.status == "invalid"):
        return ["findings: none (an invalid row is not triaged)"]
    if first.findings is None:
        claims = sorted(
            {c.strip() for c in first.required_claim_ids}
            - {c.strip() for c in first.supported_claim_ids}
        )
        return [
            f"missing claims: {', '.join(claims) or 'none'}"
            " (no findings kept by this store: recorded before triage)"
        ]
    # Triage lists the missing claims' findings first, one per missing claim (SPEC §9).
    count = len(first.missing_claim_ids or ())
    missing, beside = first.findings[:count], first.findings[count:]
    lines = [f"missing claims: {len(missing) or 'none'}"]
    added = set() if drift is None else set(drift.added_claim_ids)
    lines += [
        f"  {_added_line(f.claim_id, first) if f.claim_id in added else _finding_line(f, first)}"
        for f in missing
    ]
    if beside:
        lines.append(f"other findings: {len(beside)}")
        lines += [f"  {_finding_line(f, first)}" for f in beside]
    return lines


def _added_line(claim: str, first: Attempt) -> str:
    """A missing claim the drift added: the required set moved under it, so the answer that
    does not cite it is not the first thing to open."""
    return (
        f"{claim}: added to the required set of contract version {first.contract_version}"
        " without a new version (contract drift): check the contract's required claims"
        " (evaluation data), or version the contract"
    )


def _finding_line(finding: Finding, first: Attempt) -> str:
    """One finding and the artifact to open, e.g. "refund-method: cited to kb-9, which was
    not retrieved (retrieved: kb-1, kb-2): check the citation join"."""
    claim, documents, name = finding.claim_id, finding.document_ids, finding.finding
    cited = documents[0] if documents else "an unnamed document"
    retrieved = _listed(first.retrieved_document_ids)
    if name == "cited_document_not_retrieved":
        fact = f"cited to {cited}, which was not retrieved (retrieved: {retrieved})"
    elif name == "cited_span_invalid":
        fact = f"cited to {cited}{_span(first.citations, claim, cited)}, outside the answer"
    elif name == "cited_not_supported":
        fact = f"cited to {cited}, which was retrieved, yet the claim is not supported"
    elif name == "attribution_artifact_missing":
        fact = "the message carries no citations, so a dropped claim ID looks like a missing one"
    elif name == "evidence_not_retrieved":
        fact = (
            f"its expected evidence ({', '.join(documents)}) was not retrieved"
            f" (retrieved: {retrieved})"
        )
    elif name == "not_cited":
        fact = (
            f"its expected evidence ({', '.join(documents)}) was retrieved, yet the answer"
            " does not cite it"
            if finding.evidence_retrieved
            else "not cited, and no expected evidence is declared for it"
        )
    elif name == "citation_unknown_claim":
        fact = f"cited to {cited}, yet it is not one of the required claims"
    else:  # supported_without_citation
        fact = "supported, yet no citation names it"
    artifact = NEXT_ARTIFACT[name]
    if name == "evidence_not_retrieved":
        artifact = f"check the retriever index for {', '.join(documents)}"
    return f"{claim}: {fact}: {artifact}"


def _listed(documents: Sequence[str] | None) -> str:
    if documents is None:
        return NOT_KEPT
    return ", ".join(documents) or "none"


def _span(citations: Sequence[KeptCitation] | None, claim: str, document: str) -> str:
    """ " with span [start, end]" of the claim's citation of `document`, when kept."""
    for citation in citations or ():
        if citation.claim_id.strip() == claim and citation.document_id == document:
            start, end = citation.answer_span
            return f" with span [{start}, {end}]"
    return ""
