"""open_store: a store URL gives the store it names with the settings' bound and TTL, bounded
waits and probed connections, or one ConfigurationError that says what to fix."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.store_factories import HASH
from worker.errors import ConfigurationError
from worker.keepalive import TCP_KEEPALIVE_OPTIONS
from worker.settings import Settings
from worker.stores import open_store
from worker.stores.redis.redis_store import RedisStore
from worker.stores.sqlite.sqlite_store import SQLiteStore

pytestmark = pytest.mark.integration


def test_open_store_sqlite_url_gives_sqlite_store(tmp_path: Path) -> None:
    """sqlite:///path opens the embedded store on that file."""
    path = tmp_path / "opened.sqlite3"

    store = open_store(f"sqlite:///{path}", Settings())
    try:
        assert isinstance(store, SQLiteStore)
        assert store.path == path
        assert path.exists()
    finally:
        store.close()


def test_open_store_passes_bound_and_ttl_from_settings(tmp_path: Path) -> None:
    """The store gets max_attempts_per_hash and result_ttl_seconds from the settings."""
    settings = Settings(max_attempts_per_hash=7, result_ttl_seconds=90)

    store = open_store(f"sqlite:///{tmp_path / 's.sqlite3'}", settings)
    try:
        assert isinstance(store, SQLiteStore)
        assert store.max_attempts_per_hash == 7
        assert store.ttl == timedelta(seconds=90)
    finally:
        store.close()


def test_open_store_redis_url_gives_redis_store(redis_url: str) -> None:
    """redis://... opens the shared store with the settings' key prefix."""
    store = open_store(redis_url, Settings(key_prefix="test-open"))
    try:
        assert isinstance(store, RedisStore)
        assert store.prefix == "test-open"
        assert store.history(HASH) is None
    finally:
        store.close()


def test_open_store_unknown_scheme_is_a_configuration_error() -> None:
    """An unknown scheme is named in the error, which says which URLs to use."""
    with pytest.raises(ConfigurationError) as raised:
        open_store("postgres://x", Settings())

    message = str(raised.value)
    assert message.startswith("unknown store scheme 'postgres' in ")
    assert "EVIDENCE_STORE_URL" in message
    assert message.endswith(": use sqlite:///path/to.db or redis://host:port/db")


def test_open_store_sqlite_without_path_is_a_configuration_error() -> None:
    """sqlite:/// with no file is a configuration error, not a store in the working directory."""
    with pytest.raises(ConfigurationError) as raised:
        open_store("sqlite:///", Settings())

    assert str(raised.value) == "store URL 'sqlite:///' names no file: use sqlite:///path/to.db"


def test_open_store_unopenable_sqlite_file_is_a_configuration_error(tmp_path: Path) -> None:
    """A SQLite path in a missing directory is a configuration error naming the file."""
    path = tmp_path / "missing" / "s.sqlite3"

    with pytest.raises(ConfigurationError) as raised:
        open_store(f"sqlite:///{path}", Settings())

    assert str(raised.value) == (
        f"cannot open SQLite store {path}: directory {path.parent} does not exist (create it first)"
    )


def test_a_store_from_a_url_bounds_its_waits_and_keeps_its_connections_probed(
    redis_url: str, key_prefix: str
) -> None:
    """As the broker's: a reply or connect that never comes fails in seconds, and a peer that
    vanished (NAT, dead host) is noticed in about a minute instead of hours."""
    store = RedisStore.from_url(redis_url, prefix=key_prefix)
    try:
        options = store.client.connection_pool.connection_kwargs
        assert (options["socket_timeout"], options["socket_connect_timeout"]) == (10, 5)
        assert options["socket_keepalive"] is True
        assert options["socket_keepalive_options"] == TCP_KEEPALIVE_OPTIONS
        assert options["health_check_interval"] == 30
        store.alert_count()  # a connection made with them
    finally:
        store.close()
