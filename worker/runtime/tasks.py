"""Thin Celery tasks, and the delivery rules they share: how one delivery of a task's
messages ends.

`register_tasks(app)` makes them the app's tasks; the app calls it as it is finalized
(worker/runtime/celery_app.py), so nothing here needs a built app. Acks and serialization are
the app's. A delivery ends in one of two ways: every message has its record and its line, and
Celery acknowledges it; or it goes back to the broker unacknowledged (Reject, requeue) and is
delivered again. Never an ack without an outcome. Celery's own retry would publish a copy and
ack the original, which loses the message when the broker is the Redis that is down.

The rules, in the order deliver() applies them:

1. A SIGTERM waits until the lines are written (worker/runtime/termination.py).
2. A redelivery is counted per task id (0 while the store is away: a delivery an outage
   handed back did not crash a worker).
3. Past EVIDENCE_MAX_DELIVERIES, a message whose write the store holds is a replay, handled
   as any delivery (its line the original's, `redelivered: true`): a recorded message's
   duplicates are never rejections. The others are poison: dead-lettered and recorded as
   rejected, never scored again.
4. The messages are scored and recorded in one store call, which waits out a store outage
   (worker/stores/durable.py); a delivery that completed drops its count.
5. A bug (any error but the store being away) hands the message back until the delivery that
   reaches the limit; that one scores each message alone and rejects those still failing.
6. The store stayed away longer than its window: back to the broker, with a WARNING.
7. Neither a record nor a rejection could be written (or the process could not build its
   store and policy): back to the broker after a pause, with a CRITICAL line.

Called directly (not by a worker), a task raises every error to its caller.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from itertools import islice
from time import sleep
from typing import Any

import structlog
from celery import Celery, Task
from celery.exceptions import Reject

from worker.constants import (
    CANARY,
    NOOP,
    PUBLISHED_AT_HEADER,
    RECONCILE,
    SCORE,
    SCORE_BATCH,
    TASK_FAILED,
    UNRECORDABLE,
)
from worker.errors import TransientError
from worker.observability.logging import get_logger
from worker.pipeline.intake import case_id_of
from worker.pipeline.scoring import Delivery, Processed
from worker.pipeline.service import Service, summary
from worker.runtime.termination import finishing
from worker.stores import AuditTrail
from worker.stores.durable import impatient

# Events, Flower and `inspect` name a scoring task's messages by case ID
# (worker/runtime/request.py).
TASK_OPTIONS: dict[str, Any] = {"bind": True, "Request": "worker.runtime.request:NamedByCase"}
SAMPLE_CASE_IDS = 20  # named in the reconcile task's WARNING line, per list
RECONCILE_LEASE = "reconcile"  # the store's lease one reconcile run holds as it republishes
UNRECORDABLE_PAUSE_SECONDS = 1.0

# A task's messages, each with its own delivery (the task's, with the message's position).
Messages = list[tuple[Any, Delivery]]


def deliver(task: Task, bodies: list[Any], *, refuse: str | None = None) -> list[Processed]:
    """The outcomes of one delivery of `bodies` (all rejected with `refuse` when given), or
    a Reject(requeue=True) raised: the rules of the module's docstring."""
    delivery = _delivery(task)
    direct = bool(task.request.called_directly)
    with (
        finishing(),  # rule 1
        structlog.contextvars.bound_contextvars(
            task_id=delivery.task_id,
            task_name=task.name,
            retries=task.request.retries,
            redelivered=delivery.redelivered,
        ),
    ):
        try:
            # Built on first use in each pool process: a policy file or store that went away
            # since the worker started fails here, and must not fail the task (an ack).
            service: Service = task.app.service()
            if refuse is not None:
                return service.reject(bodies, refuse, delivery)
            return _delivered(service, _positioned(bodies, delivery), delivery, direct=direct)
        except Reject:
            raise
        except Exception as error:
            if direct:
                raise
            raise _handed_back(error, bodies) from error  # rules 6 and 7


