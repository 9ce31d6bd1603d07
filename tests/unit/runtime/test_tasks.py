"""The Celery tasks without a broker: records, dead letters, redelivery bound, retry options.

Tasks run through `task.run(...)` with a pushed request (or Celery's eager mode for retries)
against a runtime on fakeredis; WebhookSender runs against a local HTTP server.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import fakeredis
import pytest
import redis
import structlog
from celery import Task
from celery.exceptions import Reject
from structlog.testing import capture_logs

from contracts import Attempt, AttributionResult, input_hash
from tests.conftest import FIXED_NOW
from tests.factories import expected_rejected, expected_scored, ledger_entry
from worker.errors import ConfigurationError, TransientError
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.observability.logging import get_logger
from worker.pipeline.alerts import SOURCE_OF_TRUTH, AlertSink, WebhookSender
from worker.pipeline.service import Service
from worker.runtime import tasks
from worker.runtime.celery_app import app, celery_config
from worker.runtime.tasks import reconcile, score, score_batch
from worker.settings import Settings
from worker.stores import DeadLetter, Recorded
from worker.stores.durable import DurableStore
from worker.stores.redis import RedisStore

MessageFactory = Callable[..., dict[str, Any]]
TWO_THIRDS_REASON = "supported=2; required=3; missing=refund-method"
UNKNOWN_ID_REASON = (
    "Error executing metric evidence_coverage: supported_claim_ids contains unknown IDs: old-c1"
)
MAX_DELIVERIES = 2
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
STORE_WINDOW_SECONDS = 30.0
LATER = datetime.now(UTC) + timedelta(hours=1)


class FlakyStore(RedisStore):
    """A Redis store whose first `failures` writes find Redis unreachable, whose writes of an
    input hash in `broken` fail as a corrupt key makes a script fail (a bug to the worker),
    and whose dead letters fail likewise while `broken_letters`."""

    failures = 0
    broken_letters = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.broken: set[str] = set()

    def record_many(
        self,
        items: Sequence[tuple[str, Attempt]],
        *,
        now: datetime,
        write_ids: Sequence[str | None] | None = None,
    ) -> list[Recorded]:
        if self.failures:
            self.failures -= 1
            raise TransientError("Redis unreachable: connection refused")
        if self.broken & {input_hash for input_hash, _ in items}:
            raise redis.ResponseError(WRONGTYPE)
        return super().record_many(items, now=now, write_ids=write_ids)

    def dead_letter(self, *letters: DeadLetter) -> None:
        if self.broken_letters:
            raise redis.ResponseError(WRONGTYPE)
        super().dead_letter(*letters)


@pytest.fixture
def store() -> Iterator[FlakyStore]:
    opened = FlakyStore(fakeredis.FakeRedis(), prefix="unit")
    yield opened
    opened.close()


class FakeTime:
    """A monotonic clock that moves only when the store's backoff sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture(autouse=True)
def runtime(store: FlakyStore, fake_time: FakeTime) -> Iterator[Service]:
    """The tasks' process service, on fakeredis with a fixed clock; reset afterwards. Its
    store waits out an outage for up to STORE_WINDOW_SECONDS of fake time."""
    built = Service(
        settings=Settings(max_deliveries=MAX_DELIVERIES),
        policy=None,
        store=DurableStore(
            store,
            window_seconds=STORE_WINDOW_SECONDS,
            on_wait=lambda error, attempt, delay: get_logger().warning(
                "evidence_coverage.store_unavailable", attempt=attempt
            ),
            sleep=fake_time.sleep,
            clock=lambda: fake_time.now,
            rng=lambda: 0.0,
        ),
        alerts=AlertSink(),
        clock=lambda: FIXED_NOW,
    )
    app.use_service(built)
    yield built
    app.use_service(None)


def run(
    task: Task, argument: Any, *, task_id: str = "task-1", redelivered: bool = False
) -> tuple[Any, list[MutableMapping[str, Any]]]:
    """Run a task's body as the worker would for one delivery; return (result, log entries)."""
    task.push_request(id=task_id, delivery_info={"redelivered": redelivered}, retries=0)
    try:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            result = task.run(argument)
    finally:
        task.pop_request()
    return result, logs


