"""Find published messages that were never recorded, and send them again (the ledger's use).

`evidence-worker reconcile` and the beat's reconcile task both start here. An entry still open
after `older_than` is a message lost between the publisher and the store, or one still
waiting in a queue longer than that: `older_than` must be longer than the queue's longest
wait, or a republished copy of a waiting message lands as a hit (harmless, never a conflict:
same inputs, same outcome).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING

from worker.constants import SCORE
from worker.stores.ledger import Ledger, LedgerEntry
from worker.upstream.publishing import NOTE_CHUNK, Outgoing, as_sent, new_task_id, send_noted

if TYPE_CHECKING:
    from celery import Celery


def cutoff(older_than: timedelta, *, now: datetime) -> datetime:
    """The time, on the store's clock (`now`: Ledger.ledger_now()), before which an entry
    noted and still open counts as unrecorded."""
    return now - older_than


def again(entry: LedgerEntry, *, max_message_bytes: int, now: datetime) -> Outgoing:
    """A new score task for an unrecorded message: its body under a new task id, with its
    own ledger entry (so a republished copy that is lost again is found again)."""
    task_id = new_task_id()
    copy = entry.model_copy(update={"task_id": task_id, "position": 0, "published_at": now})
    payload = as_sent(entry.body, max_message_bytes=max_message_bytes)
    return Outgoing(task_id, SCORE, payload, [copy])


def republish(
    entries: Iterable[LedgerEntry],
    *,
    app: Celery,
    queue: str,
    ledger: Ledger,
    max_message_bytes: int,
    on_sent: Callable[[LedgerEntry, str], None] = lambda *_: None,
) -> int:
    """Send each entry's message again, a chunk at a time: note the copies, send them, then
    close the originals of the copies the broker took, also when a send fails (a crash in
    between leaves both open: the next run sends the original once more, which lands as a
    hit). Returns how many were sent."""
    sent = 0
    iterator: Iterator[LedgerEntry] = iter(entries)
    with app.producer_or_acquire() as producer:
        while chunk := list(islice(iterator, NOTE_CHUNK)):
            now = datetime.now(UTC)
            tasks = [again(entry, max_message_bytes=max_message_bytes, now=now) for entry in chunk]
            taken: list[Outgoing] = []
            try:
                send_noted(
                    app, tasks, queue=queue, ledger=ledger, producer=producer, on_sent=taken.append
                )
            finally:  # the originals of the copies the broker took, and only those
                if taken:
                    ledger.close_entries([entry.write_id for entry in chunk[: len(taken)]])
                for entry, task in zip(chunk, taken, strict=False):
                    on_sent(entry, task.task_id)
                sent += len(taken)
    return sent


def as_line(entry: LedgerEntry, *, now: datetime, republished_as: str | None) -> dict[str, object]:
    """The JSON line `reconcile` prints for an unrecorded message (never its body)."""
    line: dict[str, object] = {
        "event": "evidence_coverage.unrecorded",
        "case_id": entry.case_id,
        "input_hash": entry.input_hash,
        "task_id": entry.task_id,
        "position": entry.position,
        "published_at": entry.published_at.isoformat(),  # by the publisher's clock
        # By the store's clock (`now` is too): how long ago the store noted it.
        "age_seconds": round((now - (entry.noted_at or entry.published_at)).total_seconds(), 3),
    }
    if republished_as is not None:
        line["republished_as"] = republished_as
    return line
