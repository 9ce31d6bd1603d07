"""How a Redis store's commands reach a Redis Cluster: to the master of each key's slot, one
pipeline per master, redirections followed, each master's replicas waited for (ClusterRouter);
a command for the node of its key's slot (Command).

Redirections are followed here rather than by redis-py's ClusterPipeline, because a write must
be followed by WAIT on the same connection (replicas acknowledge a connection's writes) and a
script call that the cluster did not run (MOVED, ASK, TRYAGAIN, NOSCRIPT) must be sent again
while one it did run must not: the pipelines below are the nodes' own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import AskError, MovedError, NoScriptError, TryAgainError

from worker.errors import TransientError
from worker.stores.redis.keys import ClusterKeyLayout
from worker.stores.redis.replicas import MARK_TTL_SECONDS, ReplicaCount

ROUNDS = 8  # redirections followed for one batch before it waits as a transient error
TRY_AGAIN_PAUSE_S = 0.05


@dataclass(frozen=True)
class Command:
    """One command for the node that serves `key`'s slot; `script`: its Lua source, when it is
    an EVALSHA the node may not know yet."""

    key: str
    args: tuple[Any, ...]
    script: str | None = None


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
