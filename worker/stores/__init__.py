"""Result stores behind one Protocol; open_store() picks one from a URL."""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.errors import ConfigurationError
from worker.stores.base import DeadLetter, History, Recorded, ResultStore, classify

if TYPE_CHECKING:
    from worker.settings import Settings

__all__ = ["DeadLetter", "History", "Recorded", "ResultStore", "classify", "open_store"]

SQLITE_PREFIX = "sqlite:///"


def open_store(url: str, settings: Settings) -> ResultStore:
    """sqlite:///path (embedded) or redis:// / rediss:// (shared); else a ConfigurationError."""
    if url.startswith(SQLITE_PREFIX):
        from worker.stores.sqlite import SQLiteStore

        path = url.removeprefix(SQLITE_PREFIX)
        if not path:
            raise ConfigurationError(f"store URL {url!r} names no file: use sqlite:///path/to.db")
        return SQLiteStore(
            path,
            max_attempts_per_hash=settings.max_attempts_per_hash,
            ttl_seconds=settings.result_ttl_seconds,
        )
    if url.startswith(("redis://", "rediss://", "unix://")):
        from worker.stores.redis import RedisStore

        # rediss://: the TLS settings, the certificate always checked.
        return RedisStore.from_url(
            url,
            client_options=settings.redis_tls_options() if url.startswith("rediss://") else None,
            prefix=settings.key_prefix,
            max_attempts_per_hash=settings.max_attempts_per_hash,
            ttl_seconds=settings.result_ttl_seconds,
        )
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise ConfigurationError(
        f"unknown store scheme {scheme!r} in store URL (EVIDENCE_STORE_URL or --store): "
        "use sqlite:///path/to.db or redis://host:port/db"
    )
