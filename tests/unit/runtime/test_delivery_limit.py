"""The delivery limit asks the store first: past EVIDENCE_MAX_DELIVERIES a message whose write
the store holds is a replay, acknowledged with the original's record; only the others are
poison, dead-lettered and recorded as rejected.

Tasks run as a worker runs them (task_runs.py) against a store on fakeredis (conftest.py).
"""

from __future__ import annotations

import pytest

from tests.unit.runtime.task_runs import (
    MAX_DELIVERIES,
    FlakyStore,
    MessageFactory,
    delivered,
    hash_of,
    run,
    score,
    score_batch,
)
from worker.errors import TransientError
from worker.pipeline.scoring import Delivery
from worker.pipeline.service import Service

pytestmark = pytest.mark.usefixtures("runtime", "no_pause")

LIMIT_REASON = (
    f"delivered {MAX_DELIVERIES + 1} times without completing "
    f"(limit EVIDENCE_MAX_DELIVERIES={MAX_DELIVERIES})"
)


def past_the_limit(store: FlakyStore, task_id: str = "task-1") -> None:
    """Count MAX_DELIVERIES deliveries of `task_id` that never completed: the next is over."""
    for _ in range(MAX_DELIVERIES):
        store.count_delivery(task_id)


def test_a_recorded_message_past_the_limit_is_a_replay_not_a_rejection(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """Its write landed (only the reply was lost): the delivery over the limit is acknowledged
    with the original record, `redelivered: true`, and no dead letter is written."""
    message = message_dict(case_id="landed")
    run(score, message)
    past_the_limit(store)

    result, logs = delivered(score, message, redelivered=True)

    assert result == [
        {"case_id": "landed", "input_hash": hash_of(message), "status": "scored", "cache": "miss"}
    ]
    assert [(e["event"], e["cache"], e["redelivered"]) for e in logs] == [
        ("evidence_coverage.scored", "miss", True)
    ]
    assert store.dead_letters() == []
    history = store.history(hash_of(message))
    assert history is not None
    assert history.total_attempts == 1


def test_a_replay_past_the_limit_drops_the_count(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """The replay completed the delivery: counting starts over for the task id."""
    message = message_dict()
    run(score, message)
    past_the_limit(store)

    delivered(score, message, redelivered=True)

    assert store.count_delivery("task-1") == 1


def test_past_the_limit_a_batch_replays_its_recorded_messages_and_rejects_the_others(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """Asked per message: the one whose write is stored (position 0) is a replay, the one
    never recorded (position 1) is poison; the task's summary keeps their order."""
    first = message_dict(case_id="kept")
    second = message_dict(case_id="never", answer="Another answer, other inputs.")
    run(score_batch, [first])  # records task-1:0 only
    past_the_limit(store)

    result, logs = delivered(score_batch, [first, second], redelivered=True)

    assert [(r["case_id"], r["status"], r["cache"]) for r in result] == [
        ("kept", "scored", "miss"),
        ("never", "invalid", None),
    ]
    assert sorted((e["event"], e["case_id"]) for e in logs) == [
        ("evidence_coverage.rejected", "never"),
        ("evidence_coverage.scored", "kept"),
    ]
    (letter,) = store.dead_letters()
    assert (letter.error, letter.task_id, letter.position) == (LIMIT_REASON, "task-1", 1)
    assert store.history(hash_of(second)) is None


def test_a_message_recorded_under_another_task_id_is_still_poison_past_the_limit(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """The rule asks for this delivery's own write (task ID and position), not the input
    hash: the same inputs recorded by another task do not make this one a replay."""
    message = message_dict()
    run(score, message, task_id="other")
    past_the_limit(store)

    _, logs = delivered(score, message, redelivered=True)

    assert [(e["event"], e["reason"]) for e in logs] == [
        ("evidence_coverage.rejected", LIMIT_REASON)
    ]


def test_recorded_tells_each_body_s_write_apart(
    message_dict: MessageFactory, runtime: Service, store: FlakyStore
) -> None:
    """True only for a body whose task ID and position the store holds under its hash; a
    body that cannot be admitted or has no task ID is never recorded."""
    message = message_dict()
    run(score, message)

    assert runtime.recorded(
        [
            (message, Delivery(task_id="task-1", position=0)),
            (message, Delivery(task_id="task-1", position=1)),
            (message, Delivery(task_id="task-2", position=0)),
            ({"case_id": "bad"}, Delivery(task_id="task-1", position=0)),
            (message, Delivery()),
        ]
    ) == [True, False, False, False, False]


def test_past_the_limit_a_store_that_cannot_answer_hands_the_message_back(
    message_dict: MessageFactory, store: FlakyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No answer is not "never recorded": the message goes back unacknowledged, no letter."""
    message = message_dict()
    run(score, message)
    past_the_limit(store)

    def away(writes: object) -> list[bool]:
        raise TransientError("Redis unreachable: connection refused")

    monkeypatch.setattr(store, "recorded_writes", away)

    result, logs = delivered(score, message, redelivered=True)

    assert (type(result).__name__, result.requeue) == ("Reject", True)
    assert [e["event"] for e in logs] == ["evidence_coverage.requeued"]
    assert store.dead_letters() == []
