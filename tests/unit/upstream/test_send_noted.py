"""send_noted publishes in the ledger only what the broker took: it notes every message unsent,
sends, then confirms the notes of the tasks the broker took; a failed note or send leaves
unconfirmed notes, which nothing lists, and a failed confirmation says the messages went."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from tests.conftest import FIXED_NOW
from worker.errors import SentUnconfirmed, TransientError
from worker.stores.contract import LedgerEntry
from worker.upstream.publishing import Outgoing, send_noted
from worker.upstream.reconcile import republish

NOW = datetime(2026, 12, 1, tzinfo=UTC)


class Broker:
    """send_task of a Celery app that takes `takes` tasks, then refuses every one."""

    def __init__(self, takes: int) -> None:
        self.takes = takes
        self.sent: list[str] = []

    def send_task(self, name: str, **options: Any) -> None:
        if len(self.sent) >= self.takes:
            raise OperationalError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
        self.sent.append(options["task_id"])


class Ledger:
    """The ledger's writes, kept in memory: notes not sent yet, and open (published) entries,
    by write id."""

    def __init__(self, *, notes: bool = True, confirms: bool = True) -> None:
        self.unsent: dict[str, LedgerEntry] = {}
        self.open: dict[str, LedgerEntry] = {}
        self.notes = notes
        self.confirms = confirms

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        if not self.notes:
            raise TransientError("the write reached 0 of 1 replica in 200 ms")
        for entry in entries:
            (self.open if sent else self.unsent)[entry.write_id] = entry

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        if not self.confirms:
            raise TransientError("Redis at 127.0.0.1:6379 did not answer")
        for write_id in write_ids:
            if write_id in self.unsent:
                self.open[write_id] = self.unsent.pop(write_id)

    def close_entries(self, write_ids: Sequence[str]) -> None:
        for write_id in write_ids:
            self.open.pop(write_id, None)
            self.unsent.pop(write_id, None)

    def ledger_now(self) -> datetime:
        return FIXED_NOW

    def unrecorded(self, *, published_before: datetime) -> Iterator[LedgerEntry]:
        return iter(self.open.values())

    def count_unrecorded(self, *, published_before: datetime) -> int:
        return len(self.open)


def tasks(count: int, per_task: int = 2) -> list[Outgoing]:
    return [
        Outgoing(
            f"task-{n}",
            "evidence_coverage.score_batch",
            ["{}"] * per_task,
            [
                LedgerEntry(
                    task_id=f"task-{n}",
                    position=position,
                    case_id=f"case-{n}-{position}",
                    input_hash="0" * 64,
                    published_at=NOW,
                    body="{}",
                )
                for position in range(per_task)
            ],
        )
        for n in range(count)
    ]


def test_a_failed_send_publishes_the_notes_of_the_tasks_the_broker_took_only() -> None:
    """Two of five tasks taken: their entries are confirmed (listed), the failed task's and
    those after it stay unsent notes, which nothing lists nor sends."""
    broker, ledger = Broker(takes=2), Ledger()
    taken: list[Outgoing] = []

    with pytest.raises(OperationalError, match="Connection refused"):
        send_noted(cast(Celery, broker), tasks(5), queue="q", ledger=ledger, on_sent=taken.append)

    assert broker.sent == ["task-0", "task-1"]
    assert [task.task_id for task in taken] == ["task-0", "task-1"]
    assert sorted(ledger.open) == ["task-0:0", "task-0:1", "task-1:0", "task-1:1"]
    assert sorted(ledger.unsent) == [f"task-{n}:{p}" for n in (2, 3, 4) for p in (0, 1)]


def test_every_entry_is_published_when_every_send_is_taken() -> None:
    broker, ledger = Broker(takes=3), Ledger()

    send_noted(cast(Celery, broker), tasks(3), queue="q", ledger=ledger)

    assert (len(ledger.open), ledger.unsent) == (6, {})


def test_a_note_the_store_cannot_confirm_sends_nothing() -> None:
    """The note's write (or its replicas' wait) failed: no task goes, and no entry is open."""
    broker, ledger = Broker(takes=3), Ledger(notes=False)

    with pytest.raises(TransientError, match="0 of 1 replica"):
        send_noted(cast(Celery, broker), tasks(3), queue="q", ledger=ledger)

    assert (broker.sent, ledger.open) == ([], {})


def test_a_confirmation_the_store_cannot_write_says_the_messages_went() -> None:
    """Every task taken, the confirmation failed: SentUnconfirmed, counting the messages
    sent, after on_sent of each task (the caller counts them sent)."""
    broker, ledger = Broker(takes=3), Ledger(confirms=False)
    taken: list[Outgoing] = []

    with pytest.raises(SentUnconfirmed) as raised:
        send_noted(cast(Celery, broker), tasks(3), queue="q", ledger=ledger, on_sent=taken.append)

    assert str(raised.value) == (
        "the broker took 6 messages, but the ledger could not confirm them (Redis at "
        "127.0.0.1:6379 did not answer): if the broker loses them, `reconcile` will not list "
        "them"
    )
    assert (raised.value.sent, len(taken), broker.sent) == (6, 3, ["task-0", "task-1", "task-2"])
    assert ledger.open == {}


class Producing(Broker):
    """A Broker that also lends a producer, as reconcile's republish asks for one."""

    def producer_or_acquire(self) -> Any:
        return contextlib.nullcontext(None)


def test_republish_closes_the_originals_of_the_copies_sent_before_a_failure_only() -> None:
    broker, ledger = Producing(takes=2), Ledger()
    told: list[tuple[str, str]] = []
    originals = [entry for task in tasks(2, per_task=2) for entry in task.entries]
    ledger.note_published(originals)

    with pytest.raises(OperationalError):
        republish(
            originals,
            app=cast(Celery, broker),
            queue="q",
            ledger=ledger,
            max_message_bytes=10_000,
            on_sent=lambda entry, task_id: told.append((entry.write_id, task_id)),
        )

    # Two copies went: their originals are closed and their own entries are open; the
    # failed copy's entry and the one after it are unsent notes, their originals still open.
    assert told == [("task-0:0", broker.sent[0]), ("task-0:1", broker.sent[1])]
    assert sorted(ledger.open) == sorted(
        ["task-1:0", "task-1:1", f"{broker.sent[0]}:0", f"{broker.sent[1]}:0"]
    )
    assert len(ledger.unsent) == 2
