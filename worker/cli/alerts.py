"""`evidence-worker alerts`: the alerts kept in the store's alert stream (both kinds).

The stream is the source of truth for alerts: the webhook is best effort, and an alert it
did not deliver is logged with its hash and raised_at, which `--since` takes.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from datetime import UTC, datetime
from typing import Any, get_args

from contracts.record_models import AlertKind, AnyAlert, ContractDriftAlert
from worker.cli.arguments import add_store_option, describe, positive_int
from worker.cli.exit_codes import INVALID, NONDETERMINISM, OK
from worker.cli.output import (
    JSONL,
    TABLE,
    Table,
    add_format_options,
    cell_text,
    chosen_format,
    located,
)
from worker.cli.store_access import existing_store, store_name
from worker.settings import Settings

DEFAULT_LIMIT = 100
# The hash last, where it may fold onto a second line: `show` needs all of it.
COLUMNS = ("kind", "raised at", "case", "what differed", "input hash")
ALERT_KINDS = get_args(AlertKind)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "alerts",
        **describe(
            "list nondeterminism and contract drift alerts (exit 3, 2 for drift alone)",
            example="alerts --store redis://localhost:6379/0 --since 2026-12-01T12:00:00Z",
            details="Print the newest alerts, oldest first, one JSON object per line, each with "
            "its kind: nondeterminism (the input hash, the first attempt kept and the attempt "
            "that disagreed with it) or contract_drift (a contract version and case ID, both "
            "required sets, what was added and removed, both hashes and task IDs). Exit 3 when "
            "a nondeterminism alert is listed, else 2 when a contract drift one is. "
            "The alert stream is the source of truth: an alert the webhook could not deliver "
            "is still listed here.",
        ),
    )
    add_store_option(parser)
    parser.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_LIMIT,
        help=f"newest N alerts (default {DEFAULT_LIMIT})",
    )
    parser.add_argument(
        "--since",
        type=iso_time,
        metavar="ISO8601",
        help="only alerts raised at or after this time, e.g. 2026-12-01T12:00:00Z; no offset "
        "means UTC (default: any time)",
    )
    parser.add_argument(
        "--kind",
        choices=ALERT_KINDS,
        help="only alerts of this kind (default: both)",
    )
    add_format_options(parser)
    parser.set_defaults(handler=run)


def alert_cells(alert: AnyAlert) -> tuple[object, ...]:
    """An alert as a table row: kind, when, case, input hash, and what differed."""
    if isinstance(alert, ContractDriftAlert):
        changed = [f"+{claim}" for claim in alert.added_claim_ids or []] + [
            f"-{claim}" for claim in alert.removed_claim_ids or []
        ]
        return (alert.kind, alert.raised_at, alert.case_id, changed, alert.input_hash)
    first, observed = alert.first, alert.observed
    differed = f"first {cell_text(first.value)}, then {cell_text(observed.value)}"
    return (alert.kind, alert.raised_at, first.case_id, differed, alert.input_hash)


def iso_time(text: str) -> datetime:
    """argparse type: an ISO 8601 date or time; one without an offset is taken as UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time: use e.g. 2026-12-01T12:00:00Z or 2026-12-01"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def run(args: argparse.Namespace, settings: Settings) -> int:
    with existing_store(args, settings) as store:
        named = store_name(store, args, settings)
        if args.since is None and args.kind is None:
            alerts = store.alerts(limit=args.limit)
            kept = store.alert_count() if len(alerts) == args.limit else len(alerts)
        else:
            # One more than asked says whether there are more, without counting them all.
            alerts = store.alerts(limit=args.limit + 1, since=args.since, kind=args.kind)
            kept = len(alerts)
            alerts = alerts[-args.limit :]
    chosen = chosen_format(args)
    if chosen == JSONL:
        for alert in alerts:
            print(alert.model_dump_json())
    elif chosen == TABLE:
        table = Table(COLUMNS, wrap="input hash")
        for alert in alerts:
            table.add(*alert_cells(alert))
        table.print()
    counts = Counter(alert.kind for alert in alerts)
    shown = (
        f"alerts: {counts['nondeterminism']} nondeterminism,"
        f" {counts['contract_drift']} contract drift"
    )
    if args.kind is not None:
        shown += f" (--kind {args.kind})"
    if args.since is not None:
        shown += f" raised since {args.since.isoformat()}"
        if kept > len(alerts):
            shown += f" (the newest {len(alerts)}; raise --limit to see more)"
    elif kept > len(alerts):
        shown += f" (the newest {len(alerts)} of {kept} kept; raise --limit to see more)"
    print(located(shown, store=named), file=sys.stderr)
    if counts["nondeterminism"]:
        return NONDETERMINISM
    return INVALID if counts["contract_drift"] else OK
