"""One queue, one store (worker/runtime/announcement.py): the claim on each broker, the line a
worker refuses to start with, and the renewals on the consumer's timer."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest
from amqp.exceptions import NotFound, ResourceLocked
from structlog.testing import capture_logs

from worker.errors import TransientError
from worker.runtime import announcement
from worker.runtime.announcement import (
    StoreAnnouncementStep,
    claim_on_amqp,
    claim_on_redis,
    conflict,
    refusal,
)
from worker.settings import Settings

MINE = "redis://store-a.example:6379/0 (key prefix evidence)"
THEIRS = "redis://store-b.example:6379/0 (key prefix evidence)"
KEY = "evidence.store.q"


def test_the_refusal_names_both_stores_and_what_to_do() -> None:
    assert refusal("q", THEIRS, MINE, ttl_seconds=60) == (
        "workers on queue q write to store redis://store-b.example:6379/0 (key prefix "
        "evidence), but this worker's store is redis://store-a.example:6379/0 (key prefix "
        "evidence): give every worker on a queue the same EVIDENCE_STORE_URL and "
        "EVIDENCE_KEY_PREFIX, or this one another queue; once the other workers have stopped, "
        "their announcement expires within 60 s (EVIDENCE_STORE_ANNOUNCEMENT_TTL_SECONDS)"
    )


@pytest.mark.parametrize(
    ("announced", "expected"),
    [(None, None), (MINE, None), (THEIRS, THEIRS)],
    ids=["nothing-announced", "ours", "another-store"],
)
def test_conflict(announced: str | None, expected: str | None) -> None:
    assert conflict(announced, MINE) == expected


def test_redis_the_first_claim_sets_the_key_with_the_ttl() -> None:
    client = fakeredis.FakeRedis()

    assert claim_on_redis(client, "q", MINE, ttl_seconds=60) is None
    assert client.get(KEY) == MINE.encode()
    assert client.ttl(KEY) == 60


def test_redis_a_claim_of_the_same_store_renews_it() -> None:
    client = fakeredis.FakeRedis()
    client.set(KEY, MINE, ex=5)

    assert claim_on_redis(client, "q", MINE, ttl_seconds=60) is None
    assert client.ttl(KEY) == 60


def test_redis_another_stores_claim_is_returned_and_left_alone() -> None:
    client = fakeredis.FakeRedis()
    client.set(KEY, THEIRS, ex=5)

    assert claim_on_redis(client, "q", MINE, ttl_seconds=60) == THEIRS
    assert client.get(KEY) == THEIRS.encode()
    assert client.ttl(KEY) == 5


def test_redis_of_two_workers_claiming_at_once_the_second_is_refused() -> None:
    """SET NX: whoever sets the key first holds it."""
    client = fakeredis.FakeRedis()

    first = claim_on_redis(client, "q", THEIRS, ttl_seconds=60)
    second = claim_on_redis(client, "q", MINE, ttl_seconds=60)

    assert (first, second) == (None, THEIRS)


def test_redis_a_key_that_expires_between_two_commands_is_claimed_again() -> None:
    class Expiring(fakeredis.FakeRedis):
        gets = 0

        def get(self, name: Any) -> Any:
            self.gets += 1
            self.delete(name)  # the TTL ran out just before the GET
            return None

    client = Expiring()
    client.set(KEY, THEIRS)

    assert claim_on_redis(client, "q", MINE, ttl_seconds=60) is None
    assert client.gets == 1
    assert fakeredis.FakeRedis.get(client, KEY) == MINE.encode()


@dataclass
class FakeRabbit:
    """The few AMQP operations a claim uses: queues of messages, exclusive queues owned by one
    connection, passive declares; an error closes its channel, as RabbitMQ does."""

    queues: dict[str, list[bytes]] = field(default_factory=dict)
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    owners: dict[str, object] = field(default_factory=dict)

    def connection(self) -> FakeConnection:
        return FakeConnection(self)


@dataclass
class FakeConnection:
    broker: FakeRabbit
    broker_queue: str = KEY  # the queue a reject returns its message to

    def channel(self) -> FakeChannel:
        return FakeChannel(self)


@dataclass
class FakeChannel:
    connection: FakeConnection
    closed: bool = False
    held: list[bytes] = field(default_factory=list)

    def queue_declare(
        self,
        queue: str,
        passive: bool = False,
        durable: bool = False,
        exclusive: bool = False,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        assert not self.closed
        broker = self.connection.broker
        if passive and queue not in broker.queues:
            self.closed = True
            raise NotFound("NOT_FOUND - no queue")
        owner = broker.owners.get(queue)
        if owner is not None and owner is not self.connection:
            self.closed = True
            raise ResourceLocked("RESOURCE_LOCKED - cannot obtain exclusive access")
        if exclusive:
            broker.owners[queue] = self.connection
        if not passive:
            broker.queues.setdefault(queue, [])
            broker.arguments[queue] = dict(arguments or {})

    def basic_get(self, queue: str, no_ack: bool = False) -> Any:
        messages = self.connection.broker.queues[queue]
        if not messages:
            return None
        body = messages.pop(0)
        self.held.append(body)
        return SimpleNamespace(body=body, delivery_tag=len(self.held))

    def basic_reject(self, delivery_tag: int, requeue: bool) -> None:
        assert requeue
        self.connection.broker.queues[self.connection.broker_queue].insert(0, self.held.pop())

    def basic_publish(self, message: Any, exchange: str, routing_key: str) -> None:
        assert (exchange, message.properties["delivery_mode"]) == ("", 2)
        body = message.body
        self.connection.broker.queues[routing_key].append(
            body.encode() if isinstance(body, str) else body
        )

    def queue_delete(self, queue: str) -> None:
        self.connection.broker.queues.pop(queue, None)
        self.connection.broker.owners.pop(queue, None)

    def close(self) -> None:
        self.closed = True


def test_amqp_the_first_claim_is_one_persistent_message_in_an_expiring_queue() -> None:
    rabbit = FakeRabbit()

    assert claim_on_amqp(rabbit.connection(), "q", MINE, ttl_seconds=60) is None
    assert rabbit.queues == {KEY: [MINE.encode()]}  # and the lock queue is gone
    assert rabbit.arguments[KEY] == {"x-expires": 60_000}
    assert rabbit.owners == {}


def test_amqp_the_claim_is_read_and_put_back() -> None:
    rabbit = FakeRabbit(queues={KEY: [THEIRS.encode()]})

    assert claim_on_amqp(rabbit.connection(), "q", MINE, ttl_seconds=60) == THEIRS
    assert claim_on_amqp(rabbit.connection(), "q", THEIRS, ttl_seconds=60) is None
    assert rabbit.queues == {KEY: [THEIRS.encode()]}


def test_amqp_a_worker_waits_while_another_holds_the_lock() -> None:
    rabbit = FakeRabbit(queues={KEY: [THEIRS.encode()]})
    holder = rabbit.connection()
    holder.channel().queue_declare(KEY + ".lock", exclusive=True, auto_delete=True)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:  # the holder is done
            rabbit.owners.pop(KEY + ".lock")

    assert claim_on_amqp(rabbit.connection(), "q", MINE, ttl_seconds=60, sleep=sleep) == THEIRS
    assert waits == [0.05, 0.05, 0.05]


def test_amqp_a_lock_never_released_is_a_transient_error() -> None:
    rabbit = FakeRabbit()
    rabbit.connection().channel().queue_declare(KEY + ".lock", exclusive=True)

    with pytest.raises(TransientError, match=r"queue evidence.store.q.lock stayed locked for 5 s"):
        claim_on_amqp(rabbit.connection(), "q", MINE, ttl_seconds=60, sleep=lambda _: None)


def consumer(queues: set[str], ttl: int = 60) -> Any:
    """What the step reads from Celery's consumer: settings, queues, timer, connection errors."""
    settings = Settings(
        store_url="redis://store-a.example:6379/0", store_announcement_ttl_seconds=ttl
    )
    app = SimpleNamespace(
        settings=settings, amqp=SimpleNamespace(queues=SimpleNamespace(consume_from=queues))
    )
    return SimpleNamespace(app=app, timer=RecordingTimer(), connection_errors=(ConnectionError,))


