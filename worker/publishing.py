"""Send AttributionResults to the queue, validated first: a bad line never reaches a worker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.constants import SCORE, SCORE_BATCH
from worker.errors import InputError
from worker.intake import parse_message

if TYPE_CHECKING:
    from celery import Celery
    from kombu import Producer

# How long a send waits for RabbitMQ's publisher confirm before it fails: a broker that
# stopped answering must not hang a publisher. Redis has no confirms and ignores it.
CONFIRM_TIMEOUT_SECONDS = 10.0


@dataclass
class Published:
    """What a publish run did: messages and tasks sent, lines rejected (line, reason)."""

    messages: int = 0
    tasks: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)


def as_sent(text: str, *, max_message_bytes: int) -> Any:
    """What goes on the wire for a validated message: its JSON text, exactly as given.

    The tasks take a message as an object or as its JSON text. As text, Celery's main process
    decodes and pickles one string instead of a dict tree, and the pool child validates it
    with pydantic's JSON parser (the parser that validated it here). The transport's JSON
    escapes the text's quotes and backslashes once more; a message whose escaped text would
    be over the message limit (a large one, dense with quotes) is sent as the decoded object
    instead, so the worker's size check (limit + envelope) never refuses a message that was
    accepted here.
    """
    if len(json.dumps(text)) <= max_message_bytes:  # ASCII-escaped, as kombu's JSON is
        return text
    return json.loads(text)


def send(
    app: Celery, task: str, payload: Any, *, queue: str, producer: Producer | None = None
) -> str:
    """Send one task and return its id once the broker has taken it.

    On RabbitMQ (publisher confirms, worker/app.py) that means confirmed: a message the
    broker refuses (a nack: a full queue, a disk alarm) or cannot route to any queue
    (mandatory: the queue was deleted after it was declared) raises kombu's
    OperationalError naming the task, instead of being dropped without a word.
    """
    from amqp.exceptions import ChannelError, MessageNacked
    from kombu.exceptions import OperationalError

    task_id = str(uuid.uuid4())
    try:
        app.send_task(
            task,
            args=[payload],
            queue=queue,
            producer=producer,
            task_id=task_id,
            mandatory=True,
            confirm_timeout=CONFIRM_TIMEOUT_SECONDS,
        )
    except OperationalError as error:
        if isinstance(error.__cause__, MessageNacked):
            raise OperationalError(
                f"the broker refused task {task_id} for queue {queue} (basic.nack): not queued"
            ) from error
        raise
    except ChannelError as error:  # basic.return of a mandatory message: no queue took it
        raise OperationalError(
            f"no queue took task {task_id} for queue {queue} ({error.reply_text}): not queued"
        ) from error
    return task_id


def publish_lines(
    lines: Iterable[tuple[int, bytes]],
    *,
    app: Celery,
    queue: str,
    batch_size: int = 1,
    max_message_bytes: int,
    on_progress: Callable[[int], None] = lambda _: None,
) -> Published:
    """Validate each line, then send it alone (score) or in lists of batch_size (score_batch)."""
    result = Published()
    pending: list[Any] = []
    with app.producer_or_acquire() as producer:

        def flush() -> None:
            if not pending:
                return
            if batch_size == 1:
                send(app, SCORE, pending[0], queue=queue, producer=producer)
            else:
                send(app, SCORE_BATCH, list(pending), queue=queue, producer=producer)
            result.messages += len(pending)
            result.tasks += 1
            pending.clear()
            on_progress(result.messages)

        for number, body in lines:
            try:
                parse_message(body, max_bytes=max_message_bytes)
            except InputError as error:
                result.rejected.append((number, str(error)))
                continue
            # parse_message has rejected anything that is not UTF-8
            pending.append(as_sent(body.decode("utf-8"), max_message_bytes=max_message_bytes))
            if len(pending) >= batch_size:
                flush()
        flush()
    return result
