"""The publish ledger: every message a publisher sends, kept until the worker records it.

A publisher notes each message (its write id, case ID, input hash, time and body) before it
sends the task; the store's record write (the same Lua call on Redis, the same transaction on
SQLite) closes the entry of the write id it records, and a dead letter closes its own. An
entry still open long after the store noted it is a message that was lost between the
publisher and the store (a broker that died without persistence, the pop window of kombu's
Redis transport): `evidence-worker reconcile` lists it, and `--republish` sends its body again.

A note has two steps, so that nobody sends behind the user's back what the user was told was
not sent. The publisher notes its messages unsent (note_published(sent=False)) before it sends
them: a message can never be in flight without an entry. Once the broker took them it
confirms them (confirm_sent()), and only confirmed entries are published in the ledger's
sense: listed by reconcile, counted by the gauge, sent again by the self-heal. A note whose
store write or replicas' wait failed, a task the broker refused, a publisher that died before
it sent: each leaves unconfirmed entries, which nothing lists and the time to live forgets;
the publisher has told the user those lines were not sent (`publish` names the first, and
`--from-line` resumes there). Only a confirmation that fails after the broker took the
messages leaves sent messages unconfirmed: the publisher says so, and reconcile will not find
them if the broker loses them. Entries are kept for EVIDENCE_LEDGER_TTL_SECONDS and then
forgotten, recorded or not.

Every age is judged on the store's clock, never a publisher's: the store stamps each entry as
it notes it (Redis TIME in the script; the local clock for a SQLite file), forgets entries and
answers reconcile by that stamp. A publisher whose clock ran 25 h ahead used to trim the whole
ledger with its note (500 lost messages no longer listed), and one 2 h behind made messages
still in the queue look lost.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field


def write_id(task_id: str, position: int) -> str:
    """The id under which the worker records message `position` of task `task_id`
    (worker.pipeline.scoring.write_ids): the ledger entry's key."""
    return f"{task_id}:{position}"


def task_and_position(write_id: str) -> tuple[str, str]:
    """The task ID and the position (as written) of a write id: write_id()'s inverse, taken
    from the last colon, as the record script takes it (a task ID may hold colons)."""
    task_id, _, position = write_id.rpartition(":")
    return task_id, position


class LedgerEntry(BaseModel):
    """One published message: which task and position carry it, and what it is."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    position: int
    case_id: str
    input_hash: str
    published_at: datetime  # by the publisher's clock: shown, never compared
    body: str  # the message's JSON text, as validated and sent
    # How many times reconcile sent this message again before this entry (0: the publisher's
    # own send); the beat's reconcile dead-letters it at EVIDENCE_MAX_REPUBLISHES.
    republished: int = 0
    # When the store noted it, by the store's clock; set as entries are read, not stored.
    noted_at: datetime | None = Field(default=None, exclude=True)

    @property
    def write_id(self) -> str:
        return write_id(self.task_id, self.position)


class Ledger(Protocol):
    """Open entries per write id; record() and dead_letter() close them (see OutcomeStore)."""

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        """Open one entry per message, in one round trip; also forgets entries older than the
        ledger's time to live. `sent=False` (a publisher, before it sends): the entries wait
        for confirm_sent(), and until then nothing lists them (unrecorded(), the gauge, the
        self-heal, still_open()), though a record or dead letter closes them as any."""
        ...

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        """The broker took these messages: their entries, noted with `sent=False`, are
        published from now (stamped now, by the store's clock). One closed meanwhile (its
        message recorded or dead-lettered already) stays closed."""
        ...

    def ledger_now(self) -> datetime:
        """The store's clock, by which entries are stamped as noted and forgotten."""
        ...

    def unrecorded(self, *, published_before: datetime) -> Iterator[LedgerEntry]:
        """Open entries noted before `published_before` (a time on the store's clock, see
        ledger_now()), oldest first, read a page at a time: messages neither recorded nor
        dead-lettered since."""
        ...

    def count_unrecorded(self, *, published_before: datetime) -> int:
        """How many entries unrecorded() would yield, counted by the store."""
        ...

    def close_entries(self, write_ids: Sequence[str]) -> None:
        """Close entries whose messages were sent again under new write ids (reconcile)."""
        ...


class Leases(Protocol):
    """Named leases with a time to live, by the store's clock: one reconcile run at a time."""

    def take_lease(self, name: str, holder: str, seconds: int) -> bool:
        """Hold the lease `name` for `holder` until it is given back or `seconds` pass (by the
        store's clock); False when another holder has it. One reconcile run at a time."""
        ...

    def give_back_lease(self, name: str, holder: str) -> None:
        """End `holder`'s lease `name`; nothing when it has expired and another holds it."""
        ...
