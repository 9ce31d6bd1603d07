"""`evidence-worker records`: the store's first outcomes as record rows, filtered, oldest first,
streamed as JSON lines or CSV (SPEC §11)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, get_args

from contracts.outcomes import Owner, Status
from contracts.triage import FindingName
from worker.cli.alerts import iso_time
from worker.cli.arguments import CASE_ID, add_store_option, describe, nonempty, utf8_text
from worker.cli.exit_codes import OK
from worker.cli.output import (
    CSV,
    JSONL,
    TABLE,
    Table,
    add_format_options,
    chosen_format,
    dumps_line,
    located,
)
from worker.cli.policy_options import add_policy_options, previous_rule_today, resolve_policy
from worker.cli.store_access import existing_store, store_name
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings

FORMATS = (TABLE, JSONL, CSV)
COLUMNS = ("case", "status", "value", "owner", "missing IDs", "recorded at")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "records",
        **describe(
            "list the store's first outcomes as record rows, filtered, oldest first",
            example="records --owner attribution --status fail --since 2026-12-01 --format csv",
            details="Print one row per input hash the store keeps: its first (canonical) "
            "outcome, as the record line the worker wrote when it first recorded it (cache "
            "miss), decided under the policy given now (--policy or --min-coverage, else the "
            "environment's; without one, report-only: valid rows are `scored`), exactly as "
            "explain decides it. Oldest first by recorded_at (to the millisecond; ties by "
            "input hash), streamed: memory stays bounded whatever the store holds. Fields "
            "are the record line's, less those a store does not keep (blocking, trace_id, "
            "produced_at, duration_ms). Filters combine; a summary goes to stderr. Exit 0, "
            "also when no row matches; 2 on bad input or a store that is not there.",
        ),
    )
    add_store_option(parser)
    add_policy_options(parser)
    parser.add_argument(
        "--contract",
        metavar="V",
        type=nonempty(utf8_text("contract versions"), "name a contract version"),
        help="only rows of this contract_version (default: all)",
    )
    parser.add_argument(
        "--owner", choices=get_args(Owner), help="only rows routed to this owner (default: all)"
    )
    parser.add_argument(
        "--status", choices=get_args(Status), help="only rows with this status (default: all)"
    )
    parser.add_argument(
        "--previous-status",
        choices=get_args(Status),
        help="only rows with this status under the previous policy of the policy's open "
        "observation window ([observe]); no row matches outside a window (default: all)",
    )
    parser.add_argument(
        "--finding",
        choices=get_args(FindingName),
        metavar="F",
        help="only rows with a finding of this name, e.g. not_cited (default: all; one of: "
        f"{', '.join(get_args(FindingName))})",
    )
    parser.add_argument(
        "--case-prefix",
        metavar="P",
        type=nonempty(CASE_ID, "give the start of a case ID"),
        help="only rows whose case_id starts with P (default: all)",
    )
    parser.add_argument(
        "--since",
        type=iso_time,
        metavar="ISO8601",
        help="only rows recorded at or after this time, e.g. 2026-12-01T12:00:00Z; no offset "
        "means UTC (default: any time)",
    )
    parser.add_argument(
        "--until",
        type=iso_time,
        metavar="ISO8601",
        help="only rows recorded before this time (default: any time)",
    )
    add_format_options(parser, FORMATS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.audit.record_rows import FIELDS, RecordQuery, Selection, csv_cells
    from worker.audit.safe_csv import SafeWriter

    if args.since is not None and args.until is not None and args.until <= args.since:
        raise InputError(
            f"--until {args.until.isoformat()} is not after --since {args.since.isoformat()}:"
            " no row could match"
        )
    policy = resolve_policy(args, settings, required=False)
    selection = Selection(
        RecordQuery(
            contract=args.contract,
            owner=args.owner,
            status=args.status,
            previous_status=args.previous_status,
            finding=args.finding,
            case_prefix=args.case_prefix,
        ),
        policy,
        previous=previous_rule_today(policy),
    )
    out = sys.stdout
    chosen = chosen_format(args)
    with existing_store(args, settings) as store:
        named = store_name(store, args, settings)
        rows = selection.rows(store.first_outcomes_by_time(args.since, args.until))
        if chosen == CSV:
            writer = SafeWriter(out)
            writer.writerow(FIELDS)
            for row in rows:
                writer.writerow(csv_cells(row))
        elif chosen == JSONL:
            for row in rows:
                out.write(dumps_line(row) + "\n")
        else:
            table = Table(COLUMNS)
            for row in rows:
                table.add(
                    row["case_id"],
                    row["status"],
                    row["value"],
                    row["owner"],
                    row["missing_claim_ids"],
                    row["recorded_at"],
                )
            if chosen == TABLE:
                table.print()
    decided = f"policy {policy.version}" if policy else "report-only (no policy)"
    summary = (
        f"records: {counted(selection.selected, 'row')} of "
        f"{counted(selection.read, 'first outcome')} read; {decided}"
    )
    print(located(summary, store=named), file=sys.stderr)
    return OK
