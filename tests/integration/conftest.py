"""Integration fixtures: a real Redis server (required: tests fail, never skip, without it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.integration.redis_cluster import Cluster, running_cluster
from tests.servers import redis_port


def redis_url_14() -> str:
    """DB 14 of the tests' Redis. A function, not a constant: this conftest is imported before
    pytest_configure names an xdist worker's own Redis (tests/conftest.py)."""
    return f"redis://127.0.0.1:{redis_port()}/14"


def check_redis() -> None:
    """Fail loudly when Redis is missing: CI must never turn these tests into skips."""
    url = redis_url_14()
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.ConnectionError as error:
        pytest.fail(f"integration tests need Redis at {url}: {error}", pytrace=False)


@pytest.fixture
def redis_url() -> str:
    check_redis()
    return redis_url_14()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def key_prefix(redis_client: redis.Redis) -> Iterator[str]:
    """A fresh key prefix per test; its keys are deleted afterwards."""
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    yield prefix
    keys = list(redis_client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        redis_client.delete(*keys)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Cluster]:
    """A Redis Cluster of the session's own (3 masters, 3 replicas, free ports), started by the
    first test that asks for it."""
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def cluster_prefix(redis_cluster: Cluster) -> Iterator[str]:
    """A fresh key prefix on the test cluster; its keys are deleted afterwards."""
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    yield prefix
    for node in redis_cluster.masters():
        client = redis.Redis(port=node.port)
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for key in keys:
            client.delete(key)
        client.close()
