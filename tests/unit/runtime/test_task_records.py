"""The scoring and reconcile tasks' records: what one delivery of a task writes and logs.

Tasks run through `task.run(...)` with a pushed request (task_runs.py) against a process
service on fakeredis with a fixed clock (conftest.py).
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from contracts import AttributionResult, input_hash
from tests.conftest import FIXED_NOW
from tests.factories import ledger_entry
from tests.unit.runtime.task_runs import (
    LATER,
    MAX_DELIVERIES,
    TWO_THIRDS_REASON,
    UNKNOWN_ID_REASON,
    FlakyStore,
    MessageFactory,
    rejected_entry,
    run,
    score,
    score_batch,
    scored_entry,
    without_duration,
)
from worker.pipeline.alert_delivery import AlertSink, WebhookSender
from worker.pipeline.service import Service
from worker.settings import Settings

pytestmark = pytest.mark.usefixtures("runtime", "no_pause")


# Records


def test_a_valid_message_gives_one_scored_record_and_returns_its_summary(
    message_dict: MessageFactory,
) -> None:
    """score: one `scored` record with every field, bound to the task's context."""
    message = message_dict()

    result, logs = run(score, message)

    assert [without_duration(entry) for entry in logs] == [scored_entry(message)]
    assert result == [
        {
            "case_id": "refund-001",
            "input_hash": input_hash(AttributionResult.model_validate(message)),
            "status": "scored",
            "cache": "miss",
        }
    ]


def test_a_metric_invalid_message_is_scored_invalid_never_zero(
    message_dict: MessageFactory,
) -> None:
    """An unknown supported ID: a `scored` record with status invalid, value None, owner data."""
    message = message_dict(required_claim_ids=["c1"], supported_claim_ids=["old-c1"])

    _, logs = run(score, message)

    assert [without_duration(entry) for entry in logs] == [
        scored_entry(
            message,
            value=None,
            reason=UNKNOWN_ID_REASON,
            status="invalid",
            owner="evaluation-data",
        )
    ]


