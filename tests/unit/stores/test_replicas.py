"""Writes that wait for replicas, without a server: what a pipeline gets queued, how WAIT's
reply is judged, when the automatic default asks the server, and the two settings."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import fakeredis
import pytest
import redis

from tests.conftest import FIXED_NOW, ROOT
from tests.factories import attempt, ledger_entry
from worker.errors import ConfigurationError, StoreBusy, TransientError
from worker.settings import Settings, load_settings
from worker.stores import DeadLetter
from worker.stores.redis.redis_store import RedisStore
from worker.stores.redis.replicas import (
    MARK_TTL_SECONDS,
    REPLICAS_CHECK_SECONDS,
    ReplicaCount,
    ReplicaWait,
    add_wait,
    check_wait,
)

MARK = "p:replication-mark"
HASH = "a" * 64
STORE = "redis://127.0.0.1:6380/0"


class Pipe:
    """A pipeline that keeps what was queued, and answers execute() with set replies."""

    def __init__(self, replies: list[Any] | None = None) -> None:
        self.queued: list[tuple[Any, ...]] = []
        self.replies = replies or []

    def set(self, key: str, value: Any, ex: int) -> None:
        self.queued.append(("SET", key, value, "EX", ex))

    def execute_command(self, *args: Any) -> None:
        self.queued.append(args)

    def execute(self) -> list[Any]:
        return self.replies


class Server:
    """A client whose INFO replication lists `replicas` in sync (state online) and `syncing`
    in their first sync, as redis-py parses the reply; counts the calls."""

    def __init__(self, replicas: int, syncing: int = 0) -> None:
        self.replicas = replicas
        self.syncing = syncing
        self.calls = 0

    def info(self, section: str) -> dict[str, Any]:
        assert section == "replication"
        self.calls += 1
        states = ["online"] * self.replicas + ["wait_bgsave"] * self.syncing
        reply: dict[str, Any] = {"role": "master", "connected_slaves": len(states)}
        for n, state in enumerate(states):
            reply[f"slave{n}"] = {
                "ip": "10.0.0.9",
                "port": 6380 + n,
                "state": state,
                "offset": 0,
                "lag": 0,
            }
        return reply


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Restricted:
    """A client whose ACL user may not run INFO."""

    def info(self, section: str) -> dict[str, Any]:
        raise redis.exceptions.NoPermissionError(
            "this user has no permissions to run the 'info' command"
        )


def wait(
    min_replicas: int | None,
    server: Any = None,
    timeout_ms: int = 250,
    clock: Clock | None = None,
) -> ReplicaWait:
    client: Any = server if server is not None else Server(0)
    count = ReplicaCount(min_replicas, store_name=STORE, clock=clock or Clock())
    return ReplicaWait(client, store_name=STORE, mark_key=MARK, count=count, timeout_ms=timeout_ms)


def test_add_wait_queues_the_mark_then_wait_last() -> None:
    """The mark (so the WAIT covers every earlier write), then WAIT with count and timeout."""
    pipe = Pipe()

    assert add_wait(pipe, 2, 250, mark_key=MARK) is True

    assert pipe.queued == [("SET", MARK, 1, "EX", MARK_TTL_SECONDS), ("WAIT", 2, 250)]


def test_add_wait_for_no_replica_queues_nothing() -> None:
    """0 replicas: no command, no cost."""
    pipe = Pipe()

    assert add_wait(pipe, 0, 250, mark_key=MARK) is False

    assert pipe.queued == []


@pytest.mark.parametrize(("min_replicas", "reached"), [(1, 1), (1, 2), (2, 2)])
def test_enough_replicas_is_no_error(min_replicas: int, reached: int) -> None:
    """WAIT counted as many replicas as wanted, or more: the write stands."""
    check_wait(reached, min_replicas, 250, STORE)


@pytest.mark.parametrize(
    ("min_replicas", "reached", "message"),
    [
        (1, 0, f"store {STORE}: the write reached 0 of 1 replica in 250 ms "
         "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"),
        (3, 2, f"store {STORE}: the write reached 2 of 3 replicas in 250 ms "
         "(EVIDENCE_STORE_MIN_REPLICAS): not acknowledged until the replicas have it"),
    ],
)  # fmt: skip
def test_too_few_replicas_is_a_transient_error(
    min_replicas: int, reached: int, message: str
) -> None:
    """A write the replicas did not confirm in time is retried, like an outage."""
    with pytest.raises(TransientError) as raised:
        check_wait(reached, min_replicas, 250, STORE)

    assert str(raised.value) == message


def test_an_error_in_place_of_wait_s_reply_is_raised_as_is() -> None:
    """A pipeline run with raise_on_error=False hands WAIT's error over as its reply."""
    refused = ConnectionError("lost")

    with pytest.raises(ConnectionError) as raised:
        check_wait(refused, 1, 250, STORE)

    assert raised.value is refused


