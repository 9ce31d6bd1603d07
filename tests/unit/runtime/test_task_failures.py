"""A task that cannot record: a bug hands its message back unacknowledged until its last
delivery records it as rejected; a store outage is waited out, then the message goes back.

Tasks run as a worker runs them (`delivered`, task_runs.py), so a Reject is what the broker
would see; against a store on fakeredis that fails on demand (FlakyStore) and a fake clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis
import structlog
from celery import Task
from celery.exceptions import Reject
from structlog.testing import capture_logs

from contracts import AttributionResult, input_hash
from tests.factories import ledger_entry
from tests.unit.runtime.task_runs import (
    APP,
    LATER,
    MAX_DELIVERIES,
    STORE_WINDOW_SECONDS,
    WRONGTYPE,
    FakeTime,
    FlakyStore,
    MessageFactory,
    delivered,
    hash_of,
    rejected_entry,
    run,
    score,
    score_batch,
    without_duration,
)
from worker.errors import ConfigurationError, TransientError
from worker.pipeline.service import Service
from worker.runtime import tasks

pytestmark = pytest.mark.usefixtures("runtime", "no_pause")


# A task that fails on a bug: never acknowledged without an outcome


def test_a_task_failing_on_a_bug_hands_its_message_back_unacknowledged(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """Celery would ack a failed task and the message would be gone with no record: instead
    the task rejects it with requeue, and says so in an ERROR line with the traceback."""
    message = message_dict(case_id="poison")
    store.broken.add(hash_of(message))

    result, logs = delivered(score, message)

    assert isinstance(result, Reject)
    assert (result.requeue, result.reason) == (True, f"ResponseError: {WRONGTYPE}")
    (entry,) = logs
    assert {key: entry[key] for key in ("event", "log_level", "case_ids", "why")} == {
        "event": "evidence_coverage.task_failed",
        "log_level": "error",
        "case_ids": ["poison"],
        "why": "the message goes back to the broker unacknowledged and is tried again; on "
        f"redelivery {MAX_DELIVERIES} (EVIDENCE_MAX_DELIVERIES) it is recorded as rejected "
        "if it still fails",
    }
    assert str(entry["exc_info"]) == WRONGTYPE
    assert store.dead_letters() == []
    assert store.history(hash_of(message)) is None


def test_a_bug_that_lasts_to_the_last_delivery_is_recorded_as_rejected_naming_it(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """Requeued until redelivery MAX_DELIVERIES, then dead-lettered and recorded `rejected`
    with the error in the reason: an outcome, then the ack."""
    message = message_dict(case_id="poison")
    store.broken.add(hash_of(message))
    tries = [delivered(score, message, redelivered=n > 0)[0] for n in range(MAX_DELIVERIES)]

    result, logs = delivered(score, message, redelivered=True)

    assert [type(outcome) for outcome in tries] == [Reject] * MAX_DELIVERIES
    reason = (
        f"scoring failed on its last delivery (EVIDENCE_MAX_DELIVERIES={MAX_DELIVERIES}): "
        f"ResponseError: {WRONGTYPE}"
    )
    assert result == [{"case_id": "poison", "input_hash": None, "status": "invalid", "cache": None}]
    assert [entry["event"] for entry in logs] == [
        "evidence_coverage.task_failed",
        "evidence_coverage.rejected",
    ]
    assert logs[0]["why"] == (
        "last delivery: each message is scored alone, and any that fails is recorded as "
        "rejected with its error"
    )
    assert without_duration(logs[1]) == rejected_entry(
        reason,
        case_id="poison",
        task_name="evidence_coverage.score",
        retries=0,
        redelivered=True,
    )
    (letter,) = store.dead_letters()
    assert (letter.error, json.loads(letter.body), letter.position) == (reason, message, 0)


def test_a_bug_that_goes_away_on_redelivery_is_scored_then(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    message = message_dict(case_id="flaky")
    store.broken.add(hash_of(message))
    first, _ = delivered(score, message)
    store.broken.clear()

    result, logs = delivered(score, message, redelivered=True)

    assert isinstance(first, Reject)
    assert [entry["event"] for entry in logs] == ["evidence_coverage.scored"]
    assert result[0]["status"] == "scored"
    assert store.dead_letters() == []


def test_on_the_last_delivery_one_poison_message_does_not_take_its_batch_with_it(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """The batch fails as a whole until the last delivery; that one scores each message
    alone: the others are scored, the poison one rejected at its own position."""
    batch = [message_dict(case_id=case, answer=f"Refunds: 30 days. [{case}]") for case in "abc"]
    store.broken.add(hash_of(batch[1]))
    store.note_published([ledger_entry("task-1", n) for n in range(3)])
    for n in range(MAX_DELIVERIES):
        assert isinstance(delivered(score_batch, batch, redelivered=n > 0)[0], Reject)
    assert len(list(store.unrecorded(published_before=LATER))) == 3

    result, logs = delivered(score_batch, batch, redelivered=True)

    assert [(line["case_id"], line["status"]) for line in result] == [
        ("a", "scored"),
        ("b", "invalid"),
        ("c", "scored"),
    ]
    assert [entry["event"] for entry in logs] == [
        "evidence_coverage.task_failed",
        "evidence_coverage.scored",
        "evidence_coverage.rejected",
        "evidence_coverage.scored",
    ]
    (letter,) = store.dead_letters()
    assert (letter.task_id, letter.position) == ("task-1", 1)
    assert list(store.unrecorded(published_before=LATER)) == []


def test_a_rejection_that_cannot_be_recorded_hands_the_message_back_too(
    message_dict: MessageFactory, store: FlakyStore, no_pause: list[float]
) -> None:
    """When not even the dead letter can be written (on the last try, and past the bound),
    the message goes back to the broker with a CRITICAL line rather than be acked unrecorded."""
    message = message_dict(case_id="poison")
    store.broken.add(hash_of(message))
    for n in range(MAX_DELIVERIES):
        delivered(score, message, redelivered=n > 0)
    store.broken_letters = True

    tries = [delivered(score, message, redelivered=True) for _ in range(2)]

    for result, logs in tries:
        assert isinstance(result, Reject)
        assert result.requeue is True
        assert [logs[-1][key] for key in ("event", "log_level", "case_ids")] == [
            "evidence_coverage.unrecordable",
            "critical",
            ["poison"],
        ]
    assert store.dead_letters() == []
    assert no_pause == [tasks.UNRECORDABLE_PAUSE_SECONDS] * 2
    store.broken_letters = False
    assert delivered(score, message, redelivered=True)[0][0]["status"] == "invalid"
    assert [letter.error for letter in store.dead_letters()] == [
        f"delivered {MAX_DELIVERIES + 2} times without completing "
        f"(limit EVIDENCE_MAX_DELIVERIES={MAX_DELIVERIES})"
    ]


@pytest.mark.parametrize(
    ("task", "as_body"),
    [
        (score, lambda message: message),
        (score_batch, lambda message: [message]),
        (score_batch, lambda message: message),  # not a list: rejected, once it can be recorded
    ],
    ids=["score", "score_batch", "score_batch-not-a-list"],
)
def test_a_process_that_cannot_build_its_service_hands_the_message_back(
    message_dict: MessageFactory,
    monkeypatch: pytest.MonkeyPatch,
    no_pause: list[float],
    task: Task,
    as_body: Callable[[dict[str, Any]], Any],
) -> None:
    """A pool process builds its store and policy at its first message: when that fails (a
    policy file gone since the worker started), the message goes back, after a pause."""

    def unbuildable() -> Service:
        raise ConfigurationError("policy file policy.toml: No such file or directory")

    monkeypatch.setattr(APP, "service", unbuildable)
    body = as_body(message_dict(case_id="early"))

    result, logs = delivered(task, body)

    assert isinstance(result, Reject)
    assert (result.requeue, result.reason) == (
        True,
        "ConfigurationError: policy file policy.toml: No such file or directory",
    )
    ((event, level, case_ids),) = [
        (entry["event"], entry["log_level"], entry["case_ids"]) for entry in logs
    ]
    assert (event, level, case_ids) == ("evidence_coverage.unrecordable", "critical", ["early"])
    assert no_pause == [tasks.UNRECORDABLE_PAUSE_SECONDS]


def test_a_bug_outside_a_worker_is_raised_to_the_caller(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    message = message_dict()
    store.broken.add(hash_of(message))

    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        score(message)


# The store away


def test_a_store_outage_is_waited_out_and_the_outcome_recorded_once(
    message_dict: MessageFactory, store: FlakyStore, fake_time: FakeTime
) -> None:
    """Redis unreachable twice, then back: the task waits (0.5 s, then 1 s), naming the case
    it holds in each WARNING line, and records the outcome exactly once."""
    message = message_dict()
    store.failures = 2

    result, logs = run(score, message)

    assert result == [
        {"case_id": "refund-001", "input_hash": result[0]["input_hash"], "status": "scored",
         "cache": "miss"}
    ]  # fmt: skip
    assert [(entry["event"], entry.get("attempt"), entry.get("case_ids")) for entry in logs] == [
        ("evidence_coverage.store_unavailable", 1, ["refund-001"]),
        ("evidence_coverage.store_unavailable", 2, ["refund-001"]),
        ("evidence_coverage.scored", None, None),
    ]
    assert fake_time.sleeps == [0.5, 1.0]
    history = store.history(input_hash(AttributionResult.model_validate(message)))
    assert history is not None
    assert history.total_attempts == 1


def test_a_store_outage_longer_than_the_window_hands_the_message_back_unacknowledged(
    message_dict: MessageFactory, store: FlakyStore, fake_time: FakeTime
) -> None:
    """Past the window the task rejects its message with requeue: never an ack without an
    outcome. Nothing is recorded or logged as scored; the requeue names the case IDs."""
    store.failures = 1_000
    task_id = "task-1"
    score.push_request(
        id=task_id, delivery_info={"redelivered": False}, retries=0, called_directly=False
    )
    try:
        with (
            capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs,
            pytest.raises(Reject) as rejected,
        ):
            score.run(message_dict())
    finally:
        score.pop_request()

    assert rejected.value.requeue is True
    assert sum(fake_time.sleeps) <= STORE_WINDOW_SECONDS
    assert fake_time.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    events = [entry["event"] for entry in logs]
    assert events == ["evidence_coverage.store_unavailable"] * 6 + ["evidence_coverage.requeued"]
    assert logs[-1]["case_ids"] == ["refund-001"]
    assert logs[-1]["problem"] == "Redis unreachable: connection refused"
    assert store.alerts() == []
    assert store.failures == 1_000 - 7


def test_a_batch_waiting_for_the_store_names_every_case_it_holds(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """A batch's WARNING lines list the case IDs of all its messages, rejected ones too."""
    store.failures = 1
    batch = [message_dict(case_id="a"), {"case_id": "b", "bogus": 1}, message_dict(case_id="c")]

    _, logs = run(score_batch, batch)

    assert logs[0]["event"] == "evidence_coverage.store_unavailable"
    assert logs[0]["case_ids"] == ["a", "b", "c"]


def test_a_transient_error_outside_a_worker_is_raised_to_the_caller(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """Called directly (no worker request), an outage past the window raises TransientError."""
    store.failures = 1_000

    with pytest.raises(TransientError, match="Redis unreachable"):
        score(message_dict())


def test_redeliveries_during_an_outage_do_not_count_towards_the_poison_limit(
    message_dict: MessageFactory, store: FlakyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message an outage handed back, delivered again while the store is still away, is not
    counted as a crash: after many such deliveries it is scored, not dead-lettered."""
    message = message_dict()
    count_delivery = store.count_delivery
    away = {"deliveries": 10}

    def unreachable_while_away(task_id: str) -> int:
        if away["deliveries"]:
            away["deliveries"] -= 1
            raise TransientError("Redis unreachable: connection refused")
        return count_delivery(task_id)

    monkeypatch.setattr(store, "count_delivery", unreachable_while_away)
    for _ in range(10):
        run(score, message, redelivered=True)  # the store answers the rest of the task

    result, _ = run(score, message, redelivered=True)

    assert result[0]["status"] == "scored"
    assert store.dead_letters() == []
