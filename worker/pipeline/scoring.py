"""A validated message in, its record out: hash, score, record under the hash, decide.

Pure apart from the store and the clock, which are passed in; the one place that builds
attempts, scored records and the rejected record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from typing import NamedTuple

from contracts import (
    METRIC_VERSION,
    RAGAS_VERSION,
    Alert,
    Attempt,
    AttributionResult,
    Decision,
    Outcome,
    Policy,
    ScoreRecord,
    input_hash,
    judging,
)
from contracts.policy import INVALID_OWNER, previous_rule
from contracts.record_models import REJECTED, ContractDriftAlert, KeptCitation, scored_fields
from contracts.trace_ids import checked_trace_id
from contracts.triage import Triage, row_owner
from contracts.trusted import trusted
from worker.pipeline.intake import case_id_of, storable
from worker.pipeline.redaction import excerpt
from worker.stores import DeadLetter, OutcomeStore, Recorded
from worker.stores.contract import write_id as ledger_write_id

WORKER_VERSION = version("evidence-coverage-worker")
VERSIONS = (METRIC_VERSION, RAGAS_VERSION, WORKER_VERSION)  # a record's, in its order

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Delivery:
    """Where one attempt came from: a task (with its redelivery flag, the message's
    position in the task's body and, when its publisher said, when it was published) or a
    CLI input line."""

    task_id: str | None = None
    redelivered: bool = False
    line: int | None = None
    position: int | None = None
    published_at: datetime | None = None


@dataclass(frozen=True)
class Processed:
    """One message's record, and the alert when its outcome disagreed with the first.

    `drift`: the contract drift alert this write raised. `replayed`: the store had recorded
    this very write before (a retry after a lost reply or a redelivery after the write
    landed), so the record and alerts are the original ones and nothing new was stored; the
    alerts are already in the store's alert stream. Only the record's recorded_at is this
    call's: the store returns no time of the original write.
    """

    record: ScoreRecord
    alert: Alert | None = None
    replayed: bool = False
    drift: ContractDriftAlert | None = None


def score(message: AttributionResult) -> tuple[str, Outcome]:
    """The input hash and the metric outcome for one validated message."""
    return input_hash(message), judging.outcome_of(message)


class Judged(NamedTuple):
    """One message scored and judged under the process's policy, before it is recorded.

    A tuple, not a frozen dataclass: one per message, and a frozen dataclass's __init__ sets
    each field through object.__setattr__."""

    message: AttributionResult
    delivery: Delivery
    input_hash: str
    outcome: Outcome
    decision: Decision
    triage: Triage
    previous: Decision | None = None  # under an open observation window's previous rule


def judge(
    message: AttributionResult,
    delivery: Delivery,
    policy: Policy | None,
    previous: Policy | None = None,
) -> Judged:
    """Hash a message, and score, decide and triage it (contracts.judging); `previous`: an
    open observation window's previous rule (contracts.policy.previous_rule()), decided
    beside it as `gate --baseline-policy` decides its baseline."""
    outcome, decision, found, before = judging.judge(message, policy, baseline=previous)
    return Judged(message, delivery, input_hash(message), outcome, decision, found, before)


def kept_citations(message: AttributionResult, excerpt_chars: int | None) -> list[KeptCitation]:
    """The message's citations as an attempt keeps them, each with its excerpt when
    `excerpt_chars` is set (EVIDENCE_KEEP_EXCERPTS). Built from the validated citations'
    field values without validating them again (contracts.trusted): one per citation."""
    if excerpt_chars is None:
        return [trusted(KeptCitation, {**c.__dict__, "excerpt": None}) for c in message.citations]
    return [
        trusted(
            KeptCitation,
            {
                **citation.__dict__,
                "excerpt": excerpt(message.answer, citation.answer_span, excerpt_chars),
            },
        )
        for citation in message.citations
    ]


def make_attempt(judged: Judged, *, now: datetime, excerpt_chars: int | None = None) -> Attempt:
    """The attempt a store keeps of a judged message, in Attempt's field order, built without
    validating again what the message, the metric and triage have made (contracts.trusted);
    its lists are its own, as validation would copy them."""
    message, found, delivery = judged.message, judged.triage, judged.delivery
    grader, before = message.grader, judged.previous
    previous_version = previous_status = None
    if before is not None:  # an open observation window's (SPEC §12)
        previous_version, previous_status = before.policy_version, before.status
    return trusted(
        Attempt,
        {
            "case_id": message.case_id,
            "task_id": delivery.task_id,
            "required_claim_ids": list(message.required_claim_ids),
            "supported_claim_ids": list(message.supported_claim_ids),
            "value": judged.outcome.value,
            "reason": judged.outcome.reason,
            "recorded_at": now,
            "metric_version": METRIC_VERSION,
            "ragas_version": RAGAS_VERSION,
            "worker_version": WORKER_VERSION,
            "redelivered": delivery.redelivered,
            "contract_version": message.contract_version,
            "citations": kept_citations(message, excerpt_chars),
            "missing_claim_ids": None
            if found.missing_claim_ids is None
            else list(found.missing_claim_ids),
            "findings": list(found.findings),
            # A context's document ID may hold a lone surrogate (a legal JSON escape): stores
            # keep UTF-8, so it is kept as its \udXXX text.
            "retrieved_document_ids": [
                storable(document)
                for document in dict.fromkeys(c.document_id for c in message.contexts)
            ],
            "policy_group": message.policy_group,
            "contract_drift": False,
            "owner": found.owner,
            "previous_policy_version": previous_version,
            "previous_status": previous_status,
            # The grader's names may hold one too (check_encodable lets it through: it is hashed).
            "grader_name": storable(grader.name),
            "grader_version": storable(grader.version),
            "grader_model": storable(grader.model),
            "answer_length": len(message.answer),
            "expected_evidence": {claim: list(documents) for claim, documents in expected.items()}
            if (expected := message.expected_evidence)
            else None,
        },
    )


def judge_first(
    message: AttributionResult,
    first: Attempt,
    outcome: Outcome,
    policy: Policy | None,
    previous: Policy | None = None,
) -> tuple[Decision, Triage, Decision | None]:
    """The decision on a hash's first `outcome` and the triage of its first attempt: its
    supported set and citations over the message's hashed inputs (the same answer, contexts
    and expected evidence). An attempt kept before citations were has none to give: the
    message's stand in. The third: the decision under `previous` (an observation window's)."""
    update: dict[str, object] = {"supported_claim_ids": first.supported_claim_ids}
    if first.citations is not None:
        update["citations"] = first.citations
    _, decision, found, before = judging.judge(
        message.model_copy(update=update), policy, outcome=outcome, baseline=previous
    )
    return decision, found, before


def build_record(
    judged: Judged,
    *,
    recorded: Recorded,
    observed: Outcome,
    policy: Policy | None,
    now: datetime,
    previous: Policy | None = None,
) -> ScoreRecord:
    """The scored record: the first (canonical) outcome decides; this attempt's is `observed_*`.
    `now` is when the store recorded it (the time its attempt carries). `previous`: the open
    observation window's previous rule judged was given (its decision is the record's
    previous_status)."""
    message, delivery, grader = judged.message, judged.delivery, judged.message.grader
    # A miss is the first; a hit agrees with it by definition: only a conflict needs the first.
    if recorded.cache != "conflict" and (observed is judged.outcome or observed == judged.outcome):
        decision, found, before = judged.decision, judged.triage, judged.previous
    else:
        canonical = recorded.first.outcome if recorded.cache == "conflict" else observed
        decision, found, before = judge_first(message, recorded.first, canonical, policy, previous)
    trace = checked_trace_id(message.trace_id)
    owner = (
        row_owner(decision, found.findings, contract_drift=True, release_rule=False)
        if recorded.contract_drift
        else found.owner
    )
    # Built without validating the fields again (contracts.trusted), once per message.
    return trusted(
        ScoreRecord,
        scored_fields(
            message.case_id,
            judged.input_hash,
            VERSIONS,
            (grader.name, grader.version, grader.model),
            decision,
            owner=owner,
            previous=before,
            cache=recorded.cache,
            triage=found,
            contract_drift=recorded.contract_drift,
            task_id=delivery.task_id,
            recorded_at=now,
            observed=observed if recorded.cache != "miss" else None,
            trace=trace,
            produced_at=message.produced_at,
            line=delivery.line,
        ),
    )


def process(
    message: AttributionResult,
    *,
    store: OutcomeStore,
    policy: Policy | None,
    clock: Clock = utc_now,
    delivery: Delivery = Delivery(),
    excerpt_chars: int | None = None,
) -> Processed:
    """Score one validated message and record it under its input hash."""
    return process_many(
        [(message, delivery)], store=store, policy=policy, clock=clock, excerpt_chars=excerpt_chars
    )[0]


def write_ids(deliveries: Sequence[Delivery]) -> list[str | None]:
    """Each message's write id: its task ID and its position in the task's body, as
    "task-9:0", "task-9:1"... (None without a task ID: no retry to recognise). A delivery
    without a position takes the next one among its task's messages here.

    A retry of a task (the store's reply was lost, the worker died before the ack) hands the
    same messages over in the same order, so it sends the same ids, and the store returns
    what each write found the first time instead of recording it again. The publish ledger
    keys its entries by the same ids (worker/stores/contract.py).
    """
    positions: dict[str, int] = {}
    ids: list[str | None] = []
    for delivery in deliveries:
        task_id = delivery.task_id
        if task_id is None:
            ids.append(None)
            continue
        position = delivery.position
        if position is None:
            position = positions.get(task_id, 0)
        positions[task_id] = position + 1
        ids.append(ledger_write_id(task_id, position))
    return ids


def process_many(
    items: Sequence[tuple[AttributionResult, Delivery]],
    *,
    store: OutcomeStore,
    policy: Policy | None,
    clock: Clock = utc_now,
    excerpt_chars: int | None = None,
    letters: Sequence[DeadLetter] = (),
) -> list[Processed]:
    """Score messages and record them in one store call, after `letters` (the dead letters
    of the same bodies' rejected ones) in the same call; each keeps its own hit/conflict."""
    now = clock()
    # An observation window is open or not by the UTC date of the batch's clock.
    previous = (
        None if policy is None or policy.observe is None else previous_rule(policy, now.date())
    )
    judged = [judge(message, delivery, policy, previous) for message, delivery in items]
    recorded = store.record_many(
        [
            (one.input_hash, make_attempt(one, now=now, excerpt_chars=excerpt_chars))
            for one in judged
        ],
        now=now,
        write_ids=write_ids([delivery for _, delivery in items]),
        letters=letters,
    )
    return [
        Processed(
            record=build_record(
                one,
                recorded=result,
                observed=original_outcome(result) if result.replayed else one.outcome,
                policy=policy,
                now=now,
                previous=previous,
            ),
            alert=result.alert,
            replayed=result.replayed,
            drift=result.drift,
        )
        for one, result in zip(judged, recorded, strict=True)
    ]


def original_outcome(recorded: Recorded) -> Outcome:
    """The outcome the first write of a replayed one observed, so its record is the original
    even when scoring this time gave another: a conflict's is in its alert, and a miss's or a
    hit's is the first outcome (that is what they are)."""
    return (recorded.alert.observed if recorded.alert is not None else recorded.first).outcome


def rejected_record(
    error: str,
    *,
    body: object = None,
    recorded_at: datetime,
    policy: Policy | None = None,
    delivery: Delivery = Delivery(),
) -> ScoreRecord:
    """The record of a message that never reached the metric: invalid, owned by evaluation-data.
    `recorded_at` is when it was rejected (its dead letter's time)."""
    return ScoreRecord(
        event=REJECTED,
        case_id=case_id_of(body),
        input_hash=None,
        contract_version=None,
        metric_version=METRIC_VERSION,
        ragas_version=RAGAS_VERSION,
        worker_version=WORKER_VERSION,
        value=None,
        reason=error,
        status="invalid",
        policy_group=None,
        policy_version=policy.version if policy else None,
        threshold=None,
        blocking=None,
        owner=INVALID_OWNER,
        cache=None,
        task_id=delivery.task_id,
        recorded_at=recorded_at,
        line=delivery.line,
    )