def test_execute_returns_the_pipeline_s_own_replies_once_the_wait_is_met() -> None:
    pipe = Pipe(replies=["own-1", "own-2", True, 1])

    assert wait(1).execute(pipe) == ["own-1", "own-2"]
    assert pipe.queued[-1] == ("WAIT", 1, 250)


def test_execute_raises_when_the_replicas_are_short() -> None:
    pipe = Pipe(replies=["own", True, 0])

    with pytest.raises(TransientError, match=r"^store .*: the write reached 0 of 1 replica in"):
        wait(1).execute(pipe)


def test_execute_without_replicas_is_the_pipeline_s_execute() -> None:
    pipe = Pipe(replies=["own"])

    assert wait(0).execute(pipe) == ["own"]
    assert pipe.queued == []


def test_a_failed_mark_is_raised() -> None:
    """The mark's write refused (a full server, say): its error, not WAIT's count."""
    full = redis.OutOfMemoryError("command not allowed when used memory > 'maxmemory'")

    with pytest.raises(redis.OutOfMemoryError) as raised:
        wait(1).check([full, 1], 1)

    assert raised.value is full


@pytest.mark.parametrize(
    ("online", "syncing", "wanted"), [(0, 0, 0), (1, 0, 1), (2, 0, 1), (0, 1, 0), (1, 1, 1)]
)
def test_the_automatic_default_is_one_replica_where_the_server_has_one_in_sync(
    online: int, syncing: int, wanted: int
) -> None:
    """Unset: one INFO replication at the first write; a replica still in its first sync
    (wait_bgsave) is not waited for, as it could acknowledge nothing before it is loaded."""
    server = Server(online, syncing)
    replicas = wait(None, server)

    assert server.calls == 0
    assert [replicas.wanted(), replicas.wanted()] == [wanted, wanted]
    assert server.calls == 1


def test_the_automatic_default_asks_again_once_its_answer_is_old() -> None:
    """The answer stands REPLICAS_CHECK_SECONDS: a replica added meanwhile is waited for
    from the first write after that."""
    server, clock = Server(0), Clock()
    replicas = wait(None, server, clock=clock)
    before = replicas.wanted()
    server.replicas = 1
    clock.now += REPLICAS_CHECK_SECONDS - 0.001
    still = replicas.wanted()
    clock.now += 0.001

    assert (before, still, replicas.wanted(), server.calls) == (0, 0, 1, 2)


def test_a_wait_that_fell_short_makes_the_next_write_ask_again() -> None:
    """A failover: the promoted master has no replica. The write that waited for one fails
    (its message waits), and the next, with no time gone by, asks and waits for none."""
    server, clock = Server(1), Clock()
    replicas = wait(None, server, clock=clock)
    pipe = Pipe(replies=["own", True, 0])
    with pytest.raises(StoreBusy):
        replicas.execute(pipe)
    server.replicas = 0
    after = Pipe(replies=["own"])

    assert replicas.execute(after) == ["own"]
    assert (after.queued, server.calls) == ([], 3)  # the count, why it fell short, again


def test_a_set_count_keeps_waiting_after_a_wait_fell_short() -> None:
    """EVIDENCE_STORE_MIN_REPLICAS=1 keeps its meaning: every write waits for one replica,
    whatever the server has (asked only why the wait fell short)."""
    server = Server(0)
    replicas = wait(1, server)
    with pytest.raises(StoreBusy):
        replicas.execute(Pipe(replies=["own", True, 0]))
    again = Pipe(replies=["own", True, 1])

    assert replicas.execute(again) == ["own"]
    assert (again.queued[-1], server.calls) == (("WAIT", 1, 250), 1)