def _delivered(
    service: Service, messages: Messages, delivery: Delivery, *, direct: bool
) -> list[Processed]:
    """Rules 2 to 5: the limit, then scoring, for the messages of one delivery."""
    deliveries = _count_delivery(service.store, delivery)
    poison: Messages = []
    if deliveries > service.settings.max_deliveries:
        recorded = service.recorded(messages)
        poison = [message for message, kept in zip(messages, recorded, strict=True) if not kept]
        messages = [message for message, kept in zip(messages, recorded, strict=True) if kept]
    results = _scored(service, messages, deliveries, direct=direct) if messages else []
    if not poison:
        _forget_deliveries(service.store, delivery, deliveries)
        return results
    error = (
        f"delivered {deliveries} times without completing "
        f"(limit EVIDENCE_MAX_DELIVERIES={service.settings.max_deliveries})"
    )
    if not messages:  # the whole task, in one call
        return service.reject([body for body, _ in poison], error, delivery)
    rejected = [service.reject([body], error, alone)[0] for body, alone in poison]
    return _in_order(messages, results, poison, rejected)


def _scored(
    service: Service, messages: Messages, deliveries: int, *, direct: bool
) -> list[Processed]:
    """Rules 4 and 5: scored and recorded in one call; a bug hands them back (_failed)."""
    try:
        return service.handle(messages)
    except TransientError:
        raise
    except Exception as error:
        if direct:
            raise
        return _failed(service, messages, deliveries, error)


def _handed_back(error: Exception, bodies: list[Any]) -> Reject:
    """Rules 6 and 7: the Reject that sends the message back to the broker unacknowledged,
    once its line says why."""
    case_ids = [case_id_of(body) for body in bodies]
    if isinstance(error, TransientError):
        get_logger().warning(
            "evidence_coverage.requeued",
            case_ids=case_ids,
            problem=str(error),
            why="the store stayed unavailable: the message goes back to the broker "
            "unacknowledged and is scored when it is delivered again",
        )
        return Reject(str(error), requeue=True)
    get_logger().critical(
        UNRECORDABLE,
        case_ids=case_ids,
        exc_info=error,
        why="neither a record nor a rejection could be written (or this process "
        "could not build its store and policy): the message goes back to the broker "
        "unacknowledged rather than be acknowledged with no record",
    )
    # Nothing bounds these redeliveries (the count may be what fails): a pause keeps a
    # message that comes straight back from spinning a core and flooding the log.
    sleep(UNRECORDABLE_PAUSE_SECONDS)
    return Reject(f"{type(error).__name__}: {error}", requeue=True)


def _delivery(task: Task) -> Delivery:
    info = task.request.delivery_info or {}
    return Delivery(
        task_id=task.request.id,
        redelivered=bool(info.get("redelivered")),
        published_at=_published_at(task.request.get(PUBLISHED_AT_HEADER)),
    )


