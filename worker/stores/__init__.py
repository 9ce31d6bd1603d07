"""Result stores, by backend: the interface every store meets and the types they share
(contract.py; ResultStore: outcomes, audit trail, publish ledger, leases and dead letters), the
one spelling of what they keep (codec.py), on SQLite (sqlite/: embedded) or Redis (redis/: one
server or a Redis Cluster); open_store() opens the one a URL names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.errors import ConfigurationError
from worker.stores.contract import (
    AuditTrail,
    DeadLetter,
    History,
    Ledger,
    LedgerEntry,
    OutcomeStore,
    Recorded,
    ResultStore,
    classify,
    outcome_json,
)

if TYPE_CHECKING:
    from worker.settings import Settings

__all__ = [
    "AuditTrail",
    "DeadLetter",
    "History",
    "Ledger",
    "LedgerEntry",
    "OutcomeStore",
    "Recorded",
    "ResultStore",
    "classify",
    "describe",
    "describe_url",
    "open_store",
    "outcome_json",
]

SQLITE_PREFIX = "sqlite:///"
STORE_URL_HINT = "use sqlite:///path/to.db or redis://host:port/db"


def describe(store: ResultStore, url: str) -> str:
    """How messages name the store at `url`: its URL without the password, and for a Redis
    Cluster its kind and size ("redis://host:7000/0 (Redis Cluster, 3 masters)")."""
    from worker.settings import masked_url

    inner = getattr(store, "inner", store)  # a DurableStore names what it wraps
    return getattr(inner, "description", None) or masked_url(url)


def describe_url(url: str, settings: Settings) -> str:
    """describe() of the store at `url` without opening it: one question to a Redis server
    (the worker's start line, before the worker opens its store); its URL when it cannot
    say."""
    from worker.settings import masked_url

    if not url.startswith(("redis://", "rediss://")):
        return masked_url(url)
    from worker.stores.redis.redis_cluster import cluster_name

    options = settings.redis_tls_options() if url.startswith("rediss://") else None
    try:
        masters = _cluster_masters(url, options)
    except ConfigurationError:  # said again, and refused, before the worker is ready
        return masked_url(url)
    return masked_url(url) if masters is None else cluster_name(url, masters)


def open_store(url: str, settings: Settings, *, read_only: bool = False) -> ResultStore:
    """sqlite:///path (embedded) or redis:// / rediss:// (shared); else a ConfigurationError.
    `read_only`: for a command that only reads (a SQLite file is opened for reading; a Redis
    connection is the same either way)."""
    if url.startswith(SQLITE_PREFIX):
        from worker.stores.sqlite.sqlite_store import SQLiteStore

        path = url.removeprefix(SQLITE_PREFIX)
        if not path:
            raise ConfigurationError(f"store URL {url!r} names no file: use sqlite:///path/to.db")
        if not read_only:
            _check_sqlite_path(Path(path))
        return SQLiteStore(
            path,
            max_attempts_per_hash=settings.max_attempts_per_hash,
            ttl_seconds=settings.result_ttl_seconds,
            dead_letter_max_bytes=settings.dead_letter_max_bytes,
            ledger_ttl_seconds=settings.ledger_ttl_seconds,
            read_only=read_only,
        )
    if url.startswith(("redis://", "rediss://", "unix://")):
        from worker.settings import redis_db
        from worker.stores.redis.redis_store import RedisStore

        db = 0
        if not url.startswith("unix://"):
            try:
                db = redis_db(url)
            except ValueError as error:
                raise ConfigurationError(f"store URL {error}") from None
        # rediss://: the TLS settings, the certificate always checked.
        client_options = settings.redis_tls_options() if url.startswith("rediss://") else None
        options: dict[str, Any] = {
            "prefix": settings.key_prefix,
            "max_attempts_per_hash": settings.max_attempts_per_hash,
            "ttl_seconds": settings.result_ttl_seconds,
            "attempts_ttl_seconds": settings.attempts_ttl_seconds,
            "dead_letter_max_bytes": settings.dead_letter_max_bytes,
            "ledger_ttl_seconds": settings.ledger_ttl_seconds,
            # Writes wait for replicas (worker/stores/redis/replicas.py).
            "min_replicas": settings.store_min_replicas,
            "replica_timeout_ms": settings.store_replica_timeout_ms,
        }
        if not url.startswith("unix://") and _is_cluster(
            url, db, client_options, declared=settings.store_cluster
        ):
            from worker.stores.redis.redis_cluster import RedisClusterStore

            return RedisClusterStore.from_url(url, client_options=client_options, **options)
        return RedisStore.from_url(url, client_options=client_options, **options)
    scheme, separator, _ = url.partition(":")
    if scheme == "sqlite":
        raise ConfigurationError(
            f"store URL {url!r} is not sqlite:///FILE: use sqlite:///relative/path.db "
            "or sqlite:////absolute/path.db"
        )
    if not separator:
        raise ConfigurationError(
            f"store URL {url!r} has no scheme: use sqlite:///{url} for a SQLite file, "
            "or redis://host:port/db"
        )
    raise ConfigurationError(
        f"unknown store scheme {scheme!r} in store URL (EVIDENCE_STORE_URL or --store): "
        f"{STORE_URL_HINT}"
    )


def _is_cluster(
    url: str, db: int, client_options: Mapping[str, Any] | None, *, declared: bool = False
) -> bool:
    """Whether the server at `url` is a node of a Redis Cluster (asked once, as the store
    opens); a cluster the store could not use is a ConfigurationError, and so is, when the
    store is `declared` a cluster (EVIDENCE_STORE_CLUSTER), a node that does not answer or a
    single Redis."""
    from worker.settings import masked_url, redis_seeds

    seeds = len(redis_seeds(url)) > 1
    masters = _cluster_masters(url, client_options, required=declared or seeds)
    if masters is None and seeds:
        raise ConfigurationError(
            f"store URL {masked_url(url)} names several seed nodes, which only a Redis "
            "Cluster has, but its server is a single Redis: name that one server alone"
        )
    if masters is None and declared:
        raise ConfigurationError(
            f"store {masked_url(url)} is a single Redis, not a node of a Redis Cluster "
            "(EVIDENCE_STORE_CLUSTER=true): name a cluster node, or unset it"
        )
    if masters is not None and db != 0:
        raise ConfigurationError(
            f"store URL {masked_url(url)} names database {db}, but a Redis Cluster has "
            "database 0 only: drop the /N from the URL (or use /0) and choose the keys "
            "with EVIDENCE_KEY_PREFIX"
        )
    return masters is not None


def _cluster_masters(
    url: str, client_options: Mapping[str, Any] | None, *, required: bool = False
) -> int | None:
    """The masters of the Redis Cluster the server at `url` is a node of; None for a single
    Redis, and for a server that does not answer now, which is taken for a single Redis whose
    store waits for it as for any outage, unless a cluster is `required` (declared, or several
    seed nodes named): then that is a ConfigurationError once no seed node answers, tried in
    turn."""
    import redis

    from worker.settings import masked_url, redis_seeds

    seeds = redis_seeds(url)
    problems = []
    for seed in seeds:
        try:
            return _node_masters(seed, client_options, masked_url(url))
        except redis.RedisError as error:
            problems.append(f"{error}")
    if not required:
        return None
    if len(seeds) == 1:
        raise ConfigurationError(
            f"store {masked_url(url)}: the Redis Cluster node does not answer ({problems[0]}); "
            "with EVIDENCE_STORE_CLUSTER=true the store must be reachable at start: "
            "name a node that is up"
        )
    raise ConfigurationError(
        f"store {masked_url(url)}: none of its {len(seeds)} seed nodes answers "
        f"({'; '.join(problems)}): start the worker once one of them is up, or name one that is"
    )


def _node_masters(url: str, client_options: Mapping[str, Any] | None, name: str) -> int | None:
    """cluster_masters() of the one server at `url`; a refused login is a
    ConfigurationError, a server that does not answer a RedisError."""
    import redis

    from worker.stores.redis.redis_cluster import cluster_masters

    probe = redis.Redis.from_url(
        url, socket_timeout=5, socket_connect_timeout=5, **(client_options or {})
    )
    probe.connection_pool.connection_kwargs["db"] = 0  # a cluster node refuses SELECT
    try:
        return cluster_masters(probe, name)
    except redis.AuthenticationError as error:
        raise ConfigurationError(f"store {name}: Redis refused the login: {error}") from None
    finally:
        probe.close()


def _check_sqlite_path(path: Path) -> None:
    """What SQLite would only call "unable to open database file", said with its reason."""
    if path.is_dir():
        raise ConfigurationError(f"cannot open SQLite store {path}: it is a directory")
    if path.exists():
        return
    if not path.parent.is_dir():
        raise ConfigurationError(
            f"cannot open SQLite store {path}: directory {path.parent} does not exist "
            "(create it first)"
        )
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigurationError(
            f"cannot open SQLite store {path}: directory {path.parent} is not writable"
        )