def test_each_server_has_its_own_count() -> None:
    """A Redis Cluster's masters, one count each: a wait short on one master forgets that
    master's count only."""
    one, other, clock = Server(1), Server(1), Clock()
    count = ReplicaCount(None, store_name=STORE, clock=clock)
    assert (count.wanted("a", one), count.wanted("b", other)) == (1, 1)  # type: ignore[arg-type]

    with pytest.raises(StoreBusy):
        count.check(0, 1, 250, server="a", client=one, name=STORE)  # type: ignore[arg-type]
    count.wanted("a", one)  # type: ignore[arg-type]
    count.wanted("b", other)  # type: ignore[arg-type]

    assert (one.calls, other.calls) == (3, 1)  # the first check's short_why() asked `one` too


def test_a_short_wait_names_the_replicas_still_in_their_first_sync() -> None:
    """A set count of 1 and a replica in its first sync: the error says so, rather than
    leaving the user to suspect the URL."""
    replicas = wait(1, Server(0, syncing=1))

    with pytest.raises(StoreBusy) as raised:
        replicas.execute(Pipe(replies=["own", True, 0]))

    assert str(raised.value) == (
        f"store {STORE}: the write reached 0 of 1 replica in 250 ms (EVIDENCE_STORE_MIN_REPLICAS)"
        "; still in its first sync: replica 10.0.0.9:6380 (wait_bgsave): not acknowledged "
        "until the replicas have it"
    )


def test_a_user_that_may_not_ask_must_set_the_count() -> None:
    """INFO refused: a configuration error, rather than a guess of 0 replicas."""
    with pytest.raises(ConfigurationError) as raised:
        wait(None, Restricted()).wanted()

    assert str(raised.value) == (
        f"store {STORE}: cannot tell whether the server has replicas (this user has no "
        "permissions to run the 'info' command): set EVIDENCE_STORE_MIN_REPLICAS"
    )


def test_a_set_count_never_asks_the_server() -> None:
    server = Server(3)

    assert wait(2, server).wanted() == 2
    assert server.calls == 0


def test_a_store_without_replicas_waits_on_no_write() -> None:
    """The Redis store built directly waits for no replica: every write runs on a server
    (fakeredis) that knows neither INFO nor WAIT, and leaves no mark."""
    store = RedisStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="p")

    store.note_published([ledger_entry("t", 0), ledger_entry("t", 1), ledger_entry("u", 0)])
    store.record_many([(HASH, attempt())], now=FIXED_NOW, write_ids=["t:0"])
    store.dead_letter(DeadLetter(received_at=FIXED_NOW, error="schema", body="{}", task_id="u"))
    store.close_entries(["t:1"])

    assert store.replicas.wanted() == 0
    assert store.client.exists(MARK) == 0
    assert store.count_unrecorded(published_before=FIXED_NOW.replace(year=3000)) == 0


# The settings ---------------------------------------------------------------------------------


def test_the_settings_default_to_automatic_and_one_second() -> None:
    settings = Settings()

    assert (settings.store_min_replicas, settings.store_replica_timeout_ms) == (None, 1000)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("EVIDENCE_STORE_MIN_REPLICAS", "-1",
         "EVIDENCE_STORE_MIN_REPLICAS: Input should be greater than or equal to 0"),
        ("EVIDENCE_STORE_MIN_REPLICAS", "one",
         "EVIDENCE_STORE_MIN_REPLICAS: Input should be a valid integer, unable to parse string "
         "as an integer"),
        ("EVIDENCE_STORE_REPLICA_TIMEOUT_MS", "0",
         "EVIDENCE_STORE_REPLICA_TIMEOUT_MS: Input should be greater than 0"),
        ("EVIDENCE_STORE_REPLICA_TIMEOUT_MS", "5001",
         "EVIDENCE_STORE_REPLICA_TIMEOUT_MS: Input should be less than or equal to 5000"),
    ],
)  # fmt: skip
def test_a_bad_replica_setting_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    """Refused at start-up, naming the variable (WAIT must end well within the store's 10 s
    socket timeout)."""
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert str(raised.value) == message


def test_the_worker_refuses_a_bad_replica_count_with_one_line_and_exit_2() -> None:
    """`celery -A worker.app` reads it first: exit 2, one line on stderr, no traceback."""
    result = subprocess.run(
        [sys.executable, "-c", "import worker.app"],
        cwd=ROOT,
        env={
            **{name: value for name, value in os.environ.items() if name[:9] != "EVIDENCE_"},
            "EVIDENCE_STORE_MIN_REPLICAS": "-1",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "evidence-worker: configuration error: EVIDENCE_STORE_MIN_REPLICAS: Input should be "
        "greater than or equal to 0\n",
    )
