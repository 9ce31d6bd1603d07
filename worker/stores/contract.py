"""The store contract, which every store meets (ResultStore: outcomes, audit trail, publish
ledger, leases and dead letters) and the types they share: keep the first outcome per hash,
append every attempt, never overwrite.

The publish ledger keeps every message a publisher sends until the worker records it.

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

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) uses
from typing import NamedTuple, Protocol

from pydantic import BaseModel, ConfigDict, Field

from contracts import Alert, Attempt
from contracts.outcomes import CacheOutcome, value_json
from contracts.record_models import AlertKind, AnyAlert, ContractDriftAlert


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


class Recorded:
    """What recording one attempt found: how it compares with the first attempt, the first
    attempt itself, a conflict's alert (None when that conflict was alerted before), whether
    the attempt's required set drifted from its (contract version, case ID)'s first
    (`contract_drift`) and the drift's alert when this write raised it (`drift`).

    A store may hand the first attempt over as the JSON it keeps; it is parsed when asked for.
    A hit's outcome is the attempt's own (that is what a hit is), so the worker asks only on a
    conflict, and a re-run of known inputs parses nothing it does not need.

    `replayed` says that this write had already been recorded (a retry after a lost reply, or
    a redelivery, under the same write id): the store wrote nothing this time and returns what
    the first write found, alert included. It is not part of equality, which compares what was
    recorded, so a replay equals the original; the caller must not raise its alert again.
    """

    __slots__ = ("_first", "alert", "cache", "contract_drift", "drift", "replayed")

    def __init__(
        self,
        cache: CacheOutcome,
        first: Attempt | str | bytes,
        alert: Alert | None = None,
        *,
        replayed: bool = False,
        contract_drift: bool = False,
        drift: ContractDriftAlert | None = None,
    ) -> None:
        self.cache = cache
        self._first = first
        self.alert = alert
        self.replayed = replayed
        self.contract_drift = contract_drift
        self.drift = drift

    @property
    def first(self) -> Attempt:
        if not isinstance(self._first, Attempt):
            self._first = Attempt.model_validate_json(self._first)
        return self._first

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Recorded):
            return NotImplemented
        return (self.cache, self.first, self.alert, self.contract_drift, self.drift) == (
            other.cache,
            other.first,
            other.alert,
            other.contract_drift,
            other.drift,
        )

    __hash__ = None  # type: ignore[assignment]  # equal by value, and not immutable

    def __repr__(self) -> str:
        return (
            f"Recorded(cache={self.cache!r}, first={self.first!r}, alert={self.alert!r},"
            f" replayed={self.replayed!r}, contract_drift={self.contract_drift!r},"
            f" drift={self.drift!r})"
        )


class History(BaseModel):
    """Everything kept for one input hash, for `show` and the canary."""

    model_config = ConfigDict(frozen=True)

    input_hash: str
    first: Attempt
    attempts: list[Attempt]
    total_attempts: int
    expires_at: datetime | None = None


class DeadLetter(BaseModel):
    """A message that could not be scored, with the error that rejected it.

    The stores keep at most EVIDENCE_DEAD_LETTER_MAX_BYTES of the body (see bounded()), so a
    huge poison message cannot fill Redis; body_sha256 and body_bytes still identify the
    whole body. Letters stored before these fields existed read with None and False.
    """

    model_config = ConfigDict(frozen=True)

    received_at: datetime
    error: str
    body: str
    task_id: str | None = None
    # The message's place in its task (None: the whole task body, as the consumer rejects it).
    position: int | None = None
    # The input line of a letter `score` wrote (None: the worker's, or written before `line`).
    line: int | None = None
    body_sha256: str | None = None  # hex SHA-256 of the whole body's UTF-8 bytes
    body_bytes: int | None = None  # the whole body's size in UTF-8 bytes
    truncated: bool = False  # True when `body` is only the first bytes of it

    def bounded(self, max_bytes: int) -> DeadLetter:
        """This letter with its body's digest and size, cut to at most `max_bytes` UTF-8
        bytes at a character boundary. A letter that already has a digest keeps it: the
        digest is of the body as received, not of a body cut before."""
        data = self.body.encode("utf-8", "surrogatepass")
        digest = self.body_sha256 or hashlib.sha256(data).hexdigest()
        size = self.body_bytes if self.body_bytes is not None else len(data)
        if len(data) <= max_bytes:
            if (digest, size) == (self.body_sha256, self.body_bytes):
                return self
            return self.model_copy(update={"body_sha256": digest, "body_bytes": size})
        cut = max_bytes
        while cut > 0 and data[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte
            cut -= 1
        return self.model_copy(
            update={
                "body": data[:cut].decode("utf-8", "surrogatepass"),
                "body_sha256": digest,
                "body_bytes": size,
                "truncated": True,
            }
        )


# How far before `since` a store keeps reading alerts stored in arrival order: an alert is
# appended just after it is raised, by the worker's clock, while a Redis stream ID is the
# server's clock, so a worker clock running ahead puts an alert's ID before its raised_at.
ALERT_CLOCK_MARGIN = timedelta(minutes=5)


def newest_since(
    newest_first: Iterable[AnyAlert],
    since: datetime | None,
    limit: int,
    kind: AlertKind | None = None,
) -> list[AnyAlert]:
    """The first `limit` alerts of `kind` (any, when None) raised at or after `since` (any
    time, when None) from alerts in reverse arrival order, returned oldest first; reading
    stops once arrival is past ALERT_CLOCK_MARGIN before `since`."""
    found: list[AnyAlert] = []
    floor = None if since is None else since - ALERT_CLOCK_MARGIN
    for alert in newest_first:
        if len(found) >= limit:
            break
        if since is None or alert.raised_at >= since:
            if kind is None or alert.kind == kind:
                found.append(alert)
        elif floor is not None and alert.raised_at < floor:
            break
    found.reverse()
    return found


class FirstRequired(NamedTuple):
    """A (contract version, case ID)'s first required set as a store keeps it."""

    required_claim_ids: list[str]
    input_hash: str