RECORDED_AT = "2026-12-01T12:00:00Z"  # FIXED_NOW as a log line writes it


def without_duration(entry: MutableMapping[str, Any]) -> dict[str, Any]:
    """A log entry minus duration_ms, the one field that depends on the machine."""
    assert entry.get("duration_ms") is None or entry["duration_ms"] >= 0
    return {key: value for key, value in entry.items() if key != "duration_ms"}


def scored_entry(message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The expected log entry of a report-only `scored` record (no policy configured)."""
    return {
        "log_level": "info",
        **expected_scored(message, task_id="task-1", **fields),
        "recorded_at": RECORDED_AT,
        "task_name": "evidence_coverage.score",
        "retries": 0,
        "redelivered": False,
        **fields,
    }


def rejected_entry(reason: str, **fields: Any) -> dict[str, Any]:
    return {
        "log_level": "warning",
        **expected_rejected(reason, task_id="task-1", recorded_at=RECORDED_AT, **fields),
    }


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
    for _ in range(MAX_DELIVERIES):  # scored (their records close the entries noted before)
        run(score_batch, bodies, task_id="poison", redelivered=True)
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
    """Redelivery number MAX_DELIVERIES + 1 of one task id is dead-lettered, not scored again."""
    message = message_dict()
    caches = [run(score, message, redelivered=True)[1][0]["cache"] for _ in range(MAX_DELIVERIES)]

    _, logs = run(score, message, redelivered=True)

    reason = (
        f"delivered {MAX_DELIVERIES + 1} times without completing "
        f"(limit EVIDENCE_MAX_DELIVERIES={MAX_DELIVERIES})"
    )
    # The same task id and position each time: the store recognises its own write (a replay).
    assert caches == ["miss", "miss"]
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


def test_first_deliveries_never_count_towards_the_bound(message_dict: MessageFactory) -> None:
    """Only redeliveries are counted: the same task id delivered fresh stays scored."""
    message = message_dict()

    events = [run(score, message)[1][0]["event"] for _ in range(MAX_DELIVERIES + 2)]

    assert events == ["evidence_coverage.scored"] * (MAX_DELIVERIES + 2)


def test_redeliveries_are_counted_per_task_id(message_dict: MessageFactory) -> None:
    """Another task id carrying the same message starts its own count."""
    message = message_dict()
    for _ in range(MAX_DELIVERIES):
        run(score, message, task_id="task-a", redelivered=True)

    _, logs = run(score, message, task_id="task-b", redelivered=True)

    assert [(entry["event"], entry["cache"]) for entry in logs] == [
        ("evidence_coverage.scored", "hit")
    ]


# A task that fails on a bug: never acknowledged without an outcome


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pause before an unrecordable message goes back, recorded instead of slept."""
    pauses: list[float] = []
    monkeypatch.setattr(tasks, "sleep", pauses.append)
    return pauses


def delivered(
    task: Task, argument: Any, *, redelivered: bool = False
) -> tuple[Any, list[MutableMapping[str, Any]]]:
    """`run` in a worker (not called directly): a Reject is returned, not raised."""
    task.push_request(
        id="task-1",
        delivery_info={"redelivered": redelivered},
        retries=0,
        called_directly=False,
    )
    try:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            try:
                result = task.run(argument)
            except Reject as rejected:
                result = rejected
    finally:
        task.pop_request()
    return result, logs


def hash_of(message: dict[str, Any]) -> str:
    return input_hash(AttributionResult.model_validate(message))


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

    monkeypatch.setattr(app, "service", unbuildable)
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


# Delivery settings and task options (issue 3, deliverable 1)


def test_celery_config_has_the_delivery_settings_for_an_idempotent_task() -> None:
    """Late acks, requeue on worker loss, JSON only, visibility timeout wherever Celery reads it."""
    config = celery_config(Settings(visibility_timeout_seconds=42))

    transport = {
        "visibility_timeout": 42,
        "unacked_restore_interval": 5,
        "unacked_restore_throttle": 1,
        "body_encoding": "utf-8",  # JSON bodies as JSON text on Redis, not base64
        # No wait on a Redis broker is unbounded (worker/runtime/celery_app.py
        # redis_connection_options).
        "socket_timeout": 10.0,
        "socket_connect_timeout": 10.0,
        "socket_keepalive": True,
        "socket_keepalive_options": TCP_KEEPALIVE_OPTIONS,
        "health_check_interval": 10,
    }
    assert {
        key: config[key]
        for key in (
            "task_acks_late",
            "task_reject_on_worker_lost",
            "accept_content",
            "result_accept_content",
            "task_serializer",
            "result_serializer",
            "event_serializer",
            "worker_prefetch_multiplier",
            "broker_transport_options",
            "result_backend_transport_options",
            "worker_cancel_long_running_tasks_on_connection_loss",
            "worker_deduplicate_successful_tasks",
        )
    } == {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "worker_prefetch_multiplier": 4,
        "broker_transport_options": transport,
        "result_backend_transport_options": transport,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_deduplicate_successful_tasks": False,
    }


def test_the_default_visibility_timeout_is_five_minutes() -> None:
    """EVIDENCE_VISIBILITY_TIMEOUT_SECONDS unset: 300 s in broker and result backend options."""
    config = celery_config(Settings())

    assert config["broker_transport_options"]["visibility_timeout"] == 300
    assert config["result_backend_transport_options"]["visibility_timeout"] == 300


def test_the_unacked_restore_sweep_fits_the_redelivery_promise() -> None:
    """kombu's sweep interval times its throttle stays within the promised 30 s after timeout."""
    options = celery_config(Settings())["broker_transport_options"]

    assert options["unacked_restore_interval"] * options["unacked_restore_throttle"] <= 30


@pytest.mark.parametrize("task", [score, score_batch], ids=["score", "score_batch"])
def test_tasks_never_ask_celery_to_retry(task: Task) -> None:
    """No autoretry: Celery's retry publishes a copy and acks the original, which loses the
    message when the broker is the Redis that is down. The store waits out an outage instead."""
    assert getattr(task, "autoretry_for", ()) == ()


@pytest.mark.parametrize("task", [score, score_batch], ids=["score", "score_batch"])
def test_tasks_acknowledge_late_and_are_requeued_when_their_worker_is_lost(task: Task) -> None:
    """The app's late-ack settings reach the registered tasks."""
    assert (task.acks_late, task.reject_on_worker_lost) == (True, True)


@pytest.fixture
def eager() -> Iterator[None]:
    """Celery's eager mode (tasks and their retries run in-process), restored afterwards."""
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


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


# WebhookSender against a local HTTP server


class RecordingHandler(http.server.BaseHTTPRequestHandler):
    """Answers POSTs with the server's next status and keeps each JSON body."""

    def do_POST(self) -> None:  # http.server dispatches on this name
        length = int(self.headers["Content-Length"])
        server: RecordingServer = self.server  # type: ignore[assignment]
        server.bodies.append(json.loads(self.rfile.read(length)))
        status = server.statuses.pop(0) if len(server.statuses) > 1 else server.statuses[0]
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        """Keep the test output quiet."""


class RecordingServer(http.server.ThreadingHTTPServer):
    def __init__(self, statuses: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), RecordingHandler)
        self.statuses = statuses
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/alerts"


