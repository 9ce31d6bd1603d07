"""A throwaway Redis master with one replica, on free ports of their own, for the tests of
writes that wait for replicas (worker/stores/redis/replicas.py).

The replica can be paused (SIGSTOP): it keeps its connection, so the master still counts it
as connected, but it acknowledges nothing, as a replica that lags behind a failover would.
Test modules re-export the fixture (`replicated_redis = redis_servers.replicated_redis`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.integration.worker_harness import POLL_SECONDS, RedisServer, free_port

LINK_TIMEOUT_SECONDS = 30.0


@dataclass
class ReplicatedRedis:
    """A master and its replica; `paused()` stops the replica from acknowledging anything."""

    master: RedisServer
    replica: RedisServer

    @property
    def url(self) -> str:
        return self.master.url

    def start(self) -> None:
        self.master.start()
        self.replica.start()
        self.wait_for_link()

    def wait_for_link(self, timeout: float = LINK_TIMEOUT_SECONDS) -> None:
        """Until the replica is in sync (master_link_status:up) and the master counts it."""
        replica = redis.Redis(port=self.replica.port, socket_timeout=5)
        master = redis.Redis(port=self.master.port, socket_timeout=5)
        deadline = time.monotonic() + timeout
        try:
            while (
                replica.info("replication").get("master_link_status") != "up"
                or master.info("replication").get("connected_slaves") != 1
            ):
                if time.monotonic() > deadline:
                    pytest.fail(f"replica {self.replica.port} never linked to {self.master.port}")
                time.sleep(POLL_SECONDS)
        finally:
            replica.close()
            master.close()

    def replica_client(self) -> redis.Redis:
        """A client reading the replica directly."""
        return redis.Redis(port=self.replica.port, socket_timeout=5)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The replica stopped (SIGSTOP) for the block, then continued and caught up again."""
        pid = self.replica_pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
            self.wait_for_link()

    def replica_pid(self) -> int:
        assert self.replica.process is not None, "the replica was never started"
        return self.replica.process.pid

    def stop(self) -> None:
        """kill -9 both (SIGKILL ends a stopped process too)."""
        self.replica.kill()
        self.master.kill()


def start_replicated(directory: Path) -> ReplicatedRedis:
    """A started master and replica on free ports, keeping their files in `directory`."""
    master = RedisServer(port=free_port(), directory=directory)
    replica = RedisServer(
        port=free_port(),
        directory=directory,
        options=("--replicaof", "127.0.0.1", str(master.port)),
    )
    servers = ReplicatedRedis(master, replica)
    servers.start()
    return servers


@pytest.fixture(scope="module")
def replicated_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedRedis]:
    """A master and replica for the whole module; stopped afterwards."""
    servers = start_replicated(tmp_path_factory.mktemp("replicated-redis"))
    try:
        yield servers
    finally:
        servers.stop()
