"""A store's identity (worker/stores/identity.py): what names the data, and never a secret."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.stores.identity import cluster_identity, is_loopback, store_identity

HOST = "host-a"


@pytest.mark.parametrize(
    ("url", "identity"),
    [
        pytest.param(
            "redis://store.example:6380/3",
            "redis://store.example:6380/3 (key prefix evidence)",
            id="redis",
        ),
        pytest.param(
            "redis://alice:s3cret@Store.Example:6380/3?password=s3cret&socket_timeout=5",
            "redis://store.example:6380/3 (key prefix evidence)",
            id="user-password-and-query-left-out",
        ),
        pytest.param(
            "redis://store.example",
            "redis://store.example:6379/0 (key prefix evidence)",
            id="default-port-and-database",
        ),
        pytest.param(
            "redis://store.example/?db=5",
            "redis://store.example:6379/5 (key prefix evidence)",
            id="database-in-the-query",
        ),
        pytest.param(
            "rediss://:s3cret@store.example:6380/0",
            "rediss://store.example:6380/0 (key prefix evidence)",
            id="tls",
        ),
        pytest.param(
            "redis://[2001:db8::1]:6379/2",
            "redis://[2001:db8::1]:6379/2 (key prefix evidence)",
            id="ipv6",
        ),
        pytest.param(
            "redis://:s3cret@127.0.0.1:6379/14",
            "redis://localhost:6379/14 on host-a (key prefix evidence)",
            id="loopback-is-this-host",
        ),
        pytest.param(
            "redis://localhost:6379/14",
            "redis://localhost:6379/14 on host-a (key prefix evidence)",
            id="localhost-as-127.0.0.1",
        ),
        pytest.param(
            "rediss://[::1]:7000",
            "rediss://localhost:7000/0 on host-a (key prefix evidence)",
            id="ipv6-loopback",
        ),
        pytest.param(
            "postgres://alice:s3cret@db/evidence",
            "postgres://alice:**@db/evidence",
            id="unknown-scheme-masked",
        ),
    ],
)
def test_identities(url: str, identity: str) -> None:
    assert store_identity(url, "evidence", host=HOST) == identity


def test_two_key_prefixes_on_one_redis_are_two_stores() -> None:
    url = "redis://store.example:6379/0"

    assert store_identity(url, "team-a", host=HOST) == (
        "redis://store.example:6379/0 (key prefix team-a)"
    )
    assert store_identity(url, "team-a", host=HOST) != store_identity(url, "team-b", host=HOST)


def test_a_dns_name_is_the_same_store_from_every_host() -> None:
    url = "redis://store.example:6379/0"

    assert store_identity(url, "evidence", host="host-a") == store_identity(
        url, "evidence", host="host-b"
    )


def test_sqlite_is_its_resolved_absolute_path_on_this_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path and a symbolic link name the file they lead to, on this machine."""
    real = tmp_path.resolve() / "data"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path)

    expected = f"sqlite:///{real}/evidence.db on host-a"
    assert store_identity("sqlite:///data/evidence.db", "evidence", host=HOST) == expected
    assert store_identity(f"sqlite:///{tmp_path}/link/evidence.db", "x", host=HOST) == expected
    assert expected.startswith("sqlite:////")  # the absolute form of a SQLite URL


def test_the_same_sqlite_path_on_two_hosts_is_two_stores() -> None:
    url = "sqlite:////data/evidence.db"

    assert store_identity(url, "evidence", host="host-a") == "sqlite:////data/evidence.db on host-a"
    assert store_identity(url, "evidence", host="host-b") == "sqlite:////data/evidence.db on host-b"


def test_a_unix_socket_is_this_hosts() -> None:
    assert store_identity("unix:///run/redis.sock?db=2", "evidence", host=HOST) == (
        "unix:///run/redis.sock?db=2 on host-a (key prefix evidence)"
    )


def test_the_host_defaults_to_this_machines_name() -> None:
    assert store_identity("sqlite:////data/evidence.db", "evidence") == (
        f"sqlite:////data/evidence.db on {os.uname().nodename}"
    )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("redis.localhost", True),
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("10.0.0.5", False),
        ("redis", False),
        ("localhost.example", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


class Node:
    """A cluster node as cluster_identity() asks it: INFO cluster and CLUSTER NODES."""

    def __init__(self, nodes: str, enabled: int = 1) -> None:
        self.nodes, self.enabled = nodes, enabled

    def info(self, section: str) -> dict[str, int]:
        assert section == "cluster"
        return {"cluster_enabled": self.enabled}

    def execute_command(self, *command: str) -> bytes:
        assert command == ("CLUSTER", "NODES")
        return self.nodes.encode()


NODES_SEEN_FROM_A = (
    "a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n"
    "b2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922\n"
    "c3 127.0.0.1:7002@17002 master,fail - 0 0 3 connected\n"
    "d4 127.0.0.1:7003@17003 master - 0 0 4 connected 10923-16383\n"
)
NODES_SEEN_FROM_B = (
    "d4 127.0.0.1:7003@17003 master - 0 0 4 connected 10923-16383\n"
    "c3 127.0.0.1:7002@17002 master,fail - 0 0 3 connected\n"
    "b2 127.0.0.1:7001@17001 myself,master - 0 0 2 connected 5461-10922\n"
    "a1 127.0.0.1:7000@17000 master - 0 0 1 connected 0-5460\n"
)


def test_a_cluster_is_named_by_its_node_ids_whichever_node_answers() -> None:
    """After a failover a worker names another node: the cluster's name is the same."""
    from_a = cluster_identity(Node(NODES_SEEN_FROM_A))
    from_b = cluster_identity(Node(NODES_SEEN_FROM_B))

    assert from_a == from_b
    assert from_a is not None
    assert from_a.startswith("Redis Cluster ")
    assert (
        store_identity("redis://127.0.0.1:7000/0", "p", cluster=from_a)
        == f"{from_a} (key prefix p)"
    )
    assert (
        cluster_identity(
            Node(NODES_SEEN_FROM_A + "e5 127.0.0.1:7004@17004 master - 0 0 5 connected\n")
        )
        != from_a
    )


def test_a_redis_that_is_no_cluster_has_no_cluster_name() -> None:
    assert cluster_identity(Node("", enabled=0)) is None
