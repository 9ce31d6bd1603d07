"""Find published messages that were never recorded, and send them again (the ledger's use).

`evidence-worker reconcile` and the beat's reconcile task both start here. An entry still open
after `older_than` is a message lost between the publisher and the store, or one still
waiting in a queue longer than that: `older_than` must be longer than the queue's longest
wait, or a republished copy of a waiting message lands as a hit (harmless, never a conflict:
same inputs, same outcome).

A copy's task id is derived from the original's write id and how many times the message was
sent again before: two runs that send the same entry at once send the same write, which the
store records once. The beat's task (heal()) also gives up on a message after
EVIDENCE_MAX_REPUBLISHES copies went unrecorded: a dead letter, with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING, Protocol

from worker.constants import SCORE
from worker.stores.contract import DeadLetter, Ledger, LedgerEntry
from worker.upstream.publishing import NOTE_CHUNK, Outgoing, as_sent, send_noted

if TYPE_CHECKING:
    from celery import Celery

# uuid5's namespace for the task ids of republished copies: any fixed UUID, this one drawn once.
REPUBLISH_NAMESPACE = uuid.UUID("0d6f9a52-8c1e-4b7a-b3f4-2e95c1a7d460")
REPUBLISH_TASK_PREFIX = "republish-"


def cutoff(older_than: timedelta, *, now: datetime) -> datetime:
    """The time, on the store's clock (`now`: Ledger.ledger_now()), before which an entry
    noted and still open counts as unrecorded."""
    return now - older_than


def again(entry: LedgerEntry, *, max_message_bytes: int, now: datetime) -> Outgoing:
    """A new score task for an unrecorded message: its body under republish_task_id(), with
    its own ledger entry (so a republished copy that is lost again is found again), which
    counts one more republish."""
    task_id = republish_task_id(entry)
    update = {
        "task_id": task_id,
        "position": 0,
        "published_at": now,
        "republished": entry.republished + 1,
    }
    copy = entry.model_copy(update=update)
    payload = as_sent(entry.body, max_message_bytes=max_message_bytes)
    return Outgoing(task_id, SCORE, payload, [copy])


def republish_task_id(entry: LedgerEntry) -> str:
    """The task id of the copy sent for `entry`, the same whoever sends it: two reconcile runs
    racing over one entry send one write, recorded once."""
    name = f"{entry.write_id}#{entry.republished + 1}"
    return f"{REPUBLISH_TASK_PREFIX}{uuid.uuid5(REPUBLISH_NAMESPACE, name)}"


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


class HealingLedger(Ledger, Protocol):
    """What heal() needs of the store: the ledger, and dead letters (which close entries)."""

    def dead_letter(self, *letters: DeadLetter) -> None: ...


@dataclass
class Healed:
    """What one heal() run did: case IDs sent again, and those dead-lettered at the limit."""

    republished: list[str] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)


def limit_reason(republished: int, limit: int) -> str:
    """A dead letter's reason for a message whose copies were never recorded."""
    return (
        f"republished {republished} times without a record (limit EVIDENCE_MAX_REPUBLISHES={limit})"
    )


def heal(
    entries: Iterable[LedgerEntry],
    *,
    app: Celery,
    queue: str,
    store: HealingLedger,
    max_message_bytes: int,
    max_republishes: int,
    now: datetime,
) -> Healed:
    """The beat's repair: send each entry's message again through republish(), unless it was
    republished `max_republishes` times already; that one is dead-lettered with the reason
    (its letter closes its entry, so no run sees it again)."""
    healed = Healed()

    def under_limit() -> Iterator[LedgerEntry]:
        spent: list[LedgerEntry] = []
        for entry in entries:
            if entry.republished < max_republishes:
                yield entry
                continue
            spent.append(entry)
            if len(spent) == NOTE_CHUNK:
                _give_up(store, spent, limit=max_republishes, now=now, healed=healed)
                spent = []
        _give_up(store, spent, limit=max_republishes, now=now, healed=healed)

    republish(
        under_limit(),
        app=app,
        queue=queue,
        ledger=store,
        max_message_bytes=max_message_bytes,
        on_sent=lambda entry, _: healed.republished.append(entry.case_id),
    )
    return healed


def _give_up(
    store: HealingLedger, spent: Sequence[LedgerEntry], *, limit: int, now: datetime, healed: Healed
) -> None:
    if not spent:
        return
    store.dead_letter(
        *(
            DeadLetter(
                received_at=now,
                error=limit_reason(entry.republished, limit),
                body=entry.body,
                task_id=entry.task_id,
                position=entry.position,
            )
            for entry in spent
        )
    )
    healed.dead_lettered += [entry.case_id for entry in spent]


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
