"""Send AttributionResults to the queue, validated first: a bad line never reaches a worker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from worker.constants import SCORE, SCORE_BATCH
from worker.errors import InputError
from worker.pipeline import parse_message


@dataclass
class Published:
    """What a publish run did: messages and tasks sent, lines rejected (line, reason)."""

    messages: int = 0
    tasks: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)


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
    pending: list[dict[str, Any]] = []
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
            pending.append(json.loads(body))
            if len(pending) >= batch_size:
                flush()
        flush()
    return result
