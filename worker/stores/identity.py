"""Which store a store URL names, as one line without secrets: what a worker announces on its
broker (worker/runtime/announcement.py) and what `reconcile` says it reads.

Not the URL with its password masked: the user, the password and the query (where redis-py
also takes a `password=`) are left out, so nothing secret can reach a broker or a log, and
two URLs that name the same data compare equal (the default port and database written out
or not, any user). What does name the data is kept: the server, its port, the database and
the key prefix (two prefixes on one Redis are two stores). A name that only means something
on one machine (a SQLite file, a Unix socket, a Redis at localhost) is that machine's: two
hosts each with a local `/data/evidence.db` are two stores.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from worker.settings import Settings, display_path, masked_url, redis_db, redis_seeds
from worker.stores import SQLITE_PREFIX

DEFAULT_REDIS_PORT = 6379


def cluster_identity(client: Any) -> str | None:
    """`Redis Cluster <digest>` when `client`'s server is a node of a Redis Cluster, else None.

    A cluster store is reached through any of its nodes, and a worker started after a
    failover names another node than the workers before it: the digest is of every node ID
    the cluster knows (CLUSTER NODES; a failed master stays listed until it is forgotten), the
    same whichever node answers. Adding or forgetting a node makes it another name.
    """
    from worker.stores.redis.redis_cluster import cluster_enabled

    if not cluster_enabled(client):
        return None
    reply = client.execute_command("CLUSTER", "NODES")
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    ids = sorted(line.split()[0] for line in text.splitlines() if line.strip())
    return "Redis Cluster " + hashlib.sha256(" ".join(ids).encode()).hexdigest()[:12]


def named_store(url: str, settings: Settings) -> str:
    """store_identity() of the store at `url`, a Redis Cluster's by cluster_identity(): what a
    worker announces and what `reconcile` says it reads, the same for one store."""
    return store_identity(url, settings.key_prefix, cluster=_cluster_of(url, settings))


def _cluster_of(url: str, settings: Settings) -> str | None:
    """cluster_identity() of the Redis store at `url`; None for any other store, or when the
    store cannot tell now (the worker's start-up check reports an unreachable store)."""
    if not url.startswith(("redis://", "rediss://")):
        return None
    import redis

    options = settings.redis_tls_options() if url.startswith("rediss://") else {}
    for seed in redis_seeds(url):  # a cluster's seed nodes, in turn: the first that answers
        try:
            client = redis.Redis.from_url(
                seed, socket_timeout=5, socket_connect_timeout=5, **options
            )
            try:
                return cluster_identity(client)
            finally:
                client.close()
        except redis.RedisError:
            continue
    return None


def store_identity(
    url: str, key_prefix: str, *, host: str | None = None, cluster: str | None = None
) -> str:
    """The store at `url` as one line: `sqlite:////abs/path.db on HOST`, `redis://HOST:PORT/DB
    (key prefix P)`, a loopback Redis as `redis://localhost:PORT/DB on HOST (key prefix P)`.

    `host` is this machine's name (default: socket.gethostname()); a relative SQLite path is
    resolved against the working directory, symbolic links followed. A URL of no known
    scheme is shown masked (open_store refuses it before anything announces it). `cluster`:
    the cluster_identity() of the Redis at `url`, which names the store instead of its node.
    """
    if cluster is not None or len(redis_seeds(url)) > 1:
        return _cluster_line(url, key_prefix, host=host, cluster=cluster)
    machine = host or socket.gethostname()
    if url.startswith(SQLITE_PREFIX):
        path = Path(url.removeprefix(SQLITE_PREFIX)).resolve()
        return f"sqlite:///{display_path(path)} on {machine}"
    parts = urlsplit(url)
    prefix = f"(key prefix {key_prefix})"
    if parts.scheme == "unix":
        socket_path = display_path(Path(parts.path).resolve())
        db = dict(parse_qsl(parts.query)).get("db", "0")
        return f"unix://{socket_path}?db={db} on {machine} {prefix}"
    if parts.scheme in {"redis", "rediss"}:
        server = parts.hostname or "localhost"
        location = f"{parts.scheme}://%s:{parts.port or DEFAULT_REDIS_PORT}/{redis_db(url)}"
        if is_loopback(server):
            return f"{location % 'localhost'} on {machine} {prefix}"
        return f"{location % (f'[{server}]' if ':' in server else server)} {prefix}"
    return masked_url(url)


def _cluster_line(url: str, key_prefix: str, *, host: str | None, cluster: str | None) -> str:
    """A cluster by its identity; one that did not answer by its seed nodes, each named as
    one server would be."""
    if cluster is not None:
        return f"{cluster} (key prefix {key_prefix})"
    named = [
        store_identity(seed, key_prefix, host=host).rsplit(" (", 1)[0] for seed in redis_seeds(url)
    ]
    return f"{', '.join(named)} (key prefix {key_prefix})"


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine itself: localhost, 127.0.0.0/8 or ::1."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a DNS name: the same server from every host that resolves it
        return False
