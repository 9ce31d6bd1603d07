"""Writes that wait for replicas: a message is acknowledged only once its write is on them.

Redis replicates asynchronously: a master killed after a record script returned, before its
replica caught up, would lose a first outcome whose message was already acknowledged. So a
store write ends with WAIT, queued last in the pipeline that wrote. WAIT counts the replicas
that acknowledged the calling connection's last write, and a pipeline runs on one connection
(a WAIT on another pooled connection may return at once). Fewer replicas than wanted within
the timeout is a TransientError: the message waits, unacknowledged, as for an outage, and the
retry (same write ids) is a replay.

Which offset is a connection's last write differs between Redis versions (on some, its last
command that replicated anything), and a replay writes nothing: a redelivered message's replay
on a fresh connection could WAIT for nothing while the original write still lags. So the
pipeline sets a mark key just before its WAIT, which then covers everything the master took
before, on whatever connection.

How many replicas to wait for is ReplicaCount's to say, the same for one Redis and for each
master of a Redis Cluster: a set count, or the automatic default, which follows the server as
it changes (a failover leaves the promoted master with no replica; a replica added later is
waited for once it is in sync).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from worker.errors import ConfigurationError, StoreBusy

MARK_TTL_SECONDS = 3_600
WAIT_REPLIES = 2  # what add_wait queues: the mark, then WAIT
# How long the automatic default's answer stands before the server is asked again.
REPLICAS_CHECK_SECONDS = 10.0
ONE_SERVER = ""  # ReplicaCount's key for the one server of a single-Redis store
IN_SYNC = "online"  # a replica's state in INFO replication once its first sync is done


def replica_states(client: redis.Redis) -> dict[str, str]:
    """Each replica the server has connected, by address, with its state (INFO replication:
    `online` once in sync; `wait_bgsave` or `send_bulk` during its first sync)."""
    info = client.info("replication")
    states: dict[str, str] = {}
    for name, value in info.items():
        if name.startswith("slave") and name[5:].isdigit() and isinstance(value, dict):
            states[f"{value.get('ip')}:{value.get('port')}"] = str(value.get("state", ""))
    return states


def online_replicas(client: redis.Redis) -> int:
    """How many replicas are in sync with the server now: one still in its first sync cannot
    acknowledge a write until it has loaded the master's data, and a master killed meanwhile
    leaves it nothing to be promoted with."""
    return sum(state == IN_SYNC for state in replica_states(client).values())


def add_wait(pipe: Any, min_replicas: int, timeout_ms: int, *, mark_key: str) -> bool:
    """Queue the mark and WAIT at the end of `pipe` (its last write must come before); with
    0 replicas queue nothing and return False."""
    if min_replicas <= 0:
        return False
    pipe.set(mark_key, 1, ex=MARK_TTL_SECONDS)
    pipe.execute_command("WAIT", min_replicas, timeout_ms)
    return True


def check_wait(
    reply: Any, min_replicas: int, timeout_ms: int, store_name: str, *, why: str = ""
) -> None:
    """A StoreBusy error unless WAIT's reply counts at least `min_replicas` replicas; `why`:
    what the server says of its replicas, when it says something (short_why())."""
    if isinstance(reply, Exception):
        raise reply
    reached = int(reply)
    if reached < min_replicas:
        raise StoreBusy(
            f"store {store_name}: the write reached {reached} of {min_replicas} "
            f"replica{'' if min_replicas == 1 else 's'} in {timeout_ms} ms "
            f"(EVIDENCE_STORE_MIN_REPLICAS){why}: not acknowledged until the replicas have it"
        )


def short_why(client: redis.Redis) -> str:
    """Why a wait fell short, when the server can tell: its replicas still in their first
    sync; '' when none is (a replica paused or lagging looks in sync) or INFO fails."""
    try:
        states = replica_states(client)
    except redis.RedisError:
        return ""
    syncing = [f"{address} ({state})" for address, state in states.items() if state != IN_SYNC]
    if not syncing:
        return ""
    return f"; still in its first sync: replica {', '.join(syncing)}"


class ReplicaCount:
    """How many replicas each server's writes wait for.

    Set (EVIDENCE_STORE_MIN_REPLICAS): that count on every server, never asked. Unset, per
    server: 1 where it has a replica in sync, else 0; the answer stands for
    REPLICAS_CHECK_SECONDS, and is forgotten at once after a wait fell short or the server
    failed, so the next write asks again: a promoted master with no replica takes writes at
    once, where a count decided at the first write would fail every write until a restart.
    """

    def __init__(
        self,
        min_replicas: int | None,
        *,
        store_name: str,
        check_seconds: float = REPLICAS_CHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fixed = min_replicas
        self._store_name = store_name
        self._check_seconds = check_seconds
        self._clock = clock
        self._known: dict[str, tuple[int, float]] = {}

    def wanted(self, server: str, client: redis.Redis) -> int:
        """Replicas a write to `server` (a key of the caller's: a node's name) waits for;
        may ask `client`, that server's, with INFO."""
        if self.fixed is not None:
            return self.fixed
        now = self._clock()
        known = self._known.get(server)
        if known is None or now - known[1] >= self._check_seconds:
            try:
                online = online_replicas(client)
            except redis.exceptions.NoPermissionError as error:
                # An ACL user without INFO: guessing 0 would quietly give up the guarantee.
                raise ConfigurationError(
                    f"store {self._store_name}: cannot tell whether the server has replicas "
                    f"({error}): set EVIDENCE_STORE_MIN_REPLICAS"
                ) from None
            known = (1 if online else 0, now)
            self._known[server] = known
        return known[0]

    def forget(self, server: str | None = None) -> None:
        """Ask `server` again at its next write (None: every server)."""
        if server is None:
            self._known.clear()
        else:
            self._known.pop(server, None)

    def check(
        self,
        reply: Any,
        wanted: int,
        timeout_ms: int,
        *,
        server: str,
        client: redis.Redis,
        name: str,
    ) -> None:
        """check_wait() of a WAIT that asked for `wanted`; one that fell short forgets the
        server's count first and says why, when the server can tell (short_why())."""
        if not isinstance(reply, Exception) and int(reply) >= wanted:
            return
        self.forget(server)
        why = "" if isinstance(reply, Exception) else short_why(client)
        check_wait(reply, wanted, timeout_ms, name, why=why)


