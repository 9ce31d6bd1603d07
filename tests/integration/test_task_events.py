"""Celery task events of a real worker run with -E (what Flower shows): a message is named by
its case ID, never by its answer, contexts or prompt, whoever published it."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from contracts import AttributionResult
from tests.integration import worker_harness
from worker.constants import SCORE
from worker.upstream.publishing import outgoing, send

pytestmark = pytest.mark.integration

start_worker = worker_harness.start_worker
queue = worker_harness.queue
publisher = worker_harness.publisher

Event = dict[str, Any]
EVENT_TIMEOUT_SECONDS = 60.0


class EventLog:
    """Every event on the broker's event exchange while it runs, in arrival order."""

    def __init__(self, app: Celery) -> None:
        self.events: list[Event] = []
        self._connection = app.connection_for_read()
        self._receiver = app.events.Receiver(self._connection, handlers={"*": self.events.append})
        self._thread = threading.Thread(target=self._capture, daemon=True)
        self._app = app

    def _capture(self) -> None:
        self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def start(self) -> None:
        """Capture, and return once the receiver hears an event sent after it started (on
        Redis the event exchange is a pub/sub channel: nothing earlier reaches it)."""
        self._thread.start()
        probe = f"probe-{uuid.uuid4().hex}"
        with self._app.events.default_dispatcher() as dispatcher:

            def heard() -> bool:
                dispatcher.send("worker-probe", probe=probe)
                return any(event.get("probe") == probe for event in self.events)

            self.wait(heard, what="the receiver to hear its own probe")

    def wait(self, condition: Callable[[], bool], *, what: str) -> None:
        deadline = time.monotonic() + EVENT_TIMEOUT_SECONDS
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}: {self.events[-5:]}")
            time.sleep(0.1)

    def of_task(self, task_id: str) -> dict[str, Event]:
        """The task's events by type."""
        return {event["type"]: event for event in self.events if event.get("uuid") == task_id}

    def stop(self) -> None:
        self._receiver.should_stop = True
        self._thread.join(timeout=10)
        self._connection.close()


@pytest.fixture
def event_log(publisher: Callable[..., Celery]) -> Iterator[EventLog]:
    log = EventLog(publisher())
    log.start()
    yield log
    log.stop()


def send_with_celery_s_repr(app: Celery, queue: str, message: dict[str, Any]) -> str:
    """A foreign Python publisher: plain send_task, whose argsrepr is Celery's repr of the
    message."""
    return str(app.send_task(SCORE, args=[message], queue=queue).id)


def send_without_argsrepr(app: Celery, queue: str, message: dict[str, Any]) -> str:
    """A foreign publisher that writes Celery's protocol 2 headers but no argsrepr or
    kwargsrepr."""
    task_id = str(uuid.uuid4())
    envelope = app.amqp.create_task_message(task_id, SCORE, [message], {})
    headers = {k: v for k, v in envelope.headers.items() if k not in {"argsrepr", "kwargsrepr"}}
    with app.producer_or_acquire() as producer:
        producer.publish(
            envelope.body,
            exchange="",
            routing_key=queue,
            headers=headers,
            serializer="json",
            **envelope.properties,
        )
    return task_id


def raw_texts(message: dict[str, Any]) -> list[str]:
    """The message's text that must never leave the store."""
    return [
        message["answer"],
        message["grader"]["prompt"],
        *(context["text"] for context in message["contexts"]),
    ]


def wait_until_done(event_log: EventLog, task_id: str) -> dict[str, Event]:
    event_log.wait(
        lambda: "task-succeeded" in event_log.of_task(task_id), what=f"task {task_id} to succeed"
    )
    return event_log.of_task(task_id)


FOREIGN_PUBLISHERS = {
    "celery-s-repr": send_with_celery_s_repr,
    "no-argsrepr": send_without_argsrepr,
}


def test_every_publisher_s_message_is_named_by_case_id_in_events(
    start_worker: Callable[..., worker_harness.Worker],
    queue: str,
    publisher: Callable[..., Celery],
    event_log: EventLog,
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """One worker, three publishers (one worker start where each had its own, for the same
    events). A foreign one's message, with Celery's repr or no argsrepr at all: task-received
    carries `case_id=…` as its args, and no event of the task carries the answer, a context
    or the grader's prompt. What `publish` and the client write (case ID and input hash)
    reaches the events as is."""
    worker = start_worker(queue, options=["-E"])
    worker.wait_ready()

    for number, (name, send_foreign) in enumerate(FOREIGN_PUBLISHERS.items(), start=1):
        message = message_dict(case_id=f"foreign-{number}")

        task_id = send_foreign(publisher(), queue, message)
        events = wait_until_done(event_log, task_id)

        assert (events["task-received"]["args"], events["task-received"]["kwargs"]) == (
            f"case_id=foreign-{number}",
            "{}",
        ), name
        assert {"task-received", "task-started", "task-succeeded"} <= set(events), name
        seen = json.dumps(list(events.values()))
        assert [text for text in raw_texts(message) if text in seen] == [], name

    model = AttributionResult.model_validate(message_dict(case_id="ours-1"))
    task = outgoing(
        [(model, model.model_dump_json(exclude_unset=True))],
        batch=False,
        max_message_bytes=1_048_576,
        now=datetime.now(UTC),
    )

    send(
        publisher(),
        task.task,
        task.payload,
        queue=queue,
        task_id=task.task_id,
        argsrepr=task.argsrepr,
    )
    events = wait_until_done(event_log, task.task_id)

    assert events["task-received"]["args"] == task.argsrepr
    assert task.argsrepr.startswith("case_id=ours-1 input_hash=")


def test_inspect_active_shows_a_foreign_message_by_case_id(
    start_worker: Callable[..., worker_harness.Worker],
    queue: str,
    publisher: Callable[..., Celery],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """`celery inspect active` (what Flower's worker page calls) reports a running task's
    argsrepr, not its message: the task is held running by a store that does not answer."""
    unreachable = f"redis://127.0.0.1:{worker_harness.free_port()}/0"
    worker = start_worker(queue, store_url=unreachable)
    worker.wait_ready()
    app = publisher()
    message = message_dict(case_id="foreign-2")
    task_id = send_with_celery_s_repr(app, queue, message)

    deadline = time.monotonic() + EVENT_TIMEOUT_SECONDS
    active: list[dict[str, Any]] = []
    while not active and time.monotonic() < deadline:
        replies = app.control.inspect(destination=[worker.hostname], timeout=2).active() or {}
        active = [task for task in replies.get(worker.hostname, []) if task["id"] == task_id]

    assert [(task["args"], task["kwargs"]) for task in active] == [("case_id=foreign-2", "{}")]
    assert [text for text in raw_texts(message) if text in json.dumps(active)] == []
