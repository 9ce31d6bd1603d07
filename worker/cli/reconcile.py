"""`evidence-worker reconcile`: published messages never recorded nor dead-lettered (exit 3),
and `--republish` to send them again."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from worker.cli.arguments import add_broker_option, add_worker_store_option, describe, with_broker
from worker.cli.exit_codes import OK, UNRECORDED
from worker.cli.output import dumps_line, located
from worker.cli.store_access import opened_store
from worker.human_counts import counted
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.stores import Ledger, LedgerEntry

DEFAULT_OLDER_THAN = "10m"
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> timedelta:
    """argparse type: 90, 90s, 10m, 2h or 1d."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use seconds (90) or a number with s, m, h or d (10m)"
        )
    number, unit = match.groups()
    return timedelta(seconds=float(number) * _UNIT_SECONDS[unit])


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "reconcile",
        **describe(
            "list published messages that were never recorded (exit 3); --republish them",
            example="reconcile --older-than 10m --republish",
            details="Every message `publish` or worker.client sends is first noted in the "
            "publish ledger of the workers' store, and published there once the broker took it "
            "(a note of a message the user was told was not sent is never listed nor sent); "
            "the worker's record (or dead letter) closes its entry. Print one JSON line per "
            "message noted longer ago than --older-than "
            "(by the store's clock, never a publisher's) whose entry is still open: lost "
            "between the publisher and the store (a broker "
            "that crashed, a worker killed as it took the message). Exit 3 when there is any. "
            "--older-than must be longer than messages wait in the queue. With --republish, "
            "send each again under a new task id (it lands as a miss, or a hit: the same "
            "inputs give the same outcome). Entries are kept for EVIDENCE_LEDGER_TTL_SECONDS.",
        ),
    )
    parser.add_argument(
        "--older-than",
        type=duration,
        default=duration(DEFAULT_OLDER_THAN),
        metavar="AGE",
        help=f"only messages published longer ago than AGE (default {DEFAULT_OLDER_THAN}; "
        "90, 90s, 10m, 2h, 1d)",
    )
    parser.add_argument(
        "--republish", action="store_true", help="send the unrecorded messages to the queue again"
    )
    add_worker_store_option(parser, "the store that keeps the publish ledger")
    add_broker_option(parser, "with --republish: where the messages are sent")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.stores.identity import named_store
    from worker.upstream.reconcile import as_line, cutoff

    settings = with_broker(args, settings)
    url = args.store or settings.result_store_url
    with opened_store(url, settings) as store:
        # Ages by the store's clock, which stamped every entry, never this machine's.
        now = store.ledger_now()
        before = cutoff(args.older_than, now=now)
        entries = store.unrecorded(published_before=before)
        if args.republish:
            found = _republish(entries, store, settings, now=now)
        else:
            found = 0
            for entry in entries:
                print(dumps_line(as_line(entry, now=now, republished_as=None)))
                found += 1
    # After the read: a store that cannot be read is one line on stderr, its error.
    print(f"reconcile: read the ledger of {named_store(url, settings)}", file=sys.stderr)
    verb = "sent again" if args.republish else "listed"
    summary = (
        f"reconcile: {counted(found, 'message')} published before {before.isoformat()} "
        f"{'was' if found == 1 else 'were'} neither recorded nor dead-lettered; {found:,} {verb}"
    )
    broker = settings.broker_url if args.republish else None
    print(located(summary, store=url, broker=broker), file=sys.stderr)
    return UNRECORDED if found else OK


def _republish(
    entries: Iterable[LedgerEntry], store: Ledger, settings: Settings, *, now: datetime
) -> int:
    from worker.cli.publish import bound_broker_waits
    from worker.runtime.celery_app import create_app
    from worker.upstream.reconcile import as_line, republish

    app = create_app(settings)
    bound_broker_waits(app.conf)
    try:
        return republish(
            entries,
            app=app,
            queue=settings.queue,
            ledger=store,
            max_message_bytes=settings.max_message_bytes,
            on_sent=lambda entry, task_id: print(
                dumps_line(as_line(entry, now=now, republished_as=task_id))
            ),
        )
    finally:
        app.close()