@pytest.fixture
def webhook_server() -> Iterator[Callable[..., RecordingServer]]:
    """Factory: a server answering with `statuses` in turn (the last one repeats)."""
    servers: list[RecordingServer] = []

    def start(*statuses: int) -> RecordingServer:
        server = RecordingServer(list(statuses))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


PAYLOAD = {"event": "evidence_coverage.nondeterminism", "input_hash": "a" * 64}


def deliver(url: str, *, retries: int = 3) -> list[MutableMapping[str, Any]]:
    """Send one payload and close (which waits for delivery); return the captured log."""
    with capture_logs() as logs:
        sender = WebhookSender(url, timeout_seconds=2.0, retries=retries)
        sender.send(PAYLOAD)
        sender.close(timeout=10.0)
    return logs


def test_a_webhook_answering_200_gets_one_post_of_the_payload(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """Success on the first try: one POST carrying the alert JSON, no warning."""
    server = webhook_server(200)

    logs = deliver(server.url)

    assert (server.bodies, logs) == ([PAYLOAD], [])


def test_a_webhook_answering_500_is_retried_until_it_succeeds(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """500, 500, then 200: three POSTs and no warning."""
    server = webhook_server(500, 500, 200)

    logs = deliver(server.url)

    assert (server.bodies, logs) == ([PAYLOAD] * 3, [])


def test_a_webhook_that_keeps_failing_is_given_up_after_its_retries(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """Always 500: exactly `retries` POSTs, then one webhook_undelivered warning."""
    server = webhook_server(500)

    logs = deliver(server.url, retries=2)

    assert server.bodies == [PAYLOAD] * 2
    assert logs == [
        {
            "event": "evidence_coverage.webhook_undelivered",
            "log_level": "warning",
            "input_hash": "a" * 64,
            "raised_at": None,
            "cause": "failed",
            "attempts": 2,
            "problem": "HTTP 500",
            "note": SOURCE_OF_TRUTH,
        }
    ]


def test_a_client_error_from_the_webhook_is_not_retried(
    webhook_server: Callable[..., RecordingServer],
) -> None:
    """A 4xx means the request itself is wrong: one POST, no retry, no warning."""
    server = webhook_server(404)

    logs = deliver(server.url)

    assert (server.bodies, logs) == ([PAYLOAD], [])


def test_an_unreachable_webhook_never_raises() -> None:
    """Connection refused: send() and close() return, and the failure is one warning."""
    logs = deliver(f"http://127.0.0.1:{unused_port()}/alerts")

    assert logs == [
        {
            "event": "evidence_coverage.webhook_undelivered",
            "log_level": "warning",
            "input_hash": "a" * 64,
            "raised_at": None,
            "cause": "failed",
            "attempts": 3,
            "problem": "ConnectError",
            "note": SOURCE_OF_TRUTH,
        }
    ]


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


# The beat's reconcile task


def test_reconcile_task_counts_and_names_messages_never_recorded(store: FlakyStore) -> None:
    store.note_published(
        [
            ledger_entry(f"t{n}", age=timedelta(minutes=minutes), case_id=f"lost-{n}")
            for n, minutes in enumerate([30, 20, 1])  # the last is still young
        ]
    )

    result, logs = run(reconcile, 600)

    assert result == {"unrecorded": 2}
    assert logs == [
        {
            "event": "evidence_coverage.unrecorded",
            "log_level": "warning",
            "unrecorded": 2,
            "older_than_seconds": 600,
            "case_ids": ["lost-0", "lost-1"],
            "why": "published and neither recorded nor dead-lettered: lost on the way; "
            "`evidence-worker reconcile --republish` sends them again",
        }
    ]


def test_reconcile_task_with_nothing_unrecorded_logs_info(store: FlakyStore) -> None:
    result, logs = run(reconcile, None)  # the settings' default age

    assert result == {"unrecorded": 0}
    assert logs == [
        {
            "event": "evidence_coverage.reconcile",
            "log_level": "info",
            "unrecorded": 0,
            "older_than_seconds": 600,
        }
    ]


def test_the_beat_schedule_runs_reconcile_every_five_minutes_for_ten_minute_old_entries() -> None:
    assert celery_config(Settings())["beat_schedule"] == {
        "evidence-reconcile": {
            "task": "evidence_coverage.reconcile",
            "schedule": 300.0,
            "kwargs": {"older_than_seconds": 600},
        }
    }
    custom = Settings(reconcile_every_seconds=60, reconcile_older_than_seconds=3600)
    assert celery_config(custom)["beat_schedule"]["evidence-reconcile"]["kwargs"] == {
        "older_than_seconds": 3600
    }


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
