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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from worker.errors import ConfigurationError, TransientError

MARK_TTL_SECONDS = 3_600
WAIT_REPLIES = 2  # what add_wait queues: the mark, then WAIT


def connected_replicas(client: redis.Redis) -> int:
    """How many replicas the server has connected now (INFO replication)."""
    info = client.info("replication")
    return int(info.get("connected_slaves", 0))


def add_wait(pipe: Any, min_replicas: int, timeout_ms: int, *, mark_key: str) -> bool:
    """Queue the mark and WAIT at the end of `pipe` (its last write must come before); with
    0 replicas queue nothing and return False."""
    if min_replicas <= 0:
        return False
    pipe.set(mark_key, 1, ex=MARK_TTL_SECONDS)
    pipe.execute_command("WAIT", min_replicas, timeout_ms)
    return True


def check_wait(reply: Any, min_replicas: int, timeout_ms: int, store_name: str) -> None:
    """A TransientError unless WAIT's reply counts at least `min_replicas` replicas."""
    if isinstance(reply, Exception):
        raise reply
    reached = int(reply)
    if reached < min_replicas:
        raise TransientError(
            f"store {store_name}: the write reached {reached} of {min_replicas} "
            f"replica{'' if min_replicas == 1 else 's'} in {timeout_ms} ms "
            "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"
        )


class ReplicaWait:
    """One store's wait for its replicas: how many (None: 1 if the server has a replica
    connected at the first write, else 0; resolved once) and for how long."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        store_name: str,
        mark_key: str,
        min_replicas: int | None,
        timeout_ms: int,
    ) -> None:
        self._client = client
        self._store_name = store_name
        self._mark_key = mark_key
        self._wanted = min_replicas
        self.timeout_ms = timeout_ms

    def wanted(self) -> int:
        """Replicas each write waits for: the first call may ask the server (INFO)."""
        if self._wanted is None:
            try:
                connected = connected_replicas(self._client)
            except redis.exceptions.NoPermissionError as error:
                # An ACL user without INFO: guessing 0 would quietly give up the guarantee.
                raise ConfigurationError(
                    f"store {self._store_name}: cannot tell whether the server has replicas "
                    f"({error}): set EVIDENCE_STORE_MIN_REPLICAS"
                ) from None
            self._wanted = 1 if connected > 0 else 0
        return self._wanted

    def add(self, pipe: Any) -> bool:
        """Queue the wait at the end of `pipe`, after its writes (add_wait)."""
        return add_wait(pipe, self.wanted(), self.timeout_ms, mark_key=self._mark_key)

    def check(self, replies: Sequence[Any]) -> None:
        """Check the replies add() queued (none when it queued nothing)."""
        if not replies:
            return
        mark, wait = replies
        if isinstance(mark, Exception):
            raise mark
        check_wait(wait, self.wanted(), self.timeout_ms, self._store_name)

    def execute(self, pipe: Any) -> list[Any]:
        """Execute `pipe` with the wait at its end: its own replies, once the wait is met."""
        added = self.add(pipe)
        replies: list[Any] = pipe.execute()
        if not added:
            return replies
        self.check(replies[-WAIT_REPLIES:])
        return replies[:-WAIT_REPLIES]
