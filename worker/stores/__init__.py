"""Result stores behind two small Protocols (outcomes, audit trail); open_store() picks one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from worker.errors import ConfigurationError
from worker.stores.base import (
    AuditTrail,
    DeadLetter,
    History,
    OutcomeStore,
    Recorded,
    ResultStore,
    classify,
    outcome_json,
)
from worker.stores.ledger import Ledger, LedgerEntry

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
    "open_store",
    "outcome_json",
]

SQLITE_PREFIX = "sqlite:///"
STORE_URL_HINT = "use sqlite:///path/to.db or redis://host:port/db"


def open_store(url: str, settings: Settings) -> ResultStore:
    """sqlite:///path (embedded) or redis:// / rediss:// (shared); else a ConfigurationError."""
    if url.startswith(SQLITE_PREFIX):
        from worker.stores.sqlite import SQLiteStore

        path = url.removeprefix(SQLITE_PREFIX)
        if not path:
            raise ConfigurationError(f"store URL {url!r} names no file: use sqlite:///path/to.db")
        _check_sqlite_path(Path(path))
        return SQLiteStore(
            path,
            max_attempts_per_hash=settings.max_attempts_per_hash,
            ttl_seconds=settings.result_ttl_seconds,
            dead_letter_max_bytes=settings.dead_letter_max_bytes,
            ledger_ttl_seconds=settings.ledger_ttl_seconds,
        )
    if url.startswith(("redis://", "rediss://", "unix://")):
        from worker.settings import redis_db
        from worker.stores.redis import RedisStore

        if not url.startswith("unix://"):
            try:
                redis_db(url)
            except ValueError as error:
                raise ConfigurationError(f"store URL {error}") from None
        # rediss://: the TLS settings, the certificate always checked.
        return RedisStore.from_url(
            url,
            client_options=settings.redis_tls_options() if url.startswith("rediss://") else None,
            prefix=settings.key_prefix,
            max_attempts_per_hash=settings.max_attempts_per_hash,
            ttl_seconds=settings.result_ttl_seconds,
            dead_letter_max_bytes=settings.dead_letter_max_bytes,
            ledger_ttl_seconds=settings.ledger_ttl_seconds,
        )
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