def _published_at(header: object) -> datetime | None:
    """The publish time a message's header carries; anything but a number is not one (a
    foreign publisher's header of the same name must not fail the task)."""
    if isinstance(header, bool) or not isinstance(header, int | float):
        return None
    try:
        return datetime.fromtimestamp(header, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _positioned(bodies: list[Any], delivery: Delivery) -> Messages:
    return [
        (body, dataclasses.replace(delivery, position=position))
        for position, body in enumerate(bodies)
    ]


def _in_order(
    scored: Messages, results: list[Processed], rejected: Messages, refusals: list[Processed]
) -> list[Processed]:
    """The results of a task's messages scored and rejected apart, by their positions."""
    by_position = {
        alone.position: result
        for (_, alone), result in [
            *zip(scored, results, strict=True),
            *zip(rejected, refusals, strict=True),
        ]
    }
    return [by_position[position] for position in sorted(by_position, key=lambda p: p or 0)]


def _failed(
    service: Service, messages: Messages, deliveries: int, error: Exception
) -> list[Processed]:
    """A task whose scoring raised what no store or input explains (a bug, a script error).

    Celery would acknowledge a failed task: the message would be gone with no record. Instead
    it goes back to the broker, unacknowledged, until the delivery that reaches
    EVIDENCE_MAX_DELIVERIES; that one scores each message alone, so one poison message in a
    batch does not take the others with it, and records the ones that still fail as rejected,
    naming the error. Never an ack without an outcome.
    """
    limit = service.settings.max_deliveries
    case_ids = [case_id_of(body) for body, _ in messages]
    if deliveries < limit:
        get_logger().error(
            TASK_FAILED,
            case_ids=case_ids,
            exc_info=error,
            why=f"the message goes back to the broker unacknowledged and is tried again; on "
            f"redelivery {limit} (EVIDENCE_MAX_DELIVERIES) it is recorded as rejected if it "
            "still fails",
        )
        raise Reject(f"{type(error).__name__}: {error}", requeue=True) from error
    get_logger().error(
        TASK_FAILED,
        case_ids=case_ids,
        exc_info=error,
        why="last delivery: each message is scored alone, and any that fails is recorded as "
        "rejected with its error",
    )
    results: list[Processed] = []
    for body, alone in messages:
        try:
            results += service.handle([(body, alone)])
        except TransientError:
            raise
        except Exception as failure:
            reason = (
                f"scoring failed on its last delivery (EVIDENCE_MAX_DELIVERIES={limit}): "
                f"{type(failure).__name__}: {failure}"
            )
            results += service.reject([body], reason, alone)
    return results


def _count_delivery(store: AuditTrail, delivery: Delivery) -> int:
    """This delivery's number (0 for a first delivery), or 0 when the store is away: a
    message an outage handed back is delivered again while the store is still away, and such
    a delivery must not count towards the poison-message limit (it did not crash a worker).
    Counting resumes with the store."""
    if not (delivery.redelivered and delivery.task_id):
        return 0
    try:
        with impatient():
            return store.count_delivery(delivery.task_id)
    except TransientError:
        return 0


def _forget_deliveries(store: AuditTrail, delivery: Delivery, deliveries: int) -> None:
    """A counted delivery completed: its count goes, so that the limit counts deliveries that
    did not complete, and duplicates of a recorded message (an at-least-once broker's, after a
    connection loss) are replays however many come one after another. Best effort: with the
    store away the count stays, and at worst a later duplicate counts from it (and is a
    replay still, rule 3)."""
    if not deliveries or delivery.task_id is None:
        return
    try:
        with impatient():
            store.forget_deliveries(delivery.task_id)
    except TransientError:
        pass


def score(self: Task, message: Any) -> list[dict[str, Any]]:
    """Score one AttributionResult (a JSON object, or its JSON text)."""
    return summary(deliver(self, [message]))


def score_batch(self: Task, messages: Any) -> list[dict[str, Any]]:
    """Score a list of AttributionResults; each keeps its own record and hit/conflict."""
    if not isinstance(messages, list):
        error = f"score_batch takes a list of messages, got {type(messages).__name__}"
        return summary(deliver(self, [messages], refuse=error))
    return summary(deliver(self, messages))


def noop(self: Task, message: Any) -> None:
    """Celery's own floor per message, the baseline `bench` measures against."""


def canary(self: Task, sample: int | None = 1000, seed: int = 0) -> dict[str, int]:
    """Re-score stored first outcomes (for Celery beat); each difference is an ERROR line."""
    from worker.audit.canary import run_canary
    from worker.observability.logging import get_logger

    result = run_canary(self.app.service().store.first_outcomes(), size=sample, seed=seed)
    log = get_logger()
    for difference in result.differences:
        log.error("evidence_coverage.canary_difference", **difference.as_json())
    counts = {
        "seen": result.seen,
        "checked": result.checked,
        "differences": len(result.differences),
    }
    log.info("evidence_coverage.canary", task_id=self.request.id, **counts)
    return counts


def reconcile(
    self: Task, older_than_seconds: int | None = None, after_seconds: int | None = None
) -> dict[str, int]:
    """Repair and count published messages never recorded (for Celery beat).

    Those noted over `after_seconds` ago (EVIDENCE_RECONCILE_AFTER_SECONDS; 0: none) are sent
    again, or dead-lettered once EVIDENCE_MAX_REPUBLISHES copies went unrecorded
    (upstream/reconcile.py heal()), by one run at a time: a run that finds the store's lease
    held leaves them to it. Then the gauge counts those still open that the self-heal will not
    take care of: over `older_than_seconds` and, while it republishes, over `after_seconds`
    too (younger ones it sends at a later run; the alert on the gauge must not page for them).
    A heal that failed (the broker away) still sets the gauge before its error goes up. One
    line says what the run did: a WARNING while anything was lost, else INFO.
    """
    from worker.upstream.reconcile import Healed, cutoff, heal

    service = self.app.service()
    settings, store = service.settings, service.store
    seconds = older_than_seconds or settings.reconcile_older_than_seconds
    after = settings.reconcile_after_seconds if after_seconds is None else after_seconds
    now = store.ledger_now()  # the store's clock, which stamped every entry
    # Copies the heal sends are noted after `now`: only what is still lost counts.
    counted = max(timedelta(seconds=seconds), timedelta(seconds=after))
    before = cutoff(counted, now=now)
    healed, republishing = Healed(), "off"
    if after > 0:
        holder = self.request.id or str(uuid.uuid4())
        if store.take_lease(RECONCILE_LEASE, holder, settings.reconcile_every_seconds):
            republishing = "done"
            try:
                healed = heal(
                    store.unrecorded(published_before=cutoff(timedelta(seconds=after), now=now)),
                    app=self.app,
                    queue=settings.queue,
                    store=store,
                    max_message_bytes=settings.max_message_bytes,
                    max_republishes=settings.max_republishes,
                    now=now,
                )
            except Exception:
                service.metrics.ledger_unrecorded(store.count_unrecorded(published_before=before))
                raise
            finally:
                store.give_back_lease(RECONCILE_LEASE, holder)
        else:
            republishing = "skipped: another reconcile run holds the lease"
    service.metrics.healed(
        republished=len(healed.republished), dead_lettered=len(healed.dead_lettered)
    )
    count = store.count_unrecorded(published_before=before)
    service.metrics.ledger_unrecorded(count)
    counts = {
        "unrecorded": count,
        "republished": len(healed.republished),
        "dead_lettered": len(healed.dead_lettered),
    }
    fields: dict[str, Any] = {
        **counts,
        "older_than_seconds": round(counted.total_seconds()),
        "republish_after_seconds": after,
        "republishing": republishing,
    }
    if not any(counts.values()):
        get_logger().info("evidence_coverage.reconcile", **fields)
        return counts
    some = list(islice(store.unrecorded(published_before=before), SAMPLE_CASE_IDS))
    get_logger().warning(
        "evidence_coverage.unrecorded",
        **fields,
        case_ids=[entry.case_id for entry in some],
        republished_case_ids=healed.republished[:SAMPLE_CASE_IDS],
        dead_lettered_case_ids=healed.dead_lettered[:SAMPLE_CASE_IDS],
        why="published and neither recorded nor dead-lettered: lost on the way. Those older "
        "than republish_after_seconds were sent again (records are idempotent), or "
        "dead-lettered after EVIDENCE_MAX_REPUBLISHES copies went unrecorded; "
        "`evidence-worker reconcile` lists the rest",
    )
    return counts


def register_tasks(app: Celery) -> None:
    """Register the tasks on `app`, and on it alone (not shared with every app Celery makes)."""
    app.task(name=SCORE, shared=False, **TASK_OPTIONS)(score)
    app.task(name=SCORE_BATCH, shared=False, **TASK_OPTIONS)(score_batch)
    app.task(name=NOOP, shared=False, bind=True)(noop)
    app.task(name=CANARY, shared=False, bind=True)(canary)
    app.task(name=RECONCILE, shared=False, bind=True)(reconcile)
