"""The shared store on a Redis Cluster: RedisStore's scripts, run shard by shard, in steps.

A Lua script may only touch keys of one slot, so the cluster's keys are in SHARDS shards
(keys.ClusterKeyLayout) and a batch is recorded in three steps, each one pipeline per master:

1. drift: each valid attempt's (contract version, case ID) pair checks its required set in the
   pair's shard (DRIFT_LUA), and notes what it found under the write id for a day, so that a
   worker killed before step 2 replays the same finding;
2. record: RECORD_LUA without its steps, per hash shard, given what step 1 found; the case
   index is kept in pieces, one per shard, each written with its hashes' outcomes;
3. finish: the ledger entries' close (one call per task, in the task's shard) and the drift
   notes' removal (one DEL per shard).

Every step is idempotent under the write id, and the worker acknowledges a message only after
record_many() returned, so a worker killed between steps leaves the message to a redelivery,
which replays what is done and does the rest.

Each step's commands reach the masters through a ClusterRouter (cluster_routing.py): one
pipeline per master, redirections followed, each master's replicas waited for.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import redis
from pydantic_core import to_json
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    ClusterDownError,
    RedisClusterException,
    TryAgainError,
)

from contracts import Attempt
from worker.errors import ConfigurationError, TransientError
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.settings import REPLICA_TIMEOUT_MS, masked_url, redis_seeds
from worker.stores.codec import letter_json, required_set_json, script_args
from worker.stores.contract import DeadLetter, LedgerEntry, Recorded, recorded_ms, task_and_position
from worker.stores.redis import lua
from worker.stores.redis.cluster_routing import ClusterRouter, Command
from worker.stores.redis.keys import ClusterKeyLayout
from worker.stores.redis.redis_ledger import CLOSE_LUA, CONFIRM_LUA, NOTE_LUA
from worker.stores.redis.redis_store import (
    ATTEMPTS_PER_CALL,
    CASE_PAGE,
    MAX_ALERTS,
    MAX_DEAD_LETTERS,
    RECORD_LUA,
    RedisStore,
)

T = TypeVar("T")


DRIFT_LUA = lua.source("cluster_drift")


@dataclass(frozen=True)
class Batch:
    """What record_many() was given, and what every step spells of it once."""

    items: Sequence[tuple[str, Attempt]]
    ids: Sequence[str | None]
    spelled: list[tuple[str, ...]]  # script_args() per attempt
    raised_at: str  # the time as JSON, an alert's raised_at
    orders: list[str]  # order_of(): the `n` of each attempt's alerts


class Scripts:
    """The SHA-1 of each script, as EVALSHA names it."""

    def __init__(self, client: RedisCluster) -> None:
        self.sources = {
            "record": RECORD_LUA,
            "drift": DRIFT_LUA,
            "close": CLOSE_LUA,
            "note": NOTE_LUA,
            "confirm": CONFIRM_LUA,
        }
        self.sha = {name: client.register_script(src).sha for name, src in self.sources.items()}

    def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Command:
        return Command(
            keys[0], ("EVALSHA", self.sha[name], len(keys), *keys, *args), self.sources[name]
        )


class RedisClusterStore(RedisStore):
    """ResultStore on a Redis Cluster (keys in shards, see keys.ClusterKeyLayout)."""

    client: RedisCluster  # type: ignore[assignment]  # the cluster client, not one server's

    def __init__(self, client: RedisCluster, *, name: str | None = None, **options: Any) -> None:
        super().__init__(client, name=name or "redis cluster", **options)  # type: ignore[arg-type]
        # Replicas each master's writes wait for: self.replica_count, per master by its name
        # (worker/stores/redis/replicas.py ReplicaCount, as on one Redis).
        self.replica_timeout_ms: int = options.get("replica_timeout_ms", REPLICA_TIMEOUT_MS)
        self.layout = ClusterKeyLayout(self.prefix)
        self.keys = self.layout
        self.scripts = Scripts(client)
        self.router = ClusterRouter(
            client, self.layout, self.replica_count, self.replica_timeout_ms, self.name
        )
        self.masters = len(client.get_primaries())  # type: ignore[no-untyped-call]
        # How `score`'s summary and the worker's start line name it (stores.describe()).
        self.description = self.name

    @classmethod
    def from_url(
        cls, url: str, *, client_options: Mapping[str, Any] | None = None, **options: Any
    ) -> RedisClusterStore:
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
        try:
            return super()._call(operation)
        except (ClusterDownError, TryAgainError, RedisClusterException) as error:
            # CLUSTERDOWN while a master fails over, TRYAGAIN mid-migration, no node for a
            # slot yet: the cluster takes the write again once it has settled.
            self.router.refresh_later = True
            self.replica_count.forget()  # a master may have failed over
            raise TransientError(f"Redis Cluster not ready for now: {error}") from error
        except TransientError:
            self.router.refresh_later = True
            raise

    def record_many(
        self,
        items: Sequence[tuple[str, Attempt]],
        *,
        now: datetime,
        write_ids: Sequence[str | None] | None = None,
        letters: Sequence[DeadLetter] = (),
    ) -> list[Recorded]:
        """The three steps of the module's docstring, each one pipeline per master; `letters`
        go before them, in dead_letter()'s own round trip (their streams are spread over the
        masters)."""
        self.dead_letter(*letters)
        if not items:
            return []
        ids: Sequence[str | None] = [None] * len(items) if write_ids is None else write_ids
        batch = Batch(
            items,
            ids,
            spelled=[script_args(attempt) for _, attempt in items],  # once, for both steps
            raised_at=to_json(now).decode(),
            orders=order_of(len(items)),
        )
        found = self._call(lambda: self._check_drift(batch))
        replies = self._call(lambda: self._record_shards(batch, found))
        self._call(lambda: self._finish(items, ids, replies))
        return [
            self._recorded(input_hash, attempt, reply[:5], now)
            for (input_hash, attempt), reply in zip(items, replies, strict=True)
        ]

    def _check_drift(self, batch: Batch) -> list[str]:
        """Step 1: what the drift check found per attempt ('' for one it does not apply to)."""
        items, ids, spelled = batch.items, batch.ids, batch.spelled
        by_shard: dict[str, list[int]] = defaultdict(list)
        contracts: dict[int, str] = {}
        for index, (_, attempt) in enumerate(items):
            if spelled[index][8]:  # required_set_json(): a valid row with version and case
                key = self.keys.contract(attempt.contract_version, attempt.case_id)
                contracts[index] = key
                by_shard[self.layout.alerts_in(key)].append(index)
        commands: list[Command] = []
        chunks: list[list[int]] = []
        for stream, indexes in by_shard.items():
            for start in range(0, len(indexes), ATTEMPTS_PER_CALL):
                chunk = indexes[start : start + ATTEMPTS_PER_CALL]
                keys = [stream]
                args: list[Any] = [self.ttl_seconds, MAX_ALERTS, batch.raised_at]
                for index in chunk:
                    input_hash = items[index][0]
                    write = ids[index] or ""
                    keys += (contracts[index], self.layout.drift_memo(contracts[index], write))
                    own = spelled[index]
                    args += (own[8], input_hash, own[0], own[1], own[7], write)
                    args.append(batch.orders[index])
                commands.append(self.scripts.call("drift", keys, args))
                chunks.append(chunk)
        found = [""] * len(items)
        for chunk, reply in zip(chunks, self.router.run(commands), strict=True):
            for index, text in zip(chunk, reply, strict=True):
                found[index] = text.decode() if isinstance(text, bytes) else str(text)
        return found

    def _record_shards(self, batch: Batch, found: list[str]) -> list[list[Any]]:
        """Step 2: RECORD_LUA per hash shard, in the batch's order within each shard."""
        items, ids, spelled = batch.items, batch.ids, batch.spelled
        by_shard: dict[str, list[int]] = defaultdict(list)
        for index, (input_hash, _) in enumerate(items):
            by_shard[self.layout.alerts_in(self.keys.outcome(input_hash))].append(index)
        head = self._record_head(batch.raised_at, steps=False)  # step 1 checked drift, 3 closes
        commands: list[Command] = []
        chunks: list[list[int]] = []
        for stream, indexes in by_shard.items():
            for start in range(0, len(indexes), ATTEMPTS_PER_CALL):
                chunk = indexes[start : start + ATTEMPTS_PER_CALL]
                keys = [stream, stream]  # the ledger's place: not touched without steps
                args = list(head)
                for index in chunk:
                    input_hash, attempt = items[index]
                    outcome = self.keys.outcome(input_hash)
                    # No case ID: a key the script does not touch (it is given one per attempt).
                    case = self.layout.case_in(outcome, attempt.case_id or "")
                    keys += (outcome, self.keys.attempts(input_hash), outcome, outcome, case)
                    args += spelled[index]
                    args += (
                        ids[index] or "",
                        recorded_ms(attempt),
                        found[index],
                        batch.orders[index],
                    )
                commands.append(self.scripts.call("record", keys, args))
                chunks.append(chunk)
        replies: list[list[Any]] = [[] for _ in items]
        for chunk, reply in zip(chunks, self.router.run(commands), strict=True):
            for index, one in zip(chunk, reply, strict=True):
                replies[index] = one
        return replies

    def _finish(
        self,
        items: Sequence[tuple[str, Attempt]],
        ids: Sequence[str | None],
        replies: list[list[Any]],
    ) -> None:
        """Step 3: close each task's ledger entries, drop the drift notes of each shard."""
        closes: list[tuple[str, int | None]] = []
        memos: dict[str, list[str]] = defaultdict(list)
        for (_, attempt), write in zip(items, ids, strict=True):
            if write:
                task_id, position = task_and_position(write)
                closes.append((task_id, int(position)))
                if required_set_json(attempt):
                    contract = self.keys.contract(attempt.contract_version, attempt.case_id)
                    memos[self.layout.alerts_in(contract)].append(
                        self.layout.drift_memo(contract, write)
                    )
        commands = self._closes(closes)
        commands += [Command(shard[0], ("DEL", *shard)) for shard in memos.values()]
        self.router.run(commands)

    def _closes(self, closes: Sequence[tuple[str, int | None]]) -> list[Command]:
        """CLOSE_LUA once per task for its positions (a None among them: all its entries)."""
        by_task: dict[str, list[int | None]] = defaultdict(list)
        for task_id, position in closes:
            by_task[task_id].append(position)
        return [
            self.scripts.call(
                "close",
                [self.keys.ledger_of(task_id), self.keys.ledger_task(task_id)],
                [task_id, *([""] if None in positions else positions)],
            )
            for task_id, positions in by_task.items()
        ]

    def hashes_for_case(self, case_id: str, limit: int | None = None) -> list[str]:
        """The case index's pieces (one per shard) merged newest first, ties the greater hash
        first as one sorted set orders them, each member checked against its outcome as
        RedisStore does."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
            for piece in self.layout.case_pieces(case_id):
                pipe.zrange(piece, 0, -1, withscores=True)
            return cast("list[Any]", pipe.execute())

        members = sorted(
            ((score, member) for piece in self._call(read) for member, score in piece),
            reverse=True,
        )
        found: list[str] = []
        for start in range(0, len(members), CASE_PAGE):
            page = members[start : start + CASE_PAGE]

            def check(page: list[tuple[float, bytes]] = page) -> list[Any]:
                pipe = self.client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
                for _, member in page:
                    pipe.hmget(self.keys.outcome(member.decode()), ["total", "since"])
                return cast("list[Any]", pipe.execute())

            for (score, member), (total, since) in zip(page, self._call(check), strict=True):
                if total is not None and score >= int(since or 0):
                    found.append(member.decode())
            if limit is not None and len(found) >= limit:
                break
        return found if limit is None else found[:limit]

    def dead_letter(self, *letters: DeadLetter) -> None:
        if not letters:
            return
        commands = [
            Command(
                stream := self.keys.dead_letters_of(letter.task_id),
                (
                    "XADD",
                    stream,
                    "MAXLEN",
                    "~",
                    MAX_DEAD_LETTERS,
                    "*",
                    "letter",
                    letter_json(letter, self.dead_letter_max_bytes),
                    "n",
                    order,
                ),
            )
            for letter, order in zip(letters, order_of(len(letters)), strict=True)
        ]
        commands += self._closes(self._closes_of(letters))
        self._call(lambda: self.router.run(commands))

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        if not entries or self.ledger_ttl_seconds <= 0:
            return
        commands = [
            self.scripts.call("note", keys, args)
            for keys, args in self._note_calls(entries, sent=sent)
        ]
        self._call(lambda: self.router.run(commands))

    def take_lease(self, name: str, holder: str, seconds: int) -> bool:
        """SET NX with the expiry on the lease's master, waiting for its replicas as every
        write does: a lease lost in a failover would let a second holder take it."""
        key = self.keys.lease(name)
        command = Command(key, ("SET", key, holder, "NX", "EX", seconds))
        return self._call(lambda: self.router.run([command]))[0] is not None

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        if not write_ids or self.ledger_ttl_seconds <= 0:
            return
        calls = self._confirm_calls(write_ids)
        commands = [self.scripts.call("confirm", keys, args) for keys, args in calls]
        self._call(lambda: self.router.run(commands))

    def close_entries(self, write_ids: Sequence[str]) -> None:
        closes: list[tuple[str, int | None]] = []
        for write_id in write_ids:
            task_id, position = task_and_position(write_id)
            closes.append((task_id, int(position)))
        if closes:
            commands = self._closes(closes)
            self._call(lambda: self.router.run(commands))


def order_of(count: int) -> list[str]:
    """The `n` field of each of `count` entries written together: this worker's clock in
    nanoseconds, then the entry's place, as text that sorts as the numbers do. Several masters'
    streams have no common order; entries of one time (raised_at, received_at) are read back
    in the order their writer gave them (redis.newest_first_key)."""
    now = f"{time.time_ns():020d}"
    return [f"{now}{index:06d}" for index in range(count)]


def cluster_name(url: str, masters: int) -> str:
    """How messages name a cluster store: "redis://host:7000/0 (Redis Cluster, 3 masters)"."""
    return f"{masked_url(url)} (Redis Cluster, {masters} masters)"


def cluster_enabled(client: redis.Redis) -> bool:
    """Whether `client`'s server is a node of a Redis Cluster (INFO cluster)."""
    return bool(int(client.info("cluster").get("cluster_enabled", 0)))


def cluster_masters(client: redis.Redis, name: str) -> int | None:
    """The number of masters when `client`'s server is a node of a Redis Cluster, else None.
    A cluster with a slot no master serves cannot take every write: a ConfigurationError."""
    if not cluster_enabled(client):
        return None
    reply = client.execute_command("CLUSTER", "INFO")  # type: ignore[no-untyped-call]
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    info = dict(line.split(":", 1) for line in text.split() if ":" in line)
    assigned = int(info.get("cluster_slots_assigned", 0))
    if info.get("cluster_state") != "ok" or assigned < CLUSTER_SLOTS:
        raise ConfigurationError(
            f"store {name}: the Redis Cluster is not serving every slot "
            f"(cluster_state:{info.get('cluster_state')}, {assigned} of {CLUSTER_SLOTS} slots "
            "assigned): fix it (redis-cli --cluster fix HOST:PORT) before starting"
        )
    return int(info.get("cluster_size", 0))


CLUSTER_SLOTS = 16_384
