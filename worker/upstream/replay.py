"""Send a worker's dead letters back to the broker through the publish ledger, and wait for
the worker to close their entries (`evidence-worker dead-letters replay`).

A replayed message is noted in the ledger under its replay's write id, then sent; the
worker's record of it, or its dead letter if it is rejected again, closes that entry in the
same store call (worker/stores/contract.py). So an entry found closed means the replay is
recorded or dead-lettered anew: only then may its letter go. A replay that dies before that
leaves the letter, and the next replay sends it under the same task id (audit.letters.
replay_task_id): the same write, which the store recognises and records nothing new for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from contracts import AttributionResult
from worker.constants import SCORE
from worker.stores.contract import Ledger
from worker.upstream.publishing import Outgoing, as_sent, ledger_entry, send_noted

if TYPE_CHECKING:
    from celery import Celery

POLL_SECONDS = 0.2


class OpenEntries(Protocol):
    """The one question wait_closed() asks a store (base.LetterBox.still_open)."""

    def still_open(self, write_ids: Sequence[str]) -> set[str]: ...


def replay_task(
    task_id: str, message: AttributionResult, text: str, *, max_message_bytes: int, now: datetime
) -> Outgoing:
    """A score task for one letter's message (validated, with its JSON text), position 0."""
    entry = ledger_entry(task_id, 0, message, text, now=now)
    payload = as_sent(text, max_message_bytes=max_message_bytes)
    return Outgoing(task_id, SCORE, payload, [entry])


def send_replays(app: Celery, tasks: Sequence[Outgoing], *, queue: str, ledger: Ledger) -> None:
    """Note each task's entry, then send it (publishing.send_noted)."""
    with app.producer_or_acquire() as producer:
        send_noted(app, tasks, queue=queue, ledger=ledger, producer=producer)


def wait_closed(
    store: OpenEntries,
    write_ids: Sequence[str],
    *,
    wait_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> set[str]:
    """Poll the ledger until every entry of `write_ids` is closed or `wait_seconds` pass;
    returns the write ids still open (their letters must stay)."""
    deadline = clock() + wait_seconds
    still = store.still_open(write_ids)
    while still and clock() < deadline:
        sleep(POLL_SECONDS)
        still = store.still_open(sorted(still))
    return still