@dataclass
class RecordingTimer:
    """kombu's timer, as far as the step uses it: entries it would fire every `secs`."""

    entries: list[Any] = field(default_factory=list)

    def call_repeatedly(self, secs: float, fun: Any, args: tuple[Any, ...] = ()) -> Any:
        entry = SimpleNamespace(secs=secs, fun=fun, args=args, canceled=False)
        entry.cancel = lambda: setattr(entry, "canceled", True)
        self.entries.append(entry)
        return entry


def fake_claims(monkeypatch: pytest.MonkeyPatch, *answers: Any) -> list[list[str]]:
    """Replace the broker: each call answers the next of `answers` (a list, or an error)."""
    asked: list[list[str]] = []
    pending = list(answers)

    def claims(app: Any, queues: list[str], mine: str, *, ttl_seconds: int) -> Any:
        asked.append(queues)
        answer = pending.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(announcement, "claims", claims)
    return asked


def test_a_worker_on_another_stores_queue_exits_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_claims(monkeypatch, [("q", THEIRS)])
    c = consumer({"q", "other"})

    with pytest.raises(SystemExit) as stopped:
        StoreAnnouncementStep(c).start(c)

    assert stopped.value.code == 2
    mine = "redis://store-a.example:6379/0 (key prefix evidence)"
    assert capsys.readouterr().err == (
        f"evidence-worker: configuration error: {refusal('q', THEIRS, mine, ttl_seconds=60)}\n"
    )


