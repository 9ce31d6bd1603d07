"""send_noted keeps in the ledger only what the broker took: a failed send closes the entries
of its task and of every task after it, and says so when the store cannot close them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from tests.conftest import FIXED_NOW
from worker.errors import TransientError
from worker.stores.ledger import LedgerEntry
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
    """The ledger's writes, kept in memory: open entries by write id."""

    def __init__(self, *, closes: bool = True) -> None:
        self.open: dict[str, LedgerEntry] = {}
        self.closes = closes

    def note_published(self, entries: Sequence[LedgerEntry]) -> None:
        self.open.update((entry.write_id, entry) for entry in entries)

    def close_entries(self, write_ids: Sequence[str]) -> None:
        if not self.closes:
            raise TransientError("Redis at 127.0.0.1:6379 did not answer")
        for write_id in write_ids:
            del self.open[write_id]

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


def test_a_failed_send_closes_the_entries_of_its_task_and_every_later_one() -> None:
    broker, ledger = Broker(takes=2), Ledger()
    taken: list[Outgoing] = []

    with pytest.raises(OperationalError, match="Connection refused"):
        send_noted(cast(Celery, broker), tasks(5), queue="q", ledger=ledger, on_sent=taken.append)

    assert broker.sent == ["task-0", "task-1"]
    assert [task.task_id for task in taken] == ["task-0", "task-1"]
    assert sorted(ledger.open) == ["task-0:0", "task-0:1", "task-1:0", "task-1:1"]


def test_every_entry_stays_open_when_every_send_is_taken() -> None:
    broker, ledger = Broker(takes=3), Ledger()

    send_noted(cast(Celery, broker), tasks(3), queue="q", ledger=ledger)

    assert len(ledger.open) == 6


def test_entries_the_store_cannot_close_are_named_beside_the_send_error() -> None:
    broker, ledger = Broker(takes=1), Ledger(closes=False)

    with pytest.raises(TransientError) as raised:
        send_noted(cast(Celery, broker), tasks(3), queue="q", ledger=ledger)

    assert str(raised.value) == (
        "sending failed (Error 111 connecting to 127.0.0.1:1. Connection refused.), and the "
        "ledger entries of the 4 messages not sent could not be closed (Redis at "
        "127.0.0.1:6379 did not answer): `reconcile` lists them until "
        "EVIDENCE_LEDGER_TTL_SECONDS has passed"
    )
    assert isinstance(raised.value.__cause__, OperationalError)


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

    # Two copies went: their originals are closed and their own entries stay open; the
    # failed copy's entry and the one after it are closed, their originals still open.
    assert told == [("task-0:0", broker.sent[0]), ("task-0:1", broker.sent[1])]
    assert sorted(ledger.open) == sorted(
        ["task-1:0", "task-1:1", f"{broker.sent[0]}:0", f"{broker.sent[1]}:0"]
    )
