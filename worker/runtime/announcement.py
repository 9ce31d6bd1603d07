"""One queue, one store: a worker announces its store on the broker it consumes from, and
refuses to start when workers on the same queue write to another store.

Two workers on one queue with two stores split its messages between them: each store holds
half the records, and a nondeterministic pair split across them is never compared. So the
consumer bootstep below claims, per queue the worker consumes, the name
`evidence.store.<queue>` on the broker for its store's identity (worker/stores/identity.py:
no secrets) before the event loop takes any message, and renews the claim every third of
EVIDENCE_STORE_ANNOUNCEMENT_TTL_SECONDS from the consumer's timer. A claim held for another
store stops the worker: one line, exit 2 (signals.exit_unusable). Nobody removes a claim: it
expires once the last worker that renewed it has been gone for the TTL, so a restart with a
new store waits at most that long. A conflict found by a renewal (the claim had lapsed, say
with a Redis broker restarted empty, and a worker with another store took it) is an ERROR
line at every renewal while it lasts.

On a Redis broker the claim is a key with a TTL: SET NX EX, else GET and compare, then EXPIRE.
SET NX is atomic, so of two workers starting at the same moment only one sets the key and the
other reads it. Plain commands, no script: a broker that forbids EVAL works too.

On RabbitMQ nothing expires a message on being read, and reading takes it: the claim is one
persistent message, the identity, in a durable queue `evidence.store.<queue>` declared with
`x-expires` = the TTL (RabbitMQ deletes a queue nobody declared or read from for that long).
A worker reads it with basic_get and requeues it; an empty queue gets its identity. While one
worker holds the message unacknowledged, another would find the queue empty, so each reads
under a lock: the exclusive queue `evidence.store.<queue>.lock`, which only one connection
can declare at a time (others get RESOURCE_LOCKED and wait), and which RabbitMQ deletes when
its connection drops, so a worker that dies holding it blocks nobody.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery import bootsteps

from worker.constants import STORE_ANNOUNCEMENT
from worker.errors import TransientError
from worker.observability.logging import get_logger
from worker.stores.identity import named_store

# Renewals per TTL: two may fail (a broker blip) before the claim lapses.
RENEWALS_PER_TTL = 3
# A claim between two commands that finds the key gone tries again; more means a broken broker.
REDIS_CLAIM_TRIES = 3
# The lock is held for a few round trips; waiting longer means a worker stuck holding it.
LOCK_WAIT_SECONDS = 0.05
LOCK_TRIES = 100
LOCK_SUFFIX = ".lock"


def announcement_name(queue: str) -> str:
    """The key (Redis) or queue (RabbitMQ) that holds `queue`'s store."""
    return STORE_ANNOUNCEMENT.format(queue=queue)


def refusal(queue: str, theirs: str, mine: str, *, ttl_seconds: int) -> str:
    """The line a worker stops with when `queue`'s workers write to another store."""
    return (
        f"workers on queue {queue} write to store {theirs}, but this worker's store is {mine}: "
        "give every worker on a queue the same EVIDENCE_STORE_URL and EVIDENCE_KEY_PREFIX, or "
        "this one another queue; once the other workers have stopped, their announcement "
        f"expires within {ttl_seconds} s (EVIDENCE_STORE_ANNOUNCEMENT_TTL_SECONDS)"
    )


def conflict(announced: str | None, mine: str) -> str | None:
    """The store another worker announced, when it is not `mine`; None when the queue is
    free (nothing announced) or already ours."""
    return announced if announced is not None and announced != mine else None


def claim_on_redis(client: Any, queue: str, mine: str, *, ttl_seconds: int) -> str | None:
    """Claim `queue` for store `mine` on a Redis broker (a redis-py client); renews a claim of
    ours; returns the other store when another holds it."""
    key = announcement_name(queue)
    for _ in range(REDIS_CLAIM_TRIES):
        if client.set(key, mine, nx=True, ex=ttl_seconds):
            return None
        announced = client.get(key)
        if announced is None:  # expired between the two commands: claim it again
            continue
        theirs = conflict(announced.decode("utf-8", "replace"), mine)
        if theirs is None:
            # Another process's key may have replaced ours since the GET: EXPIRE then only
            # lengthens theirs, which the next renewal reports.
            client.expire(key, ttl_seconds)
        return theirs
    raise TransientError(f"the broker keeps dropping key {key} as it is claimed")


