"""The shared store on Redis, one server or a Redis Cluster: one store, whose key layout
(keys.py) and router (routing.py) are the server's or the cluster's. Its writes are commands
the router sends (with the replicas' wait), its record the plan the layout allows
(record_steps.py), its reads the client's, which a cluster's client routes by key."""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Self, TypeVar, cast
from urllib.parse import urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster

from contracts import Alert, Attempt
from contracts.outcomes import CacheOutcome
from contracts.record_models import AlertKind, AnyAlert, ContractDriftAlert, parse_alert
from worker.errors import ConfigurationError, StoreBusy, TransientError
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.settings import (
    DEAD_LETTER_MAX_BYTES,
    LEDGER_TTL_SECONDS,
    REDIS_URL_HINT,
    REPLICA_TIMEOUT_MS,
    masked_url,
    redis_seeds,
)
from worker.stores.codec import Expander, drifted, letter_json, read_letter, with_first
from worker.stores.contract import (
    ALERT_CLOCK_MARGIN,
    DeadLetter,
    FirstRequired,
    History,
    Recorded,
    RecordOne,
    newest_since,
    recorded_ms,
)
from worker.stores.redis.keys import ClusterKeyLayout, KeyLayout, replication_mark_key
from worker.stores.redis.record_steps import (
    ATTEMPTS_PER_CALL,
    DRIFT_LUA,
    MAX_ALERTS,
    RECORD_LUA,
    RecordSteps,
    order_of,
)
from worker.stores.redis.redis_ledger import CLOSE_LUA, CONFIRM_LUA, NOTE_LUA, RedisLedger
from worker.stores.redis.redis_letters import RedisLetters
from worker.stores.redis.replicas import ReplicaCount, ReplicaWait
from worker.stores.redis.routing import (
    ClusterRouter,
    Command,
    Scripts,
    SingleRouter,
    cluster_name,
)

__all__ = ["ATTEMPTS_PER_CALL", "MAX_ALERTS", "RECORD_LUA", "RedisStore"]
from worker.stores.time_order import SortKey, in_time_order, ms_bounds

MAX_DEAD_LETTERS = 10_000
DELIVERY_COUNT_TTL_SECONDS = 86_400
SCAN_BATCH = 500
ALERT_PAGE = 500  # alerts per XREVRANGE while `alerts --since` reads back in time
CASE_PAGE = 500  # a case index's members per ZREVRANGE (hashes_for_case)

T = TypeVar("T")

# Errors whose server is up and whose write is right, but which cannot take it now, by the
# code that starts the reply; redis-py has classes for OOM and READONLY only (MISCONF and
# NOREPLICAS are plain ResponseErrors, MASTERDOWN a ClusterDownError that one Redis sends too).
# A replica at the address is a failover under way, or the wrong URL: a TransientError,
# which the CLI says with "check --store"; the others are StoreBusy (the URL is right).
WRITE_REFUSALS = {
    "OOM": StoreBusy,  # full: maxmemory with noeviction, until memory is freed
    "MISCONF": StoreBusy,  # cannot persist (a full disk under its AOF or RDB) until it can
    "NOREPLICAS": StoreBusy,  # fewer replicas in sync than its min-replicas-to-write
    "READONLY": TransientError,  # a replica, until a primary is back at the address
    "MASTERDOWN": TransientError,  # a replica cut off from its master (serve-stale-data no)
}


def write_refusal(error: redis.ResponseError) -> tuple[type[TransientError], str] | None:
    """The error to raise for an error in WRITE_REFUSALS, and its reply, code first; None
    for any other."""
    code = getattr(error, "status_code", None)  # redis-py strips the code off its classes'
    text = str(error)
    if code is None:
        code = text.split(" ", 1)[0]
    elif not text.startswith(code):
        text = f"{code} {text}"
    kind = WRITE_REFUSALS.get(code)
    return None if kind is None else (kind, text)


Stamped = TypeVar("Stamped", AnyAlert, DeadLetter)


class Entry(NamedTuple):
    """A stream entry, parsed: its ID, its `n` field (b"" where none) and the alert or letter."""

    entry_id: bytes
    order: bytes
    parsed: AnyAlert | DeadLetter


