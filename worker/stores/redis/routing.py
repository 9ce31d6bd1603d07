"""How a Redis store's commands reach its servers: a list of commands (Command: a key, the
command, its script's source for an EVALSHA) in, their replies out, each write waited on by
the replicas of the server that took it. SingleRouter: one server, one pipeline, then the wait
(replicas.py); ClusterRouter: the master of each key's slot, one pipeline per master,
redirections followed, each master's replicas waited for. Both load a script a server lacks
(NOSCRIPT) and send again only the calls it refused, so no call runs twice.

Redirections are followed here rather than by redis-py's ClusterPipeline, because a write must
be followed by WAIT on the same connection (replicas acknowledge a connection's writes) and a
script call that the cluster did not run (MOVED, ASK, TRYAGAIN, NOSCRIPT) must be sent again
while one it did run must not: the pipelines below are the nodes' own.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from hashlib import sha1
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)

from worker.errors import ConfigurationError, TransientError
from worker.settings import masked_url
from worker.stores.redis.keys import ClusterKeyLayout
from worker.stores.redis.replicas import MARK_TTL_SECONDS, ReplicaCount, ReplicaWait

ROUNDS = 8  # redirections followed for one batch before it waits as a transient error
TRY_AGAIN_PAUSE_S = 0.05


@dataclass(frozen=True)
class Command:
    """One command for the node that serves `key`'s slot; `script`: its Lua source, when it is
    an EVALSHA the node may not know yet."""

    key: str
    args: tuple[Any, ...]
    script: str | None = None


class Scripts:
    """The SHA-1 of each script, as EVALSHA names it, and the call of one (a Command); the
    scripts named `whole` are sent whole (EVAL), which no server refuses with NOSCRIPT."""

    def __init__(self, sources: dict[str, str], *, whole: Collection[str] = ()) -> None:
        self.sources = sources
        self.sha = {name: sha1(src.encode()).hexdigest() for name, src in sources.items()}
        self.whole = frozenset(whole)

    def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Command:
        if name in self.whole:
            return Command(keys[0], ("EVAL", self.sources[name], len(keys), *keys, *args))
        return Command(
            keys[0], ("EVALSHA", self.sha[name], len(keys), *keys, *args), self.sources[name]
        )


class SingleRouter:
    """Sends a Redis store's commands to its one server: one pipeline, the wait for the
    server's replicas at its end (ReplicaWait); the calls of a script the server lacks
    (NOSCRIPT: a restart, SCRIPT FLUSH) once more after loading it."""

    not_ready: tuple[type[Exception], ...] = ()  # no cluster to settle

    def __init__(self, client: redis.Redis, replicas: ReplicaWait) -> None:
        self.client = client
        self.replicas = replicas

    def failed(self) -> None:
        """Nothing to ask again: the one server's address is the store's."""

    def run(self, commands: Sequence[Command]) -> list[Any]:
        """The commands in one pipeline, then the replicas' wait; a command that failed
        otherwise than NOSCRIPT fails them all, those that ran included (a retry with the same
        write ids replays them). The last pipeline's wait, after the last write, counts."""
        replies: list[Any] = [None] * len(commands)
        pending = range(len(commands))
        for _ in range(2):
            pipe = self.client.pipeline(transaction=False)
            for index in pending:
                pipe.execute_command(*commands[index].args)  # type: ignore[no-untyped-call]
            wanted = self.replicas.add(pipe)
            results = pipe.execute(raise_on_error=False)
            missing = []
            for index, result in zip(pending, results, strict=False):
                if isinstance(result, NoScriptError) and commands[index].script is not None:
                    missing.append(index)
                elif isinstance(result, Exception):
                    raise result
                else:
                    replies[index] = result
            if not missing:
                self.replicas.check(results[len(pending) :], wanted)
                return replies
            for script in {commands[index].script or "" for index in missing}:
                self.client.script_load(script)
            pending = missing  # type: ignore[assignment]
        raise TransientError("Redis keeps forgetting the store's scripts (SCRIPT FLUSH loop?)")


class ClusterRouter:
    """Sends a Redis store's commands on a Redis Cluster: each on the master of its key's slot,
    one pipeline per master and round, followed by the wait for that master's replicas;
    redirections (MOVED, ASK, TRYAGAIN) and a node without a script (NOSCRIPT) are followed
    here (see the module's docstring)."""

    def __init__(
        self,
        client: RedisCluster,
        layout: ClusterKeyLayout,
        replica_count: ReplicaCount,
        replica_timeout_ms: int,
        name: str,
    ) -> None:
        self.client = client
        self.layout = layout
        self.replica_count = replica_count  # per master, by its name
        self.replica_timeout_ms = replica_timeout_ms
        self.name = name
        self.refresh_later = False  # an error may mean a new slot map: ask before next write

    # CLUSTERDOWN while a master fails over, TRYAGAIN mid-migration, no node for a slot yet:
    # the cluster takes the write again once it has settled.
    not_ready: tuple[type[Exception], ...] = (
        ClusterDownError,
        TryAgainError,
        RedisClusterException,
    )

    def failed(self) -> None:
        """A write failed: the slot map may have changed, ask for it before the next."""
        self.refresh_later = True

    def _node_for(self, key: str) -> ClusterNode:
        return self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key))  # type: ignore[no-untyped-call]

    def run(self, commands: Sequence[Command]) -> list[Any]:
        """Each command on the master of its key's slot, one pipeline per master and round; a
        command the cluster did not run (MOVED, ASK, TRYAGAIN, NOSCRIPT) is sent again, on the
        node it names, in the next round. A round's replies are the commands' own: a command
        is never sent twice once a node ran it."""
        if self.refresh_later:
            self.client.nodes_manager.initialize()
            self.refresh_later = False
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