def outcome_json(attempt: Attempt) -> str:
    """The definition of "same outcome": two attempts agree exactly when these strings are equal.

    classify() compares them, and the Redis script compares them too (stored beside each first
    attempt), so both stores decide hit or conflict by this one string: the value spelled as
    json writes it (repr: exact, so 0.5 and 0.50000000001 differ and -0.0 is not 0.0) and the
    reason verbatim (whitespace counts). A non-finite value is spelled as the stores keep it,
    null (pydantic writes NaN and infinities as null), so an outcome compares the same before
    and after a round trip through either store. The spelling must never change, as Redis keeps
    these strings from earlier versions: it is `json.dumps([value, reason], ensure_ascii=False)`,
    written out because it runs several times per attempt.
    """
    return f"[{value_json(attempt.value)}, {encode_basestring(attempt.reason)}]"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def recorded_ms(attempt: Attempt) -> int:
    """When an attempt was recorded, in whole milliseconds since the epoch (a time without an
    offset is UTC): what orders a case's hashes (hashes_for_case). Integer arithmetic, so
    both stores agree to the millisecond."""
    return utc_ms(attempt.recorded_at)


def utc_ms(at: datetime) -> int:
    """A time in whole milliseconds since the epoch, truncated (a time without an offset is
    UTC): recorded_ms() of an attempt recorded at `at`."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // timedelta(milliseconds=1)


def classify(first: Attempt, attempt: Attempt) -> CacheOutcome:
    """hit when the attempt's outcome_json() is the first's, conflict otherwise."""
    return "hit" if outcome_json(first) == outcome_json(attempt) else "conflict"


class OutcomeStore(Protocol):
    """First-writer-wins outcomes and the attempts behind them.

    record() is atomic: of several writers racing on one new hash exactly one sees `miss`.
    The outcome, the attempt's entry and an alert (a conflict's, or a contract drift's) are
    written in one transaction (SQLite) or one script call (Redis), so no alert is lost or
    written without its attempt. The store keeps the first required set of a valid attempt
    per (contract version, case ID) in the same call (contract drift, SPEC §9), and raises each
    conflict and each drift once.

    A write may carry a write id (worker.pipeline.scoring.write_ids(): the task ID and the message's
    position in it). The store keeps the write ids of at least the newest
    max_attempts_per_hash attempts per hash, with the outcome and for as long; a write whose
    id it finds there is a retry of a write that landed (the reply was lost, or the worker died
    before the ack), so it writes nothing and returns the original Recorded, marked
    `replayed`. Without an id (None) every write is a new attempt. A write id also closes the
    publish ledger's entry under that id (worker/stores/contract.py), in the same call.
    """

    def record(
        self, input_hash: str, attempt: Attempt, *, now: datetime, write_id: str | None = None
    ) -> Recorded:
        """record_many() of one item (every store has it from RecordOne)."""
        ...

    def record_many(
        self,
        items: Sequence[tuple[str, Attempt]],
        *,
        now: datetime,
        write_ids: Sequence[str | None] | None = None,
        letters: Sequence[DeadLetter] = (),
    ) -> list[Recorded]:
        """record() each item in order, in one round trip; `write_ids`, when given, has one
        id (or None) per item. `letters`: dead_letter() them first, in the same round trip
        where the store can (the batch's rejected messages: a task's one round trip). A
        write the store failed to confirm is retried whole, so a letter may then be kept
        twice, as a retried dead_letter() may keep it."""
        ...

    def history(self, input_hash: str) -> History | None:
        """The first attempt and the newest attempts, each whole (as it was recorded)."""
        ...

    def histories(self, input_hashes: Sequence[str]) -> list[History | None]:
        """history() of each hash, in order, in one round trip where the store has them
        (a whole store's histories are read a page at a time: `stability --store`)."""
        ...

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        """Every stored (input hash, first attempt), in no particular order (for the canary)."""
        ...

    def first_outcomes_by_time(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> Iterator[tuple[str, Attempt]]:
        """Every stored (input hash, first attempt) whose recorded_ms() is at or after `since`
        and before `until` (either None: no bound), oldest first, ties by input hash; read as
        the caller goes, in memory bounded whatever the number of outcomes (`records`)."""
        ...

    def first_required(self, contract_version: str, case_id: str) -> FirstRequired | None:
        """The first required set kept for this (contract version, case ID), which a later
        valid attempt with another set drifted from (SPEC §9), sorted, with its input hash;
        None when none is kept (never recorded, or expired). `gate --store` compares with it."""
        ...

    def recorded_writes(self, writes: Sequence[tuple[str, str]]) -> list[bool]:
        """For each (input hash, write id), whether the store holds that write: it landed
        before (record() of it would be a replay). Read as record() reads it, writing
        nothing: the delivery limit asks before it calls a redelivered message a poison."""
        ...

    def hashes_for_case(self, case_id: str, limit: int | None = None) -> list[str]:
        """The input hashes an attempt of this case was recorded under, newest first by when
        the case first recorded each (ties: the greater hash first), at most `limit` (None:
        all). The case index is written in the same call as the outcome, so a hash is listed
        exactly when its outcome is kept (on Redis an expired one drops out with it)."""
        ...

    def close(self) -> None: ...


class RecordOne:
    """What every OutcomeStore shares: record() is record_many() of one item, so a store
    writes one code path, and a single write is as atomic and idempotent as a batch's."""

    def record(
        self: OutcomeStore,
        input_hash: str,
        attempt: Attempt,
        *,
        now: datetime,
        write_id: str | None = None,
    ) -> Recorded:
        return self.record_many([(input_hash, attempt)], now=now, write_ids=[write_id])[0]


class AuditTrail(Protocol):
    """What reviewers and the poison-message guard read: alerts, dead letters, delivery counts."""

    def alerts(
        self, limit: int = 100, *, since: datetime | None = None, kind: AlertKind | None = None
    ) -> list[AnyAlert]:
        """The newest `limit` alerts (raised at or after `since`, of `kind`, when given),
        oldest first."""
        ...

    def alert_count(self) -> int:
        """How many alerts are kept (the stream is bounded: the oldest go first)."""
        ...

    def dead_letter(self, *letters: DeadLetter) -> None:
        """Keep each letter, its body cut by DeadLetter.bounded(), in a bounded list, and
        close the publish ledger's entry of each letter's task and position (every entry of
        the task when its position is None); one round trip however many there are."""
        ...

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]: ...

    def count_delivery(self, task_id: str) -> int:
        """Count one more delivery of a task id; returns the count so far (bounds poison loops)."""
        ...

    def forget_deliveries(self, task_id: str) -> None:
        """Drop a task id's count: its delivery completed, so the deliveries counted so far
        did not loop (a duplicate of a recorded message is a replay, not a poison)."""
        ...

    def close(self) -> None: ...


class LetterBox(Protocol):
    """Dead letters by id, for `evidence-worker dead-letters` (worker/cli/dead_letters.py).

    A letter's id is the store's own: a SQLite row id, a Redis stream entry ID (on a Redis
    Cluster, its shard's number, "/" and the entry ID). Ids only ever grow, so a removed
    letter's id is never given to another.
    """

    def letters_newest_first(self) -> Iterator[tuple[str, DeadLetter]]:
        """Every kept letter with its id, newest first, read a page at a time."""
        ...

    def letter(self, letter_id: str) -> DeadLetter | None:
        """The letter of that id; None when there is none (or the id is not one of ours)."""
        ...

    def remove_letters(self, letter_ids: Sequence[str]) -> int:
        """Remove the letters of these ids; returns how many there were."""
        ...

    def still_open(self, write_ids: Sequence[str]) -> set[str]:
        """Those of `write_ids` whose publish ledger entry is open: neither recorded nor
        dead-lettered yet (see Ledger)."""
        ...


class ResultStore(OutcomeStore, AuditTrail, Ledger, Leases, LetterBox, Protocol):
    """All three on one backend, as the worker and the CLI open it (see open_store): the
    ledger must be where the outcomes are, as a record write closes its entry."""