def newest_first_key(entry: Entry) -> tuple[datetime, bytes, int, int]:
    """How entries of several streams (a Redis Cluster's shards) are ordered: no one clock
    orders what different masters took, so by their own time (raised_at, received_at; one
    without an offset is UTC), then by the order the writer gave them (order_of()), then by
    entry ID (`<ms>-<sequence>`, the time the server took them)."""
    parsed = entry.parsed
    at = parsed.received_at if isinstance(parsed, DeadLetter) else parsed.raised_at
    ms, _, sequence = entry.entry_id.partition(b"-")
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return at, entry.order, int(ms), int(sequence or 0)


class RedisStore(RecordOne, RecordSteps, RedisLedger, RedisLetters):
    """ResultStore on one Redis server (keys carry per-hash tags, see keys.py) or, given a
    RedisCluster client, on a Redis Cluster (keys in shards, see keys.ClusterKeyLayout)."""

    on_cluster = False  # what from_url() opens: one server's client, or a cluster's

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        *,
        prefix: str = "evidence",
        max_attempts_per_hash: int = 100,
        ttl_seconds: int | None = None,
        attempts_ttl_seconds: int | None = None,
        name: str | None = None,
        dead_letter_max_bytes: int = DEAD_LETTER_MAX_BYTES,
        ledger_ttl_seconds: int = LEDGER_TTL_SECONDS,
        min_replicas: int | None = 0,
        replica_timeout_ms: int = REPLICA_TIMEOUT_MS,
    ) -> None:
        """`min_replicas`: replicas each write waits for (worker/stores/redis/replicas.py); None: 1
        while the server has one in sync, asked again as ReplicaCount says, else 0
        (open_store's default)."""
        cluster = isinstance(client, RedisCluster)
        self._client: redis.Redis = client  # type: ignore[assignment]  # routes by key on a cluster
        self.ledger_ttl_seconds = ledger_ttl_seconds
        # How messages name the store: its URL without the password.
        if name is None:
            if isinstance(client, RedisCluster):
                name = "redis cluster"
            else:
                name = f"redis database {client.connection_pool.connection_kwargs.get('db')}"
        self.name = name
        self.prefix = prefix
        self.max_attempts_per_hash = max_attempts_per_hash
        self.ttl_seconds = ttl_seconds or 0
        self.attempts_ttl_seconds = attempts_ttl_seconds or 0
        self.dead_letter_max_bytes = dead_letter_max_bytes
        # On one server the ledger's short scripts go whole, as they always have: a close in
        # the record's pipeline never costs a second round trip for a NOSCRIPT.
        self.scripts = Scripts(
            {
                "record": RECORD_LUA,
                "drift": DRIFT_LUA,
                "close": CLOSE_LUA,
                "note": NOTE_LUA,
                "confirm": CONFIRM_LUA,
            },
            whole=() if cluster else ("close", "note", "confirm"),
        )
        # One count for the store's servers: its one server, or each master of a cluster.
        self.replica_count = ReplicaCount(min_replicas, store_name=self.name)
        self.router: SingleRouter | ClusterRouter
        if isinstance(client, RedisCluster):
            self.layout = ClusterKeyLayout(prefix)
            self.keys: KeyLayout = self.layout
            self.router = ClusterRouter(
                client, self.layout, self.replica_count, replica_timeout_ms, self.name
            )
            self.masters = len(client.get_primaries())  # type: ignore[no-untyped-call]
            # How `score`'s summary and the worker's start line name it (stores.describe()).
            self.description = self.name
        else:
            self.keys = KeyLayout(prefix)
            self.replicas = ReplicaWait(
                client,
                store_name=self.name,
                mark_key=replication_mark_key(prefix),
                count=self.replica_count,
                timeout_ms=replica_timeout_ms,
            )
            self.router = SingleRouter(client, self.replicas)
        self.in_steps = cluster  # record_steps.py: the cluster's three steps

    @property
    def client(self) -> redis.Redis:
        """The store's client (a RedisCluster's on a cluster, typed as one server's: its
        commands are the same); set, it is the router's too."""
        return self._client

    @client.setter
    def client(self, client: redis.Redis) -> None:
        self._client = client
        self.router.client = client

    @classmethod
    def from_url(
        cls, url: str, *, client_options: Mapping[str, Any] | None = None, **options: Any
    ) -> Self:
        """A store on the server at `url` (on the Redis Cluster it is a node of, for
        on_cluster); `client_options` go to redis-py (TLS, say), where ssl_* query parameters
        in the URL win over them."""
        if cls.on_cluster:
            return cls._cluster_from_url(url, client_options, **options)
        client = redis.Redis.from_url(
            url,
            socket_timeout=10,
            socket_connect_timeout=5,
            socket_keepalive=True,
            socket_keepalive_options=TCP_KEEPALIVE_OPTIONS,
            health_check_interval=30,
            **(client_options or {}),
        )
        return cls(client, name=masked_url(url), **options)

    @classmethod
    def _cluster_from_url(
        cls, url: str, client_options: Mapping[str, Any] | None, **options: Any
    ) -> Self:
        # Several seed nodes (settings.redis_seeds()): redis-py tries each in turn for the
        # slot map, so one node down at start does not hide the cluster.
        first, *others = redis_seeds(url)
        seeds = [
            ClusterNode(parts.hostname, parts.port or 6379)  # type: ignore[no-untyped-call]
            for parts in map(urlsplit, others)
        ]
        client = RedisCluster.from_url(
            first,
            startup_nodes=seeds,
            socket_timeout=10,
            socket_connect_timeout=5,
            socket_keepalive=True,
            socket_keepalive_options=TCP_KEEPALIVE_OPTIONS,
            **(client_options or {}),
        )
        masters = len(client.get_primaries())  # type: ignore[no-untyped-call]
        return cls(client, name=cluster_name(url, masters), **options)

    def _call(self, operation: Callable[[], T]) -> T:
        """Run a Redis operation (_on_server()); a cluster not settled yet (the router's
        not_ready) is a TransientError too, and any TransientError has the router ask a
        cluster for its slot map again."""
        try:
            return self._on_server(operation)
        except TransientError:
            self.router.failed()
            raise
        except self.router.not_ready as error:
            self.router.failed()
            self.replica_count.forget()  # a master may have failed over
            raise TransientError(f"Redis Cluster not ready for now: {error}") from error

    def _on_server(self, operation: Callable[[], T]) -> T:
        """Run a Redis operation: a server that is away for now is a TransientError (retried);
        one that will never take us as configured is a ConfigurationError."""
        try:
            return operation()
        except redis.AuthenticationError as error:
            raise ConfigurationError(
                f"store {self.name}: Redis refused the login: {error}"
            ) from None
        except redis.BusyLoadingError as error:  # before ConnectionError, its base class
            self.replica_count.forget()
            raise StoreBusy(
                f"Redis is not ready: {error} (a restart, or a replica's first sync): it "
                "takes commands once loaded"
            ) from error
        except (redis.ConnectionError, redis.TimeoutError) as error:
            # Asked again once it answers: the address may lead to a promoted replica now.
            self.replica_count.forget()
            raise TransientError(f"Redis unreachable: {error}") from error
        except redis.ResponseError as error:
            refusal = write_refusal(error)
            if refusal is not None:
                self.replica_count.forget()
                kind, reply = refusal
                raise kind(f"Redis refuses writes for now: {reply}") from error
            if "DB index is out of range" not in str(error):
                raise
            raise ConfigurationError(
                f"store {self.name}: the Redis server has no such database: {REDIS_URL_HINT}"
            ) from None

    def record_many(
        self,
        items: Sequence[tuple[str, Attempt]],
        *,
        now: datetime,
        write_ids: Sequence[str | None] | None = None,
        letters: Sequence[DeadLetter] = (),
    ) -> list[Recorded]:
        """The batch and its letters in one round trip on one server, in three steps on a
        Redis Cluster (record_steps.py); each script writes its attempts' outcomes, entries,
        write ids and alerts together."""
        if not items:
            self.dead_letter(*letters)
            return []
        ids: Sequence[str | None] = [None] * len(items) if write_ids is None else write_ids
        record = self._record_in_steps if self.in_steps else self._record_at_once
        replies = record(items, ids, now, letters)
        return [
            self._recorded(input_hash, attempt, reply, now)
            for (input_hash, attempt), reply in zip(items, replies, strict=True)
        ]

    @staticmethod
    def _recorded(input_hash: str, attempt: Attempt, reply: list[bytes], now: datetime) -> Recorded:
        cache = cast("CacheOutcome", reply[0].decode())
        first_json, replayed, alerted, drift = reply[1], reply[2], reply[3], reply[4]
        drift_alert = None
        if drift:
            attempt = drifted(attempt)
            if drift != b"1":
                drift_alert = cast("ContractDriftAlert", parse_alert(drift))
        if replayed:  # this write id was recorded before: what that write found
            alert = Alert.model_validate_json(alerted) if alerted else None
            first: Attempt | bytes = first_json if alert is None else alert.first
            return Recorded(
                cache, first, alert, replayed=True, contract_drift=bool(drift), drift=drift_alert
            )
        if cache == "miss":
            first = attempt
        elif cache == "hit":
            first = first_json
        else:
            first = Attempt.model_validate_json(first_json)
        alert = None
        if alerted:  # the script appended this very alert: built here rather than parsed back
            alert = Alert(input_hash=input_hash, first=first, observed=attempt, raised_at=now)
        return Recorded(cache, first, alert, contract_drift=bool(drift), drift=drift_alert)

    def first_outcomes(self) -> Iterator[tuple[str, Attempt]]:
        """Every hash's first attempt, in SCAN's order, a batch of keys at a time."""
        for keys in self._scanned(self.keys.outcome_pattern()):
            for key, first in zip(keys, self._read_fields(keys, "first"), strict=True):
                if first is not None:  # expired between the scan and the read
                    yield self.keys.hash_from_outcome(key), Attempt.model_validate_json(first)

    def first_outcomes_by_time(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Iterator[tuple[str, Attempt]]:
        """No key orders outcomes by time: SCAN reads each outcome's time (its `since`
        field, the first attempt's recorded_ms(); parsed out of `first` where an earlier
        version wrote none), time_order sorts the keys externally (a chunk at a time),
        and the first attempts are then read a batch at a time in that order. An outcome
        that expires in between is left out. A Redis Cluster's store scans every master."""
        low, high = ms_bounds(since, until)

        def sort_keys() -> Iterator[SortKey]:
            for keys in self._scanned(self.keys.outcome_pattern()):
                times = self._read_fields(keys, "since")
                unknown = [key for key, ms in zip(keys, times, strict=True) if ms is None]
                firsts = dict(zip(unknown, self._read_fields(unknown, "first"), strict=True))
                for key, ms in zip(keys, times, strict=True):
                    first = firsts.get(key)
                    if ms is not None:
                        at = int(ms)
                    elif first is not None:
                        at = recorded_ms(Attempt.model_validate_json(first))
                    else:
                        continue  # expired between the scan and the read
                    if low <= at < high:
                        yield at, self.keys.hash_from_outcome(key)

        ordered = in_time_order(sort_keys())
        while hashes := [input_hash for _, input_hash in itertools.islice(ordered, SCAN_BATCH)]:
            keys = [self.keys.outcome(input_hash) for input_hash in hashes]
            for input_hash, first in zip(hashes, self._read_fields(keys, "first"), strict=True):
                if first is not None:
                    yield input_hash, Attempt.model_validate_json(first)

    def _scanned(self, pattern: str) -> Iterator[list[str]]:
        """The keys matching `pattern`, SCAN_BATCH at a time, as SCAN returns them."""
        found = self.client.scan_iter(pattern, 1000)
        batch: list[str] = []
        while (key := self._call(lambda: next(found, None))) is not None:
            batch.append(key.decode())
            if len(batch) == SCAN_BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    def _read_fields(self, keys: Sequence[str], field: str) -> list[Any]:
        """HGET `field` of each key, in one pipeline (None where a key or field is absent)."""
        if not keys:
            return []

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.hget(key, field)
            return pipe.execute()

        return self._call(read)

    def history(self, input_hash: str) -> History | None:
        return self.histories([input_hash])[0]

    def histories(self, input_hashes: Sequence[str]) -> list[History | None]:
        if not input_hashes:
            return []

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for input_hash in input_hashes:
                # Not HGETALL: the hash also holds the recent write ids.
                pipe.hmget(self.keys.outcome(input_hash), ["first", "total"])
                pipe.lrange(self.keys.attempts(input_hash), 0, -1)
                pipe.pttl(self.keys.outcome(input_hash))
            return pipe.execute()

        replies = self._call(run)
        now = datetime.now(UTC)
        return [
            self._history(input_hash, *replies[3 * position : 3 * position + 3], now=now)
            for position, input_hash in enumerate(input_hashes)
        ]

    def recorded_writes(self, writes: Sequence[tuple[str, str]]) -> list[bool]:
        """A write id is kept in its outcome's hash, as `w0:<id>` or `w1:<id>` (RECORD_LUA)."""
        if not writes:
            return []

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for input_hash, write_id in writes:
                pipe.hmget(self.keys.outcome(input_hash), [f"w0:{write_id}", f"w1:{write_id}"])
            return pipe.execute()

        return [any(found) for found in self._call(read)]

    def _history(
        self,
        input_hash: str,
        fields: list[bytes | None],
        attempts: list[bytes],
        ttl_ms: int,
        *,
        now: datetime,
    ) -> History | None:
        first_json, total = fields
        if first_json is None or total is None:
            return None
        # PTTL is -1 for a key kept forever; report expiry as the SQLite store does.
        expires_at = now + timedelta(milliseconds=ttl_ms) if ttl_ms > 0 else None
        first = Attempt.model_validate_json(first_json)
        return History(
            input_hash=input_hash,
            first=first,
            attempts=with_first(
                first, Expander(first).attempts(attempts), int(total), self.max_attempts_per_hash
            ),
            total_attempts=int(total),
            expires_at=expires_at,
        )

    def first_required(self, contract_version: str, case_id: str) -> FirstRequired | None:
        key = self.keys.contract(contract_version, case_id)  # in its shard on a cluster

        def read() -> list[bytes | None]:
            return cast("list[bytes | None]", self.client.hmget(key, ["required", "input_hash"]))

        required, input_hash = self._call(read)
        if required is None or input_hash is None:
            return None  # expired with the pair's outcomes, or never recorded
        return FirstRequired(json.loads(required), input_hash.decode())

    def hashes_for_case(self, case_id: str, limit: int | None = None) -> list[str]:
        """Read newest first a page at a time, each member checked against its outcome in one
        more round trip: gone (expired) or older than its `since` (indexed in a history that
        expired, the hash recorded again since by other cases only), it is left out. A Redis
        Cluster's index is in pieces (one per shard), read together and merged newest first,
        ties the greater hash first as one sorted set orders them."""
        pieces = self.keys.case_pieces(case_id)
        page = min(limit or CASE_PAGE, CASE_PAGE)
        members = self._case_pages(pieces[0], page) if len(pieces) == 1 else self._merged(pieces)
        found: list[str] = []
        while limit is None or len(found) < limit:
            read = list(itertools.islice(members, page))
            if not read:
                break

            def check(read: list[tuple[bytes, float]] = read) -> list[Any]:
                pipe = self.client.pipeline(transaction=False)
                for member, _ in read:
                    pipe.hmget(self.keys.outcome(member.decode()), ["total", "since"])
                return pipe.execute()

            for (member, score), (total, since) in zip(read, self._call(check), strict=True):
                if total is not None and score >= int(since or 0):
                    found.append(member.decode())
            if len(read) < page:
                break
        return found if limit is None else found[:limit]

    def _case_pages(self, key: str, page: int) -> Iterator[tuple[bytes, float]]:
        """One sorted set's members newest first, `page` per round trip, each read once the
        one before is used up."""
        start = 0
        while True:

            def read(start: int = start) -> list[tuple[bytes, float]]:
                members = self.client.zrevrange(key, start, start + page - 1, withscores=True)
                return cast("list[tuple[bytes, float]]", members)

            members = self._call(read)
            yield from members
            if len(members) < page:
                return
            start += page

    def _merged(self, pieces: Sequence[str]) -> Iterator[tuple[bytes, float]]:
        """Every piece's members in one pipeline, merged newest first."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for piece in pieces:
                pipe.zrange(piece, 0, -1, withscores=True)
            return pipe.execute()

        members = sorted(
            ((score, member) for piece in self._call(read) for member, score in piece),
            reverse=True,
        )
        return ((member, score) for score, member in members)

    def _newest(
        self,
        streams: Sequence[str],
        field: bytes,
        limit: int,
        parse: Callable[[bytes], Stamped],
    ) -> list[Stamped]:
        """The newest `limit` entries' `field`, parsed, oldest first. Entries of several streams
        (a Redis Cluster's shards) are ordered by their own time, then by entry ID (the time
        the server took them): no one clock orders the entries of different masters."""
        if limit <= 0:  # XREVRANGE rejects COUNT 0; the SQLite store returns nothing
            return []

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.xrevrange(stream, count=limit)
            return pipe.execute()

        pages = cast("list[list[tuple[bytes, dict[bytes, bytes]]]]", self._call(read))
        if len(pages) == 1:
            return [parse(fields[field]) for _, fields in reversed(pages[0])]
        entries = [
            Entry(entry_id, fields.get(b"n", b""), parse(fields[field]))
            for page in pages
            for entry_id, fields in page
        ]
        entries.sort(key=newest_first_key, reverse=True)
        return [cast("Stamped", entry.parsed) for entry in reversed(entries[:limit])]

    def alerts(
        self, limit: int = 100, *, since: datetime | None = None, kind: AlertKind | None = None
    ) -> list[AnyAlert]:
        if since is not None or kind is not None:
            return newest_since(self._alerts_back_to(since), since, limit, kind)
        return self._newest(self.keys.alert_streams(), b"alert", limit, parse_alert)

    def _alerts_back_to(self, since: datetime | None) -> Iterator[AnyAlert]:
        """Alerts newest first, down to the entry ID of `since` less the clock margin (an ID's
        first part is the server's time in milliseconds), several streams merged as _newest()
        orders them."""
        floor_ms = (
            0 if since is None else max(int((since - ALERT_CLOCK_MARGIN).timestamp() * 1000), 0)
        )
        streams = [self._stream_back_to(stream, floor_ms) for stream in self.keys.alert_streams()]
        merged = (
            streams[0]
            if len(streams) == 1
            else heapq.merge(*streams, key=newest_first_key, reverse=True)
        )
        for entry in merged:
            yield cast("AnyAlert", entry.parsed)

    def _stream_back_to(self, stream: str, floor_ms: int) -> Iterator[Entry]:
        """One stream's alerts newest first, a page per round trip, down to `floor_ms`."""
        newest = "+"
        while True:

            def fetch(newest: str = newest) -> Any:
                return self.client.xrevrange(
                    stream, max=newest, min=f"{floor_ms}-0", count=ALERT_PAGE
                )

            page = cast("list[tuple[bytes, dict[bytes, bytes]]]", self._call(fetch))
            for entry_id, fields in page:
                yield Entry(entry_id, fields.get(b"n", b""), parse_alert(fields[b"alert"]))
            if len(page) < ALERT_PAGE:
                return
            newest = f"({page[-1][0].decode()}"

    def alert_count(self) -> int:
        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for stream in self.keys.alert_streams():
                pipe.xlen(stream)
            return pipe.execute()

        return sum(int(count) for count in self._call(read))

    def dead_letter(self, *letters: DeadLetter) -> None:
        if not letters:
            return
        commands = self._letter_commands(letters)
        self._call(lambda: self.router.run(commands))

    def _letter_commands(self, letters: Sequence[DeadLetter]) -> list[Command]:
        """Each letter's XADD, then its ledger entries' close. On a Redis Cluster a letter also
        carries the order its writer gave it (`n`: order_of()), its shards' streams having no
        common order."""
        orders = order_of(len(letters)) if self.in_steps else None
        commands = []
        for index, letter in enumerate(letters):
            stream = self.keys.dead_letters_of(letter.task_id)
            fields: tuple[Any, ...] = ("letter", letter_json(letter, self.dead_letter_max_bytes))
            if orders is not None:
                fields += ("n", orders[index])
            command = ("XADD", stream, "MAXLEN", "~", MAX_DEAD_LETTERS, "*", *fields)
            commands.append(Command(stream, command))
        return commands + self._closes(self._closes_of(letters))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return self._newest(self.keys.dead_letter_streams(), b"letter", limit, read_letter)

    def count_delivery(self, task_id: str) -> int:
        key = self.keys.deliveries(task_id)

        def run() -> int:
            pipe = self.client.pipeline(transaction=False)
            pipe.incr(key)
            pipe.expire(key, DELIVERY_COUNT_TTL_SECONDS)
            count, _ = pipe.execute()
            return int(count)

        return self._call(run)

    def forget_deliveries(self, task_id: str) -> None:
        key = self.keys.deliveries(task_id)
        self._call(lambda: self.client.delete(key))

    def close(self) -> None:
        self.client.close()