def test_a_free_queue_is_claimed_then_renewed_every_third_of_the_ttl(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = fake_claims(monkeypatch, [], [])
    c = consumer({"q", "other"}, ttl=30)
    step = StoreAnnouncementStep(c)

    step.start(c)

    assert asked == [["other", "q"]]
    (entry,) = c.timer.entries
    assert (entry.secs, entry.fun, entry.args) == (10.0, step.renew, (c.app, ["other", "q"]))
    entry.fun(*entry.args)  # as the event loop fires it
    assert asked == [["other", "q"], ["other", "q"]]
    step.stop(c)
    assert entry.canceled


def test_a_conflict_found_by_a_renewal_is_an_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_claims(monkeypatch, [("q", THEIRS)])
    c = consumer({"q"})
    step = StoreAnnouncementStep(c)

    with capture_logs() as logs:
        step.renew(c.app, ["q"])

    assert logs == [
        {
            "event": "evidence_coverage.store_conflict",
            "log_level": "error",
            "queue": "q",
            "store": MINE,
            "announced_store": THEIRS,
            "why": "workers on this queue write to two stores: each holds part of its records",
        }
    ]


def test_a_broker_that_fails_renewals_is_said_once_per_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_claims(monkeypatch, OSError("gone"), OSError("gone"), [], OSError("again"))
    c = consumer({"q"})
    step = StoreAnnouncementStep(c)

    with capture_logs() as logs:
        for _ in range(4):
            step.renew(c.app, ["q"])

    assert [(line["event"], line["problem"]) for line in logs] == [
        ("evidence_coverage.store_unannounced", "OSError: gone"),
        ("evidence_coverage.store_unannounced", "OSError: again"),
    ]
    assert logs[0]["why"] == (
        "the broker did not take this worker's store announcement; retried every 20 s"
    )


def test_a_lost_connection_at_start_is_the_consumers_to_handle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Celery reconnects and starts the step again, which claims again."""
    fake_claims(monkeypatch, ConnectionError("reset"))
    c = consumer({"q"})

    with pytest.raises(ConnectionError):
        StoreAnnouncementStep(c).start(c)


def test_any_other_failure_at_start_lets_the_worker_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker that refuses the key (say, out of memory) is not the worker's configuration:
    it starts, says so, and the renewals try again."""
    fake_claims(monkeypatch, TransientError("locked"))
    c = consumer({"q"})

    with capture_logs() as logs:
        StoreAnnouncementStep(c).start(c)

    assert [line["event"] for line in logs] == ["evidence_coverage.store_unannounced"]
    assert len(c.timer.entries) == 1
