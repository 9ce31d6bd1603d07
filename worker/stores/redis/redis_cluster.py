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

Redirections are followed here rather than by redis-py's ClusterPipeline, because a write must
be followed by WAIT on the same connection (replicas acknowledge a connection's writes) and a
script call that the cluster did not run (MOVED, ASK, TRYAGAIN, NOSCRIPT) must be sent again
while one it did run must not: the pipelines below are the nodes' own.
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
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
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
from worker.stores.redis.replicas import MARK_TTL_SECONDS

T = TypeVar("T")

ROUNDS = 8  # redirections followed for one batch before it waits as a transient error
TRY_AGAIN_PAUSE_S = 0.05

DRIFT_LUA = lua.source("cluster_drift")


@dataclass(frozen=True)
class Batch:
    """What record_many() was given, and what every step spells of it once."""

    items: Sequence[tuple[str, Attempt]]
    ids: Sequence[str | None]
    spelled: list[tuple[str, ...]]  # script_args() per attempt
    raised_at: str  # the time as JSON, an alert's raised_at
    orders: list[str]  # order_of(): the `n` of each attempt's alerts


@dataclass(frozen=True)
class Command:
    """One command for the node that serves `key`'s slot; `script`: its Lua source, when it is
    an EVALSHA the node may not know yet."""

    key: str
    args: tuple[Any, ...]
    script: str | None = None


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
        self._refresh_later = False  # an error may mean a new slot map: ask before next write
        self.layout = ClusterKeyLayout(self.prefix)
        self.keys = self.layout
        self.scripts = Scripts(client)
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
            self._refresh_later = True
            self.replica_count.forget()  # a master may have failed over
            raise TransientError(f"Redis Cluster not ready for now: {error}") from error
        except TransientError:
            self._refresh_later = True
            raise

    def _node_for(self, key: str) -> ClusterNode:
        return self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key))  # type: ignore[no-untyped-call]

    def _run(self, commands: Sequence[Command]) -> list[Any]:
        """Each command on the master of its key's slot, one pipeline per master and round; a
        command the cluster did not run (MOVED, ASK, TRYAGAIN, NOSCRIPT) is sent again, on the
        node it names, in the next round. A round's replies are the commands' own: a command
        is never sent twice once a node ran it."""
        if self._refresh_later:
            self.client.nodes_manager.initialize()
            self._refresh_later = False
        replies: list[Any] = [None] * len(commands)
        pending: dict[int, ClusterNode | None] = dict.fromkeys(range(len(commands)))
        for _ in range(ROUNDS):
            by_node: dict[str, tuple[ClusterNode, list[tuple[int, bool]]]] = {}
            for index, asking in pending.items():
                node = asking or self._node_for(commands[index].key)
                by_node.setdefault(node.name, (node, []))[1].append((index, asking is not None))
            again: dict[int, ClusterNode | None] = {}
            for node, items in by_node.values():
                for index, outcome in self._send(node, commands, items):
                    if isinstance(outcome, Exception):
                        asked = pending[index] is not None
                        again[index] = self._redirect(outcome, node, commands[index], asked)
                    else:
                        replies[index] = outcome
            if not again:
                return replies
            pending = again
        raise TransientError(
            f"Redis Cluster kept redirecting {len(pending)} writes (a slot migrating?)"
        )

    def _redirect(
        self,
        error: Exception,
        node: ClusterNode,
        command: Command,
        asked: bool,
    ) -> ClusterNode | None:
        """Where a command the cluster did not run goes next (None: its slot's master, as the
        refreshed slot map says); any other error is raised."""
        if isinstance(error, MovedError):  # the slot has moved: ask the cluster its new map
            self.client.nodes_manager.initialize()
            return None
        if isinstance(error, AskError):  # the slot is migrating and this key is there now
            return self._node_at(error.host, error.port)
        if isinstance(error, TryAgainError):  # the call's keys are on both sides of a move
            time.sleep(TRY_AGAIN_PAUSE_S)
            return None
        if isinstance(error, NoScriptError) and command.script is not None:
            # A new node, or a replica promoted since the script was loaded.
            self._redis_of(node).script_load(command.script)
            return node if asked else None
        raise error

    def _send(
        self, node: ClusterNode, commands: Sequence[Command], items: list[tuple[int, bool]]
    ) -> list[tuple[int, Any]]:
        """One pipeline on `node`: the commands, then the wait for its replicas (a mark in the
        first command's shard, then WAIT: see worker/stores/redis/replicas.py)."""
        pipe = self._redis_of(node).pipeline(transaction=False)  # one connection: see WAIT
        for index, asking in items:
            if asking:
                pipe.execute_command("ASKING")  # type: ignore[no-untyped-call]
            pipe.execute_command(*commands[index].args)  # type: ignore[no-untyped-call]
        server = self._redis_of(node)
        wanted = self.replica_count.wanted(node.name, server)
        if wanted:
            mark = self.layout.replication_mark_in(commands[items[0][0]].key)
            pipe.set(mark, 1, ex=MARK_TTL_SECONDS)
            pipe.execute_command("WAIT", wanted, self.replica_timeout_ms)  # type: ignore[no-untyped-call]
        results = iter(pipe.execute(raise_on_error=False))
        found = []
        for index, asking in items:
            if asking:
                next(results)  # ASKING's OK
            found.append((index, next(results)))
        if wanted:
            # A mark refused (MOVED, mid-migration) leaves WAIT counting the pipeline's own
            # writes, which came before it on this connection.
            _, reached = next(results), next(results)
            self.replica_count.check(
                reached,
                wanted,
                self.replica_timeout_ms,
                server=node.name,
                client=server,
                name=f"{self.name} {node.name}",
            )
        return found

    def _redis_of(self, node: ClusterNode) -> redis.Redis:
        connection = node.redis_connection
        if connection is None:
            self.client.nodes_manager.create_redis_connections([node])  # type: ignore[no-untyped-call]
            connection = node.redis_connection
        assert connection is not None
        return cast("redis.Redis", connection)

    def _node_at(self, host: str, port: int) -> ClusterNode:
        node = self.client.get_node(host=host, port=port)  # type: ignore[no-untyped-call]
        if node is None:
            self.client.nodes_manager.initialize()
            node = self.client.get_node(host=host, port=port)  # type: ignore[no-untyped-call]
        if node is None:
            raise TransientError(f"Redis Cluster redirected to an unknown node {host}:{port}")
        return cast("ClusterNode", node)

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
        for chunk, reply in zip(chunks, self._run(commands), strict=True):
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
        for chunk, reply in zip(chunks, self._run(commands), strict=True):
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
        self._run(commands)

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
        self._call(lambda: self._run(commands))

    def note_published(self, entries: Sequence[LedgerEntry], *, sent: bool = True) -> None:
        if not entries or self.ledger_ttl_seconds <= 0:
            return
        commands = [
            self.scripts.call("note", keys, args)
            for keys, args in self._note_calls(entries, sent=sent)
        ]
        self._call(lambda: self._run(commands))

    def take_lease(self, name: str, holder: str, seconds: int) -> bool:
        """SET NX with the expiry on the lease's master, waiting for its replicas as every
        write does: a lease lost in a failover would let a second holder take it."""
        key = self.keys.lease(name)
        command = Command(key, ("SET", key, holder, "NX", "EX", seconds))
        return self._call(lambda: self._run([command]))[0] is not None

    def confirm_sent(self, write_ids: Sequence[str]) -> None:
        if not write_ids or self.ledger_ttl_seconds <= 0:
            return
        calls = self._confirm_calls(write_ids)
        commands = [self.scripts.call("confirm", keys, args) for keys, args in calls]
        self._call(lambda: self._run(commands))

    def close_entries(self, write_ids: Sequence[str]) -> None:
        closes: list[tuple[str, int | None]] = []
        for write_id in write_ids:
            task_id, position = task_and_position(write_id)
            closes.append((task_id, int(position)))
        if closes:
            commands = self._closes(closes)
            self._call(lambda: self._run(commands))


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
