"""How the Redis store names what its server answers: a server that cannot take a write now
(full, a replica, persistence failing, loading) is StoreBusy, waited out as an outage; any
other error reply is a bug, raised as is. Without a server: each error raised as redis-py
would raise it for that reply."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
import redis
from redis._parsers.base import BaseParser

from worker.errors import StoreBusy, TransientError
from worker.stores.redis.redis_store import RedisStore

AOF_FULL = "MISCONF Errors writing to the AOF file: No space left on device"
RDB_FAILED = (
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
    "to disk. Commands that may modify the data set are disabled, because this instance is "
    "configured to report errors during writes if RDB snapshotting fails "
    "(stop-writes-on-bgsave-error option). Please check the Redis logs for details about the "
    "RDB error."
)
NO_REPLICAS = "NOREPLICAS Not enough good replicas to write."
MASTER_DOWN = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
FULL = "OOM command not allowed when used memory > 'maxmemory'."
REPLICA = "READONLY You can't write against a read only replica."
LOADING = "LOADING Redis is loading the dataset in memory"


def store() -> RedisStore:
    return RedisStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="p")


def raising(error: Exception) -> Any:
    def operation() -> None:
        raise error

    return operation


@pytest.mark.parametrize("reply", [AOF_FULL, RDB_FAILED, NO_REPLICAS, FULL])
def test_a_server_that_refuses_writes_for_now_is_store_busy(reply: str) -> None:
    """The reply as redis-py parses it (a plain ResponseError for MISCONF and NOREPLICAS):
    StoreBusy, its message the reply whole, code first."""
    error = BaseParser.parse_error(reply)

    with pytest.raises(StoreBusy) as raised:
        store()._call(raising(error))

    assert str(raised.value) == f"Redis refuses writes for now: {reply}"
    assert raised.value.__cause__ is error


@pytest.mark.parametrize("reply", [REPLICA, MASTER_DOWN])
def test_a_replica_at_the_address_is_transient_but_not_busy(reply: str) -> None:
    """A failover under way, or the wrong URL: waited for, and the CLI's hint names the URL."""
    with pytest.raises(TransientError) as raised:
        store()._call(raising(BaseParser.parse_error(reply)))

    assert type(raised.value) is TransientError
    assert str(raised.value) == f"Redis refuses writes for now: {reply}"


def test_a_server_loading_its_data_is_store_busy() -> None:
    error = BaseParser.parse_error(LOADING)

    with pytest.raises(StoreBusy) as raised:
        store()._call(raising(error))

    assert str(raised.value) == (
        "Redis is not ready: Redis is loading the dataset in memory (a restart, or a "
        "replica's first sync): it takes commands once loaded"
    )


def test_an_unreachable_server_is_transient_but_not_busy() -> None:
    """Nothing answers: the URL may be wrong, which the CLI says (StoreBusy it would not)."""
    with pytest.raises(TransientError) as raised:
        store()._call(raising(redis.ConnectionError("Connection refused.")))

    assert type(raised.value) is TransientError
    assert str(raised.value) == "Redis unreachable: Connection refused."


@pytest.mark.parametrize(
    "reply", ["ERR unknown command 'FOO'", "WRONGTYPE Operation against a key holding the wrong "
              "kind of value", "ERR MISCONF is not a code here"]
)  # fmt: skip
def test_any_other_error_reply_is_raised_as_is(reply: str) -> None:
    """A bug's traceback is what a report needs: not waited for."""
    error = BaseParser.parse_error(reply)

    with pytest.raises(redis.ResponseError) as raised:
        store()._call(raising(error))

    assert raised.value is error


@pytest.mark.parametrize(
    "error",
    [
        redis.ConnectionError("Connection refused."),
        redis.TimeoutError("Timeout reading from socket"),
        BaseParser.parse_error(REPLICA),
        BaseParser.parse_error(LOADING),
    ],
)
def test_a_failed_server_is_asked_for_its_replicas_again(error: Exception) -> None:
    """After the server failed (its address may lead to a promoted replica now), the next
    write asks how many replicas to wait for rather than trusting the old answer."""
    opened = RedisStore(
        fakeredis.FakeRedis(server=fakeredis.FakeServer()), prefix="p", min_replicas=None
    )
    server = Replicated()
    opened.replica_count.wanted("", server)  # type: ignore[arg-type]

    with pytest.raises(TransientError):
        opened._call(raising(error))
    server.online = False

    assert opened.replica_count.wanted("", server) == 0  # type: ignore[arg-type]
    assert server.calls == 2


class Replicated:
    """INFO replication of a master with one replica in sync, until `online` is False."""

    def __init__(self) -> None:
        self.online = True
        self.calls = 0

    def info(self, section: str) -> dict[str, Any]:
        self.calls += 1
        replica = {"ip": "10.0.0.9", "port": 6380, "state": "online"}
        return {"role": "master", **({"slave0": replica} if self.online else {})}
