"""A validated message in, its record out: hash, score, record under the hash, decide.

Pure apart from the store and the clock, which are passed in; the one place that builds
attempts, scored records and the rejected record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version

from contracts import (
    METRIC_VERSION,
    RAGAS_VERSION,
    Alert,
    Attempt,
    AttributionResult,
    Outcome,
    Policy,
    ScoreRecord,
    decide,
    input_hash,
)
from contracts.metric import score_pair
from contracts.policy import INVALID_OWNER
from contracts.records import REJECTED, SCORED
from worker.intake import case_id_of
from worker.stores import OutcomeStore, Recorded
from worker.stores.ledger import write_id as ledger_write_id

WORKER_VERSION = version("evidence-coverage-worker")

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Delivery:
    """Where one attempt came from: a task (with its redelivery flag and the message's
    position in the task's body) or a CLI input line."""

    task_id: str | None = None
    redelivered: bool = False
    line: int | None = None
    position: int | None = None


@dataclass(frozen=True)
class Processed:
    """One message's record, and the alert when its outcome disagreed with the first.

    `replayed`: the store had recorded this very write before (a retry after a lost reply or
    a redelivery after the write landed), so the record and alert are the original ones and
    nothing new was stored; the alert is already in the store's alert stream.
    """

    record: ScoreRecord
    alert: Alert | None = None
    replayed: bool = False


def score(message: AttributionResult) -> tuple[str, Outcome]:
    """The input hash and the metric outcome for one validated message."""
    value, reason = score_pair(message.required_claim_ids, message.supported_claim_ids)
    return input_hash(message), Outcome(value=value, reason=reason)


def make_attempt(
    message: AttributionResult, outcome: Outcome, *, now: datetime, delivery: Delivery
) -> Attempt:
    return Attempt(
        case_id=message.case_id,
        task_id=delivery.task_id,
        required_claim_ids=message.required_claim_ids,
        supported_claim_ids=message.supported_claim_ids,
        value=outcome.value,
        reason=outcome.reason,
        recorded_at=now,
        metric_version=METRIC_VERSION,
        ragas_version=RAGAS_VERSION,
        worker_version=WORKER_VERSION,
        redelivered=delivery.redelivered,
    )


def build_record(
    message: AttributionResult,
    *,
    hash_: str,
    recorded: Recorded,
    observed: Outcome,
    policy: Policy | None,
    delivery: Delivery,
) -> ScoreRecord:
    """The scored record: the first (canonical) outcome decides; this attempt's is `observed_*`."""
    # A miss is the first; a hit agrees with it by definition: only a conflict needs the first.
    canonical = recorded.first.outcome if recorded.cache == "conflict" else observed
    decision = decide(
        canonical,
        policy,
        policy_group=message.policy_group,
        blocking=message.blocking,
        contract_version=message.contract_version,
    )
    repeat = recorded.cache != "miss"
    return ScoreRecord(
        event=SCORED,
        case_id=message.case_id,
        input_hash=hash_,
        metric_version=METRIC_VERSION,
        ragas_version=RAGAS_VERSION,
        worker_version=WORKER_VERSION,
        cache=recorded.cache,
        observed_value=observed.value if repeat else None,
        observed_reason=observed.reason if repeat else None,
        task_id=delivery.task_id,
        trace_id=message.trace_id,
        line=delivery.line,
        **decision.__dict__,  # its field values: what model_dump() would copy
    )


def process(
    message: AttributionResult,
    *,
    store: OutcomeStore,
    policy: Policy | None,
    clock: Clock = utc_now,
    delivery: Delivery = Delivery(),
) -> Processed:
    """Score one validated message and record it under its input hash."""
    return process_many([(message, delivery)], store=store, policy=policy, clock=clock)[0]


def write_ids(deliveries: Sequence[Delivery]) -> list[str | None]:
    """Each message's write id: its task ID and its position in the task's body, as
    "task-9:0", "task-9:1"... (None without a task ID: no retry to recognise). A delivery
    without a position takes the next one among its task's messages here.

    A retry of a task (the store's reply was lost, the worker died before the ack) hands the
    same messages over in the same order, so it sends the same ids, and the store returns
    what each write found the first time instead of recording it again. The publish ledger
    keys its entries by the same ids (worker/stores/ledger.py).
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
) -> list[Processed]:
    """Score messages and record them in one store call; each keeps its own hit/conflict."""
    now = clock()
    scored = [(message, delivery, *score(message)) for message, delivery in items]
    recorded = store.record_many(
        [
            (hash_, make_attempt(message, outcome, now=now, delivery=delivery))
            for message, delivery, hash_, outcome in scored
        ],
        now=now,
        write_ids=write_ids([delivery for _, delivery in items]),
    )
    return [
        Processed(
            record=build_record(
                message,
                hash_=hash_,
                recorded=result,
                observed=original_outcome(result) if result.replayed else outcome,
                policy=policy,
                delivery=delivery,
            ),
            alert=result.alert,
            replayed=result.replayed,
        )
        for (message, delivery, hash_, outcome), result in zip(scored, recorded, strict=True)
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
    policy: Policy | None = None,
    delivery: Delivery = Delivery(),
) -> ScoreRecord:
    """The record of a message that never reached the metric: invalid, owned by evaluation-data."""
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
        line=delivery.line,
    )