def test_a_message_failing_the_schema_is_rejected_and_dead_lettered_whole(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """No grader: a `rejected` record naming the field, and the message kept in dead letters."""
    message = message_dict()
    del message["grader"]

    result, logs = run(score, message)

    assert [without_duration(entry) for entry in logs] == [
        rejected_entry(
            "schema: grader: Field required",
            case_id="refund-001",
            task_name="evidence_coverage.score",
            retries=0,
            redelivered=False,
        )
    ]
    (letter,) = store.dead_letters()
    assert (letter.error, json.loads(letter.body), letter.task_id, letter.received_at) == (
        "schema: grader: Field required",
        message,
        "task-1",
        FIXED_NOW,
    )
    assert result == [
        {"case_id": "refund-001", "input_hash": None, "status": "invalid", "cache": None}
    ]


def test_a_repeated_message_is_a_hit_carrying_the_first_outcome(
    message_dict: MessageFactory,
) -> None:
    """The same inputs twice: the second record is a `hit` with the observed outcome beside it."""
    message = message_dict()
    run(score, message, task_id="task-0")

    _, logs = run(score, message)

    assert [without_duration(entry) for entry in logs] == [
        scored_entry(message, cache="hit", observed_value=2 / 3, observed_reason=TWO_THIRDS_REASON)
    ]


def test_score_batch_records_each_message_in_order(message_dict: MessageFactory) -> None:
    """A batch of a valid, a bad and a repeated message: three records, in input order."""
    valid = message_dict()
    bad = {"case_id": "broken"}

    result, logs = run(score_batch, [valid, bad, valid])

    assert [(entry["event"], entry["case_id"], entry["cache"]) for entry in logs] == [
        ("evidence_coverage.scored", "refund-001", "miss"),
        ("evidence_coverage.rejected", "broken", None),
        ("evidence_coverage.scored", "refund-001", "hit"),
    ]
    assert [summary["status"] for summary in result] == ["scored", "invalid", "scored"]


def test_a_batch_closes_each_message_s_ledger_entry_by_its_position(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """The records close positions 0 and 2, the dead letter of the bad message position 1."""
    bodies = [message_dict(case_id="a"), {"case_id": "broken"}, message_dict(case_id="c")]
    store.note_published(
        [
            ledger_entry("task-1", n, body=json.dumps(body))
            for n, body in enumerate([*bodies, message_dict(case_id="noted, never sent")])
        ]
    )

    run(score_batch, bodies)

    assert [(e.task_id, e.position) for e in store.unrecorded(published_before=LATER)] == [
        ("task-1", 3)  # noted, never delivered: the one a broker lost
    ]
    (letter,) = store.dead_letters()
    assert (letter.task_id, letter.position) == ("task-1", 1)


def test_a_poison_task_s_dead_letters_close_every_entry_of_it(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    bodies = [message_dict(case_id="a"), message_dict(case_id="b")]
    for _ in range(MAX_DELIVERIES):  # deliveries that never completed (the worker died)
        store.count_delivery("poison")
    store.note_published([ledger_entry("poison", n) for n in range(2)])

    _, logs = run(score_batch, bodies, task_id="poison", redelivered=True)

    assert [entry["event"] for entry in logs] == ["evidence_coverage.rejected"] * 2
    assert list(store.unrecorded(published_before=LATER)) == []
    assert [(letter.task_id, letter.position) for letter in store.dead_letters()] == [
        ("poison", 0),
        ("poison", 1),
    ]


def test_score_batch_rejects_an_argument_that_is_not_a_list(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """score_batch with one message instead of a list: one `rejected` record (with the task's
    context, as every record of a task), one dead letter."""
    message = message_dict()

    _, logs = run(score_batch, message)

    assert [without_duration(entry) for entry in logs] == [
        rejected_entry(
            "score_batch takes a list of messages, got dict",
            case_id="refund-001",
            task_name="evidence_coverage.score_batch",
            retries=0,
            redelivered=False,
        )
    ]
    (letter,) = store.dead_letters()
    assert (letter.error, json.loads(letter.body)) == (
        "score_batch takes a list of messages, got dict",
        message,
    )


def test_with_log_raw_text_a_record_line_carries_the_text_redacted_and_cut(
    message_dict: MessageFactory, runtime: Service
) -> None:
    """EVIDENCE_LOG_RAW_TEXT: the answer and each context's text on the record line, e-mail,
    card and phone numbers replaced, cut to EVIDENCE_EXCERPT_MAX_CHARS; a rejected body on
    the same batch carries none, and the raw field names stay blanked."""
    runtime.settings = Settings(log_raw_text=True, excerpt_max_chars=24)
    message = message_dict(answer="Mail ann@example.com or call +44 20 7946 0958 today.")
    message["contexts"][0]["text"] = "Refunds go to the card 4111 1111 1111 1111 within 30 days."

    _, logs = run(score_batch, [message, {"case_id": "broken"}])

    scored, rejected = logs
    assert scored["answer_redacted"] == "Mail [email] or call [ph"
    assert scored["contexts_redacted"][0] == {
        "document_id": message["contexts"][0]["document_id"],
        "text": "Refunds go to the card [",
    }
    assert len(scored["contexts_redacted"]) == len(message["contexts"])
    assert "answer_redacted" not in rejected
    assert "answer" not in scored
    assert "contexts" not in scored


def test_without_log_raw_text_a_record_line_carries_no_text(message_dict: MessageFactory) -> None:
    _, logs = run(score, message_dict())

    assert not {"answer", "contexts", "answer_redacted", "contexts_redacted"} & set(logs[0])


# The redelivery bound


def test_a_message_redelivered_more_than_max_deliveries_times_is_rejected(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """Redelivery number MAX_DELIVERIES + 1 of a task id whose deliveries never completed (the
    worker died in each) is dead-lettered, not scored again."""
    message = message_dict()
    for _ in range(MAX_DELIVERIES):
        store.count_delivery("task-1")

    _, logs = run(score, message, redelivered=True)

    reason = (
        f"delivered {MAX_DELIVERIES + 1} times without completing "
        f"(limit EVIDENCE_MAX_DELIVERIES={MAX_DELIVERIES})"
    )
    assert [without_duration(entry) for entry in logs] == [
        rejected_entry(
            reason,
            case_id="refund-001",
            task_name="evidence_coverage.score",
            retries=0,
            redelivered=True,
        )
    ]
    assert [letter.error for letter in store.dead_letters()] == [reason]


def test_duplicates_of_a_recorded_message_are_replays_however_many_come(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """A completed delivery's count goes: ten flagged redeliveries in a row are each a replay
    of the one write (the original cache, `redelivered: true`), none a rejection, no letter."""
    message = message_dict()
    run(score, message)

    lines = [run(score, message, redelivered=True)[1][0] for _ in range(MAX_DELIVERIES * 5)]

    assert {(line["event"], line["cache"], line["redelivered"]) for line in lines} == {
        ("evidence_coverage.scored", "miss", True)
    }
    assert store.dead_letters() == []
    assert store.count_delivery("task-1") == 1  # counting starts over


def test_an_unflagged_duplicate_says_it_is_a_redelivery(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """The broker's flag may be missing on a duplicate: the store knows its write id."""
    message = message_dict()

    lines = [run(score, message)[1][0] for _ in range(3)]

    assert [(line["cache"], line["redelivered"]) for line in lines] == [
        ("miss", False),
        ("miss", True),
        ("miss", True),
    ]


def test_first_deliveries_never_count_towards_the_bound(message_dict: MessageFactory) -> None:
    """Only redeliveries are counted: the same task id delivered fresh stays scored."""
    message = message_dict()

    events = [run(score, message)[1][0]["event"] for _ in range(MAX_DELIVERIES + 2)]

    assert events == ["evidence_coverage.scored"] * (MAX_DELIVERIES + 2)


def test_redeliveries_are_counted_per_task_id(
    message_dict: MessageFactory, store: FlakyStore
) -> None:
    """Another task id carrying the same message starts its own count."""
    message = message_dict()
    run(score, message, task_id="task-a")
    for _ in range(MAX_DELIVERIES):  # deliveries of task-a that never completed
        store.count_delivery("task-a")

    _, logs = run(score, message, task_id="task-b", redelivered=True)

    assert [(entry["event"], entry["cache"]) for entry in logs] == [
        ("evidence_coverage.scored", "hit")
    ]


# Excerpts


class FakeWebhook:
    """Keeps what the alert sink would POST."""

    def __init__(self, sent: list[dict[str, Any]]) -> None:
        self.sent = sent

    def send(self, payload: dict[str, Any]) -> None:
        self.sent.append(payload)

    def close(self) -> None:
        pass


def test_kept_excerpts_are_redacted_in_the_store_and_never_logged(
    message_dict: MessageFactory, runtime: Service, store: FlakyStore
) -> None:
    """EVIDENCE_KEEP_EXCERPTS=true: each stored attempt keeps its citations' spans, redacted
    and cut; no record line and no alert line (nor the webhook's payload) carries them."""
    runtime.settings = Settings(keep_excerpts=True, excerpt_max_chars=24)
    answer = "Mail ann@example.com or call +1 555 123 4567 within 30 days."
    citations = [
        {
            "claim_id": "refund-window",
            "document_id": "policy/returns#window",
            "answer_span": [0, 60],
        },
        {"claim_id": "support-channel", "document_id": "help/contact#chat", "answer_span": [9, 3]},
    ]
    first = message_dict(answer=answer, citations=citations)
    twin = {**first, "supported_claim_ids": ["refund-window"]}  # same inputs, another outcome
    sent: list[dict[str, Any]] = []
    runtime.alerts = AlertSink(webhook=cast("WebhookSender", FakeWebhook(sent)))

    _, logs = run(score_batch, [first, twin])

    history = store.history(input_hash(AttributionResult.model_validate(first)))
    assert history is not None
    kept = [history.first, history.attempts[1]]
    assert [[c.excerpt for c in attempt.citations or []] for attempt in kept] == [
        ["Mail [email] or call [ph", None],  # cut at 24 characters; the span [9, 3) is invalid
        ["Mail [email] or call [ph", None],
    ]
    assert [entry["event"] for entry in logs] == [
        "evidence_coverage.scored",
        "evidence_coverage.scored",
        "evidence_coverage.nondeterminism",
    ]
    for text in (json.dumps(logs, default=str), json.dumps(sent)):
        assert "excerpt" not in text
        assert "Mail" not in text
    assert logs[2]["first"]["citations"][0] == {
        "claim_id": "refund-window",
        "document_id": "policy/returns#window",
        "answer_span": [0, 60],
    }