def claim_on_amqp(
    connection: Any,
    queue: str,
    mine: str,
    *,
    ttl_seconds: int,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Claim `queue` for store `mine` on RabbitMQ (a connected kombu Connection), as
    claim_on_redis does; the module docstring says how."""
    from amqp import Message
    from amqp.exceptions import NotFound

    name = announcement_name(queue)
    channel = _lock(connection, name + LOCK_SUFFIX, sleep)
    try:
        try:
            channel.queue_declare(name, passive=True)
        except NotFound:  # RabbitMQ closed the channel; the lock is the connection's
            channel = connection.channel()
            channel.queue_declare(
                name, durable=True, auto_delete=False, arguments={"x-expires": ttl_seconds * 1000}
            )
        message = channel.basic_get(name, no_ack=False)  # reading renews x-expires
        if message is None:
            channel.basic_publish(
                Message(mine, delivery_mode=2, content_type="text/plain"),
                exchange="",
                routing_key=name,
            )
            return None
        channel.basic_reject(message.delivery_tag, requeue=True)
        body = message.body
        return conflict(body.decode("utf-8", "replace") if isinstance(body, bytes) else body, mine)
    finally:
        channel.queue_delete(name + LOCK_SUFFIX)
        channel.close()


def _lock(connection: Any, lock: str, sleep: Callable[[float], None]) -> Any:
    """A channel of `connection`, once the exclusive queue `lock` is this connection's."""
    from amqp.exceptions import ResourceLocked

    for _ in range(LOCK_TRIES):
        channel = connection.channel()
        try:
            channel.queue_declare(lock, exclusive=True, auto_delete=True)
        except ResourceLocked:  # RabbitMQ closed this channel: the next try opens another
            sleep(LOCK_WAIT_SECONDS)
            continue
        return channel
    raise TransientError(
        f"queue {lock} stayed locked for {LOCK_TRIES * LOCK_WAIT_SECONDS:.0f} s: a worker "
        "holds it without reading the store announcement"
    )


def claims(app: Any, queues: list[str], mine: str, *, ttl_seconds: int) -> list[tuple[str, str]]:
    """Claim each of `queues` on `app`'s broker for store `mine`: (queue, other store) for each
    claim another store holds. A broker that is neither Redis nor RabbitMQ announces nothing."""
    refused: list[tuple[str, str]] = []
    with app.connection_for_write() as connection:
        driver = connection.transport.driver_type
        if driver not in {"redis", "amqp"}:
            return refused
        for queue in queues:
            if driver == "redis":
                client = connection.default_channel.client
                theirs = claim_on_redis(client, queue, mine, ttl_seconds=ttl_seconds)
            else:
                connection.connect()
                theirs = claim_on_amqp(connection, queue, mine, ttl_seconds=ttl_seconds)
            if theirs is not None:
                refused.append((queue, theirs))
    return refused


class StoreAnnouncementStep(bootsteps.StartStopStep):  # type: ignore[misc]  # celery has no hints
    """Claim each consumed queue for this worker's store as the consumer starts (refusing to
    start on another store's claim), and renew the claims from the consumer's timer."""

    requires = ("celery.worker.consumer.connection:Connection",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        settings = c.app.settings
        self.ttl_seconds: int = settings.store_announcement_ttl_seconds
        self.identity = named_store(settings.result_store_url, settings)
        self._entry: Any = None
        self._failing = False
        super().__init__(c, **kwargs)

    def start(self, c: Any) -> None:
        # Runs before Celery's event loop (its last step) takes any message, at every
        # (re)connection to the broker.
        from worker.runtime.signals import exit_unusable

        queues = sorted(c.app.amqp.queues.consume_from)
        try:
            refused = next(iter(self._claims(c.app, queues)), None)
        except c.connection_errors:
            raise  # the consumer reconnects and starts this step again
        except Exception as error:  # the renewals try again; the worker is not at fault
            self._unannounced(error)
            refused = None
        if refused is not None:
            queue, theirs = refused
            exit_unusable(refusal(queue, theirs, self.identity, ttl_seconds=self.ttl_seconds))
        self._entry = c.timer.call_repeatedly(
            self.ttl_seconds / RENEWALS_PER_TTL, self.renew, (c.app, queues)
        )

    def stop(self, c: Any) -> None:
        # The claim stays: other workers on the same store may still be renewing it.
        if self._entry is not None:
            self._entry.cancel()
        self._entry = None

    shutdown = stop

    def renew(self, app: Any, queues: list[str]) -> None:
        try:
            conflicts = self._claims(app, queues)
        except Exception as error:  # said once per outage; the claim lapses after the TTL
            self._unannounced(error)
            return
        self._failing = False
        for queue, theirs in conflicts:
            get_logger().error(
                "evidence_coverage.store_conflict",
                queue=queue,
                store=self.identity,
                announced_store=theirs,
                why="workers on this queue write to two stores: each holds part of its records",
            )

    def _claims(self, app: Any, queues: list[str]) -> list[tuple[str, str]]:
        return claims(app, queues, self.identity, ttl_seconds=self.ttl_seconds)

    def _unannounced(self, error: Exception) -> None:
        if not self._failing:
            get_logger().warning(
                "evidence_coverage.store_unannounced",
                problem=f"{type(error).__name__}: {error}",
                why="the broker did not take this worker's store announcement; retried every "
                f"{self.ttl_seconds / RENEWALS_PER_TTL:g} s",
            )
        self._failing = True
