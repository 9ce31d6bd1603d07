"""The store a command opens: its URL (--store, the environment, the embedded file), opened
and closed, its client library's errors said in one line, and its name in a summary line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.errors import ConfigurationError
from worker.settings import display_path

if TYPE_CHECKING:
    from worker.settings import Settings
    from worker.stores import ResultStore


def store_url(args: argparse.Namespace, settings: Settings) -> str:
    """--store, else EVIDENCE_STORE_URL, else the embedded SQLite file."""
    return str(args.store or settings.embedded_store_url())


@contextmanager
def existing_store(
    args: argparse.Namespace, settings: Settings, *, read_only: bool = True
) -> Iterator[ResultStore]:
    """The store a command looks in, closed afterwards: opened for reading only unless the
    command writes to it; a SQLite file that is not there is an error, not a new empty
    store that would report "nothing recorded"."""
    from worker.stores import SQLITE_PREFIX

    url = store_url(args, settings)
    path = Path(url.removeprefix(SQLITE_PREFIX))
    if url.startswith(SQLITE_PREFIX) and url != SQLITE_PREFIX and not path.exists():
        raise ConfigurationError(
            f"no store at {display_path(path)}: nothing has been recorded there (pass --store "
            "or set EVIDENCE_STORE_URL to the store `score` or the worker wrote to)"
        )
    with opened_store(url, settings, read_only=read_only) as store:
        yield store


def store_name(store: ResultStore, args: argparse.Namespace, settings: Settings) -> str:
    """How a summary line names the store a command opened: its URL, password masked (a Redis
    Cluster's kind and size after it)."""
    from worker.stores import describe as describe_store

    return describe_store(store, store_url(args, settings))


@contextmanager
def opened_store(url: str, settings: Settings, *, read_only: bool = False) -> Iterator[ResultStore]:
    """The store at `url`, its errors said in one line (store_errors), closed afterwards."""
    from worker.stores import open_store

    with store_errors(url):
        store = open_store(url, settings, read_only=read_only)
        try:
            yield store
        finally:
            store.close()


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """What a store's client library raises while it is used, when the user can fix it (a
    read-only file, a full disk, a Redis server refusing writes), as one line that names
    the store."""
    try:
        yield
    except Exception as error:
        # A library that was never imported cannot have raised: look, do not import.
        sqlite3 = sys.modules.get("sqlite3")
        redis = sys.modules.get("redis.exceptions")
        message = None
        if sqlite3 is not None and isinstance(error, sqlite3.DatabaseError):
            message = _sqlite_problem(error, url, sqlite3)
        elif redis is not None:
            message = _redis_problem(error, url, redis)
        if message is None:
            raise
        raise ConfigurationError(message) from None


def _sqlite_problem(error: Exception, url: str, sqlite3: Any) -> str | None:
    """By SQLite's primary result code: what the user fixes outside the program (any other
    code is a bug, which keeps its traceback)."""
    from worker.stores import SQLITE_PREFIX

    code = getattr(error, "sqlite_errorcode", -1) & 0xFF
    path = display_path(url.removeprefix(SQLITE_PREFIX))
    if code in {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN}:
        return (
            f"cannot write to SQLite store {path}: {error} (make the file and its directory "
            "writable, or pass another --store)"
        )
    elsewhere = {
        sqlite3.SQLITE_BUSY,  # another process held the lock past the busy timeout
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
    }
    return f"SQLite store {path}: {error}" if code in elsewhere else None


def _redis_problem(error: Exception, url: str, redis: Any) -> str | None:
    """A refused write (a replica, an ACL, maxmemory); the store itself names a refused login
    or a database the server does not have."""
    from worker.settings import masked_url

    if isinstance(error, redis.ReadOnlyError | redis.NoPermissionError | redis.OutOfMemoryError):
        return f"store {masked_url(url)}: Redis refused to write: {error}"
    return None
