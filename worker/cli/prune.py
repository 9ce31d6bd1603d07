"""`evidence-worker prune`: drop old attempts (and, if asked, old outcomes) from a SQLite store."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from worker.cli.alerts import iso_time
from worker.cli.arguments import add_store_option, describe
from worker.cli.exit_codes import OK
from worker.cli.output import located
from worker.cli.store_access import existing_store, store_url
from worker.errors import ConfigurationError
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.stores.sqlite.sqlite_prune import Pruned


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "prune",
        **describe(
            "drop a SQLite store's attempts recorded before a time (first outcomes stay)",
            example="prune --before 2026-11-01 --store sqlite:///evidence-coverage.sqlite3",
            details="Drop every later attempt recorded before --before (default: now less "
            "EVIDENCE_ATTEMPTS_TTL_SECONDS) and every history past EVIDENCE_RESULT_TTL_SECONDS. "
            "First outcomes stay, so an input judged differently later is still alerted; with "
            "--outcomes, histories first recorded before the time go too, and their inputs "
            "start new histories. Safe beside running workers: short transactions. A Redis "
            "store expires its keys itself (EVIDENCE_RESULT_TTL_SECONDS, "
            "EVIDENCE_ATTEMPTS_TTL_SECONDS).",
        ),
    )
    add_store_option(parser)
    parser.add_argument(
        "--before",
        type=iso_time,
        metavar="ISO8601",
        help="drop what was recorded before this time, e.g. 2026-11-01 (no offset: UTC; "
        "default: now less EVIDENCE_ATTEMPTS_TTL_SECONDS)",
    )
    parser.add_argument(
        "--outcomes",
        action="store_true",
        help="also drop the histories (first outcome included) first recorded before it",
    )
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="then rewrite the file to give the space back (needs as much free disk as the "
        "file, and the write lock while it runs)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.stores.sqlite.sqlite_store import SQLiteStore

    now = datetime.now(UTC)
    before: datetime | None = args.before
    if before is None:
        if settings.attempts_ttl_seconds is None:
            raise ConfigurationError(
                "prune: give --before ISO8601, or set EVIDENCE_ATTEMPTS_TTL_SECONDS"
            )
        before = now - timedelta(seconds=settings.attempts_ttl_seconds)
    with existing_store(args, settings, read_only=False) as store:
        if not isinstance(store, SQLiteStore):
            raise ConfigurationError(
                "prune works on a SQLite store: Redis expires keys itself (set "
                "EVIDENCE_RESULT_TTL_SECONDS and EVIDENCE_ATTEMPTS_TTL_SECONDS)"
            )
        size = store.path.stat().st_size

        def progress(done: Pruned) -> None:
            print(f"prune: {_counts(done)} so far", file=sys.stderr, flush=True)

        done = store.prune(
            before, now=now, outcomes=args.outcomes, progress=progress if _tty() else None
        )
        if args.vacuum:
            store.vacuum()
        after = store.path.stat().st_size
    summary = (
        f"prune: {_counts(done)} (before {before.isoformat()}); file {size:,} -> {after:,} bytes"
        + ("" if args.vacuum else " (--vacuum gives the space back)")
    )
    print(located(summary, store=store_url(args, settings)), file=sys.stderr)
    return OK


def _counts(done: Pruned) -> str:
    return (
        f"{done.attempts:,} attempts, {done.old_outcomes:,} old and "
        f"{done.expired_outcomes:,} expired histories, {done.contracts:,} expired contract rows"
    )


def _tty() -> bool:
    return sys.stderr.isatty()
