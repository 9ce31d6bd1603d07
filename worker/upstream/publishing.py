"""Send AttributionResults to the queue, validated first: a bad line never reaches a worker."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from contracts import AttributionResult, input_hash
from contracts.sampling import sampled
from worker.constants import PUBLISHED_AT_HEADER, SCORE, SCORE_BATCH
from worker.errors import InputError, SentUnconfirmed
from worker.pipeline.intake import parse_message
from worker.stores.contract import Ledger, LedgerEntry

if TYPE_CHECKING:
    from celery import Celery
    from kombu import Producer

# How long a send waits for RabbitMQ's publisher confirm before it fails: a broker that
# stopped answering must not hang a publisher. Redis has no confirms and ignores it.
CONFIRM_TIMEOUT_SECONDS = 10.0
# Messages noted in the ledger per round trip, before their tasks are sent.
NOTE_CHUNK = 200
# Room a score_batch task's envelope (headers, properties) takes beside its messages, so
# a batch publish cuts never reach the worker's EVIDENCE_MAX_BATCH_BYTES.
BATCH_ENVELOPE_BYTES = 8_192
# Messages of a batch named in its argsrepr (Celery's header for it holds about 1 KB).
ARGSREPR_MESSAGES = 5


@dataclass
class Published:
    """What a publish run did: messages and tasks sent, lines rejected (line, reason), valid
    messages left out by the sample rate; after a failure, the first line not sent (every
    line before it was sent, rejected or sampled out; it and every line after were not sent;
    None when the failure left none: it was the last confirmation's)."""

    messages: int = 0
    tasks: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    sampled_out: int = 0
    first_unsent: int | None = None
    read_all: bool = False


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
    app: Celery,
    task: str,
    payload: Any,
    *,
    queue: str,
    producer: Producer | None = None,
    task_id: str | None = None,
    argsrepr: str | None = None,
) -> str:
    """Send one task (under `task_id`, else a new one) and return its id once the broker
    has taken it. `argsrepr` is what task events, Flower and `inspect` show for its
    arguments instead of Celery's repr of them (the answer and context text).

    On RabbitMQ (publisher confirms, worker/runtime/celery_app.py) that means confirmed: a message
    the
    broker refuses (a nack: a full queue, a disk alarm) or cannot route to any queue
    (mandatory: the queue was deleted after it was declared) raises kombu's
    OperationalError naming the task, instead of being dropped without a word.
    """
    from amqp.exceptions import ChannelError, MessageNacked
    from kombu.exceptions import OperationalError

    task_id = task_id or new_task_id()
    try:
        app.send_task(
            task,
            args=[payload],
            queue=queue,
            producer=producer,
            task_id=task_id,
            mandatory=True,
            confirm_timeout=CONFIRM_TIMEOUT_SECONDS,
            # Read by the worker for its publish-to-record histogram.
            headers={PUBLISHED_AT_HEADER: datetime.now(UTC).timestamp()},
            **({} if argsrepr is None else {"argsrepr": argsrepr, "kwargsrepr": "{}"}),
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


def new_task_id() -> str:
    return str(uuid.uuid4())


@dataclass
class Outgoing:
    """One task about to be sent: its id, name and payload, and its messages' ledger entries."""

    task_id: str
    task: str
    payload: Any
    entries: list[LedgerEntry]

    @property
    def argsrepr(self) -> str:
        """Its messages as case IDs and input hashes only (the first few of a batch)."""
        named = [f"case_id={e.case_id} input_hash={e.input_hash}" for e in self.entries]
        if self.task != SCORE_BATCH:
            return named[0] if named else NOT_VALIDATED
        return batch_repr(named)


NOT_VALIDATED = "a message that was not validated"
# What Outgoing.argsrepr writes, and nothing a repr of a message (a list) could start with.
_OUR_ARGSREPR = re.compile(
    rf"(?:\d+ messages?: )?case_id=.* input_hash=[0-9a-f]{{64}}.*|{NOT_VALIDATED}", re.DOTALL
)


def batch_repr(named: Sequence[str]) -> str:
    """A batch's messages as named: the count, then the first few."""
    more = f", … (+{len(named) - ARGSREPR_MESSAGES})" if len(named) > ARGSREPR_MESSAGES else ""
    count = f"{len(named)} message{'' if len(named) == 1 else 's'}"
    return f"{count}: " + ", ".join(named[:ARGSREPR_MESSAGES]) + more


def written_here(argsrepr: object, kwargsrepr: object) -> bool:
    """True when a task's argsrepr and kwargsrepr headers are what send_noted writes."""
    return (
        kwargsrepr == "{}"
        and isinstance(argsrepr, str)
        and _OUR_ARGSREPR.fullmatch(argsrepr) is not None
    )


def outgoing(
    messages: Sequence[tuple[AttributionResult, str]],
    *,
    batch: bool,
    max_message_bytes: int,
    now: datetime,
) -> Outgoing:
    """The task for validated messages (each with its JSON text): one score task, or one
    score_batch task of all of them."""
    task_id = new_task_id()
    entries = [
        ledger_entry(task_id, position, message, text, now=now)
        for position, (message, text) in enumerate(messages)
    ]
    sent = [as_sent(text, max_message_bytes=max_message_bytes) for _, text in messages]
    if batch:
        return Outgoing(task_id, SCORE_BATCH, sent, entries)
    (payload,) = sent
    return Outgoing(task_id, SCORE, payload, entries)


def ledger_entry(
    task_id: str, position: int, message: AttributionResult, text: str, *, now: datetime
) -> LedgerEntry:
    """The ledger entry of a validated message (and its JSON text) at `position` in a task."""
    return LedgerEntry(
        task_id=task_id,
        position=position,
        case_id=message.case_id,
        input_hash=input_hash(message),
        published_at=now,
        body=text,
    )


def send_noted(
    app: Celery,
    tasks: Sequence[Outgoing],
    *,
    queue: str,
    ledger: Ledger | None,
    producer: Producer | None = None,
    on_sent: Callable[[Outgoing], None] = lambda _: None,
) -> None:
    """Note every message of `tasks` in the ledger, not sent yet (one round trip), send the
    tasks, calling `on_sent` after each one the broker took, then confirm the notes of those
    the broker took (worker/stores/contract.py), also when a send failed.

    Noted first: a message is never on the broker without its entry, so the worker can
    never record one before its entry exists (which would leave the entry open for ever).
    A note that failed, and the tasks after a failed send, leave unconfirmed entries, which
    nothing lists and nobody sends again: the caller tells the user they were not sent. A
    confirmation that fails raises SentUnconfirmed (after `on_sent` of every task taken).
    """
    if ledger is not None:
        ledger.note_published([entry for task in tasks for entry in task.entries], sent=False)
    taken: list[Outgoing] = []
    try:
        for task in tasks:
            send(
                app,
                task.task,
                task.payload,
                queue=queue,
                producer=producer,
                task_id=task.task_id,
                argsrepr=task.argsrepr,
            )
            taken.append(task)
            on_sent(task)
    finally:
        if ledger is not None and taken:
            _confirm(ledger, taken)


def _confirm(ledger: Ledger, taken: Sequence[Outgoing]) -> None:
    """Confirm the notes of the tasks the broker took; when the store cannot, say so."""
    write_ids = [entry.write_id for task in taken for entry in task.entries]
    try:
        ledger.confirm_sent(write_ids)
    except Exception as error:
        raise SentUnconfirmed(
            f"the broker took {len(write_ids)} messages, but the ledger could not confirm "
            f"them ({error}): if the broker loses them, `reconcile` will not list them",
            sent=len(write_ids),
        ) from error


def publish_lines(
    lines: Iterable[tuple[int, bytes]],
    *,
    app: Celery,
    queue: str,
    batch_size: int = 1,
    max_message_bytes: int,
    max_batch_bytes: int,
    ledger: Ledger | None = None,
    sample_rate: float | None = None,
    on_progress: Callable[[int], None] = lambda _: None,
    into: Published | None = None,
) -> Published:
    """Validate each line, then send it alone (score) or in lists of batch_size (score_batch),
    a list cut short where it would pass max_batch_bytes. Messages are noted in the ledger
    a chunk of tasks at a time, just before the chunk is sent.

    With a sample_rate, a valid message is sent only when sampled(case_id, sample_rate)
    (contracts/sampling.py); the others are counted, never noted nor sent. Lines are validated
    first, so an invalid line is reported whatever its case ID. `into`: the Published to fill
    (the caller reads it after a failure too: first_unsent names where to resume).
    """
    result = Published() if into is None else into
    pending: list[tuple[AttributionResult, str]] = []
    pending_bytes = 0
    pending_line = 0  # the first line of the pending messages
    with app.producer_or_acquire() as producer:
        chunk = _Chunk(app, queue, ledger, producer, result, on_progress)

        def close_task() -> None:
            nonlocal pending_bytes
            if pending:
                task = outgoing(
                    pending,
                    batch=batch_size > 1,
                    max_message_bytes=max_message_bytes,
                    now=datetime.now(UTC),
                )
                chunk.add(task, pending_line)
                pending.clear()
                pending_bytes = 0
            if chunk.messages >= NOTE_CHUNK:
                chunk.send()

        for number, body in lines:
            chunk.last_line = number
            try:
                message = parse_message(body, max_bytes=max_message_bytes)
            except InputError as error:
                result.rejected.append((number, str(error)))
                continue
            if sample_rate is not None and not sampled(message.case_id, sample_rate):
                result.sampled_out += 1
                continue
            text = body.decode("utf-8")  # parse_message has rejected anything not UTF-8
            if batch_size > 1:  # a task of one message is bounded by the message limit
                size = len(json.dumps(text)) + 2  # as the transport escapes it, with ", "
                if pending and pending_bytes + size > max_batch_bytes - BATCH_ENVELOPE_BYTES:
                    close_task()
                pending_bytes += size
            if not pending:
                pending_line = number
            pending.append((message, text))
            if len(pending) >= batch_size:
                close_task()
        result.read_all = True
        close_task()
        if chunk.tasks:
            chunk.send()
    return result


@dataclass
class _Chunk:
    """publish_lines' tasks noted and sent together (NOTE_CHUNK messages), each with its first
    input line, so that a failure names the first line not sent."""

    app: Celery
    queue: str
    ledger: Ledger | None
    producer: Producer
    result: Published
    on_progress: Callable[[int], None]
    tasks: list[Outgoing] = field(default_factory=list)
    first_lines: dict[str, int] = field(default_factory=dict)
    last_line: int = 0  # the last input line read

    @property
    def messages(self) -> int:
        return sum(len(task.entries) for task in self.tasks)

    def add(self, task: Outgoing, first_line: int) -> None:
        self.tasks.append(task)
        self.first_lines[task.task_id] = first_line

    def send(self) -> None:
        result, before = self.result, self.result.tasks
        try:
            send_noted(
                self.app,
                self.tasks,
                queue=self.queue,
                ledger=self.ledger,
                producer=self.producer,
                on_sent=self._sent,
            )
        except BaseException:
            # Tasks go in order: the first one not taken; else the line after the last read
            # (none when every line was read: only the confirmation failed).
            unsent = self.tasks[result.tasks - before :]
            if unsent:
                result.first_unsent = self.first_lines[unsent[0].task_id]
            elif not result.read_all:
                result.first_unsent = self.last_line + 1
            raise
        finally:
            self.on_progress(result.messages)  # what was sent before a failure too
        self.tasks.clear()
        self.first_lines.clear()

    def _sent(self, task: Outgoing) -> None:
        self.result.messages += len(task.entries)
        self.result.tasks += 1
