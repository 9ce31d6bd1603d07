"""`evidence-worker alerts`: nondeterminism alerts kept in the store's alert stream."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from worker.cli.common import add_store_option, describe, existing_store, positive_int
from worker.cli.exit_codes import NONDETERMINISM, OK
from worker.settings import Settings

DEFAULT_LIMIT = 100


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "alerts",
        **describe(
            "list nondeterminism alerts (exit 3 when there are any)",
            example="alerts --store redis://localhost:6379/0 --limit 10",
            details="Print the newest alerts, oldest first, one JSON object per line: the "
            "input hash, the first attempt kept and the attempt that disagreed with it.",
        ),
    )
    add_store_option(parser)
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_LIMIT,
        help=f"newest N alerts (default {DEFAULT_LIMIT})",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    with existing_store(args, settings) as store:
        alerts = store.alerts(limit=args.limit)
        kept = store.alert_count() if len(alerts) == args.limit else len(alerts)
    for alert in alerts:
        print(alert.model_dump_json())
    shown = f"alerts: {len(alerts)} nondeterminism alert(s)"
    if kept > len(alerts):
        shown += f" (the newest {len(alerts)} of {kept} kept; raise --limit to see more)"
    print(shown, file=sys.stderr)
    return NONDETERMINISM if alerts else OK
