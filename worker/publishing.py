"""Send AttributionResults to the queue, validated first: a bad line never reaches a worker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.constants import SCORE, SCORE_BATCH
from worker.errors import InputError
from worker.intake import parse_message

if TYPE_CHECKING:
    from celery import Celery


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
                app.send_task(SCORE, args=[pending[0]], queue=queue, producer=producer)
            else:
                app.send_task(SCORE_BATCH, args=[list(pending)], queue=queue, producer=producer)
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