class ReplicaWait:
    """The wait of a single-Redis store's writes for its replicas: how many (ReplicaCount)
    and for how long."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        store_name: str,
        mark_key: str,
        count: ReplicaCount,
        timeout_ms: int,
    ) -> None:
        self._client = client
        self._store_name = store_name
        self._mark_key = mark_key
        self.count = count
        self.timeout_ms = timeout_ms

    def wanted(self) -> int:
        """Replicas the next write waits for (the server may be asked: ReplicaCount)."""
        return self.count.wanted(ONE_SERVER, self._client)

    def add(self, pipe: Any) -> int:
        """Queue the wait at the end of `pipe`, after its writes (add_wait); returns the count
        waited for, 0 when nothing was queued, for check()."""
        wanted = self.wanted()
        add_wait(pipe, wanted, self.timeout_ms, mark_key=self._mark_key)
        return wanted

    def check(self, replies: Sequence[Any], wanted: int) -> None:
        """Check the replies add() queued for `wanted` replicas (none when it was 0)."""
        if not wanted:
            return
        mark, wait = replies
        if isinstance(mark, Exception):
            raise mark
        self.count.check(
            wait,
            wanted,
            self.timeout_ms,
            server=ONE_SERVER,
            client=self._client,
            name=self._store_name,
        )

    def forget(self) -> None:
        """Ask the server again at the next write (after it failed: a failover, say)."""
        self.count.forget()

    def execute(self, pipe: Any) -> list[Any]:
        """Execute `pipe` with the wait at its end: its own replies, once the wait is met."""
        wanted = self.add(pipe)
        replies: list[Any] = pipe.execute()
        if not wanted:
            return replies
        self.check(replies[-WAIT_REPLIES:], wanted)
        return replies[:-WAIT_REPLIES]
