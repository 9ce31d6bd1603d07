"""Judging: a row's outcome, its decision under a policy and its triage, in one place.

Score (SPEC §1), decide (§4), triage (§9): the service's scoring path, `gate` and `explain`
judge through here, so a row reads the same wherever it is judged. Pure: rows and policies
in, a Judgement out; what only a store knows (contract drift) is the caller's to add.
"""

from __future__ import annotations

from typing import NamedTuple

from contracts.messages import AttributionResult, ReleaseRow
from contracts.metric import score_pair
from contracts.outcomes import Decision, Outcome
from contracts.policy import DEFAULT_GROUP, Policy, decide
from contracts.record_models import Attempt
from contracts.triage import Triage, release_row_triage, row_owner, triage
from contracts.trusted import trusted


class Judgement(NamedTuple):
    """One row judged: what the metric said, what the policy made of it, whose it is.

    `baseline`: the decision under the baseline policy, when one was given (`gate
    --baseline-policy`). A tuple, not a model: the worker builds one per message.
    """

    outcome: Outcome
    decision: Decision
    triage: Triage
    baseline: Decision | None = None


def outcome_of(row: ReleaseRow) -> Outcome:
    """The metric's outcome for a row's claim lists (SPEC §1)."""
    value, reason = score_pair(row.required_claim_ids, row.supported_claim_ids)
    return trusted(Outcome, {"value": value, "reason": reason})  # a float or None, and text


def judge(
    row: ReleaseRow,
    policy: Policy | None,
    *,
    outcome: Outcome | None = None,
    baseline: Policy | None = None,
    contract_drift: bool = False,
) -> Judgement:
    """Score a row, decide it under `policy` (None: report-only) and triage it.

    `outcome`: decide this one instead of scoring the row (a repeated input's first outcome
    stands). `baseline`: decide the row under it too; a row that fails now and passed under
    the baseline (the same value) is the release rule's (moved_by_rule()). `contract_drift`:
    the caller saw another required set for the row's (contract version, case ID) (the
    store, or `gate` within its input: contracts.drift). An AttributionResult is triaged
    from its contexts and citations, a ReleaseRow from its claim lists alone.
    """
    if outcome is None:
        outcome = outcome_of(row)
    decision = decide(
        outcome,
        policy,
        policy_group=row.policy_group,
        blocking=row.blocking,
        contract_version=row.contract_version,
    )
    before = None
    if baseline is not None:
        before = decide(
            outcome,
            baseline,
            policy_group=row.policy_group,
            blocking=row.blocking,
            contract_version=row.contract_version,
        )
    release_rule = moved_by_rule(decision, before)
    if isinstance(row, AttributionResult):
        found = triage(row, decision, contract_drift=contract_drift, release_rule=release_rule)
    else:
        found = release_row_triage(
            row.required_claim_ids,
            row.supported_claim_ids,
            decision,
            contract_drift=contract_drift,
            release_rule=release_rule,
        )
    return Judgement(outcome, decision, found, before)


def moved_by_rule(decision: Decision, before: Decision | None) -> bool:
    """Whether a row fails only because the rule moved: it fails under the current policy and
    passed under the baseline (`before`, None without one) with the same value. `gate` and
    `explain --baseline-policy` both ask this, so both name the release rule alike."""
    return before is not None and decision.status == "fail" and before.status == "pass"


def judge_kept(
    attempt: Attempt, policy: Policy | None, *, baseline: Policy | None = None
) -> Judgement:
    """A kept attempt's outcome decided under `policy`, with the triage it kept.

    `baseline`: decide it under that policy too, as judge() does (`explain
    --baseline-policy`): a failure the baseline passed is the release rule's, unless its
    contract drifted (row_owner()'s precedence).

    Its answer and contexts are not kept, so it is not triaged again: its findings are the
    ones recorded with it, and the owner is what they say under this decision (its contract
    drift wins, as when it was recorded). The group is the attempt's (the default for one
    that kept none); `blocking` is not kept and is taken as true: it gates a run, it never
    changes a row's status. An attempt kept before findings were has no owner to give when
    it fails (None), and its triage's findings are then [] (its missing IDs None). An
    invalid decision is not triaged: no missing IDs, no findings, owner evaluation-data.
    """
    outcome = attempt.outcome

    def decided(under: Policy | None) -> Decision:
        return decide(
            outcome,
            under,
            policy_group=attempt.policy_group or DEFAULT_GROUP,
            blocking=True,
            contract_version=attempt.contract_version,
        )

    decision = decided(policy)
    before = None if baseline is None else decided(baseline)
    findings = attempt.findings
    if decision.status == "invalid":  # as triage() has it: nothing to triage
        return Judgement(outcome, decision, Triage(None, [], "evaluation-data"), before)
    release_rule = moved_by_rule(decision, before)
    if (
        findings is None
        and decision.status == "fail"
        and not (attempt.contract_drift or release_rule)
    ):
        owner = None  # triage's findings decide a failed row's owner, and none were kept
    else:
        owner = row_owner(
            decision,
            findings or [],
            contract_drift=attempt.contract_drift,
            release_rule=release_rule,
        )
    triaged = Triage(attempt.missing_claim_ids, findings or [], owner)
    return Judgement(outcome, decision, triaged, before)
