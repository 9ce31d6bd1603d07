"""`evidence-worker report PATH`: records aggregated per contract version and policy group."""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worker.cli.arguments import STORE_URL, describe, nonempty
from worker.cli.exit_codes import OK
from worker.cli.inputs import JsonLines, source_name
from worker.cli.policy_options import add_policy_options, previous_rule_today, resolve_policy
from worker.cli.store_access import existing_store
from worker.errors import InputError
from worker.report.days import DEFAULT_TIME_FIELD, TIME_FIELDS
from worker.settings import Settings, display_path, masked_url

if TYPE_CHECKING:
    from collections.abc import Iterator

    from contracts import Attempt, Policy
    from worker.report.aggregate import Report


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "report",
        **describe(
            "aggregate record files per contract version and policy group",
            example="report records.jsonl --html report.html",
            details="Read JSON-lines records as score and the worker emit them (- for stdin) "
            "and aggregate them per contract version and policy group: counts by status and "
            "cache outcome, mean/min/max over valid rows only, invalid rows counted apart with "
            "their top reasons, rows per owner (all five), the most often missing claim IDs "
            "with their dominant finding, a warning where every row has at most two required "
            "claims, policy versions and thresholds seen, nondeterminism and contract_drift "
            "alerts, and the hashes alerts name with the show and explain commands for each. "
            "Invalid reasons that differ only in their claim IDs are grouped (<ids>, with two "
            "examples). When the records span more than one UTC day, per contract version and "
            "day: rows, valid and invalid rows, the mean over valid rows, and alerts of both "
            "kinds; records without a time (written before records carried one) are counted "
            "apart, never put on a day. Other lines of the worker's are skipped and counted by "
            "event; Celery's own log lines are counted apart; unparsable "
            "lines are counted as unreadable. Versions are never mixed. "
            "With --store instead of PATH: the same sections over the store's first outcomes, "
            "one per input hash (the rows `records` prints), and the alerts it keeps. "
            "Exit 0 when a report was produced, 2 when PATH is unreadable or holds no records, "
            "or the store is not there.",
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        type=nonempty(str, "name a file, or - for stdin"),
        help="JSON-lines record file, or - for stdin",
    )
    source.add_argument(
        "--store",
        metavar="URL",
        type=STORE_URL,
        help="instead of PATH, aggregate this store's first outcomes, one per input hash, "
        "decided under --policy/--min-coverage (else the environment's policy; else "
        "report-only), with its alerts: the rows `records` prints (sqlite:///file or "
        "redis://host:port/db; default: read PATH)",
    )
    add_policy_options(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--html",
        metavar="OUT",
        type=nonempty(Path, "name the HTML file to write"),
        help="also write a self-contained HTML page (histograms with the policy thresholds, "
        "per-day time series, owners and missing-claims tables, alert hashes with the "
        "commands to inspect them, invalid reasons) "
        "to OUT (default: none)",
    )
    parser.add_argument(
        "--days-from",
        choices=TIME_FIELDS,
        default=DEFAULT_TIME_FIELD,
        help="the record time that puts rows on days: recorded_at (when the worker recorded "
        "or rejected them) or produced_at (when upstream produced the message; rows without "
        "it are counted apart) (default: %(default)s)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.report.aggregate import build_report
    from worker.report.text import render_text

    if args.store is None:
        if args.policy is not None or args.min_coverage is not None:
            raise InputError(
                "--policy and --min-coverage apply to report --store only: a record file's "
                "rows were decided when they were written"
            )
        source = source_name(args.path)
        report = build_report(
            JsonLines(args.path),
            source=source,
            time_field=args.days_from,
            windows=_file_windows(settings),
        )
    else:
        source, report = _store_report(args, settings)
    if report.records == 0:
        raise InputError(
            f"{source} contains no evidence_coverage records "
            f"({sum(report.skipped.values()) + report.log_lines} other lines, "
            f"{report.unreadable} unreadable)"
        )
    if args.html is not None:
        from worker.report.html import render_html

        try:
            args.html.write_text(render_html(report), encoding="utf-8")
        except OSError as error:
            raise InputError(f"cannot write {display_path(args.html)}: {error.strerror}") from None
        print(f"report: wrote {display_path(args.html)}", file=sys.stderr)
    print(report.model_dump_json() if args.json else render_text(report))
    return OK


def _store_report(args: argparse.Namespace, settings: Settings) -> tuple[str, Report]:
    """The report of a store: its first outcomes as `records` rows (one per input hash) and
    its kept alerts, fed to the record file's aggregation as the lines a file would give."""
    from worker.audit.record_rows import RecordQuery, Selection, report_lines
    from worker.audit.stability_sources import StoreStability, with_histories
    from worker.report.aggregate import build_report
    from worker.report.graders import grader_reports
    from worker.stores import describe as describe_store

    policy = resolve_policy(args, settings, required=False)
    with existing_store(args, settings) as store:
        source = describe_store(store, args.store)
        # The Graders section from the same pass: the first outcomes come with their
        # histories, read a page at a time.
        graders = StoreStability()

        def firsts() -> Iterator[tuple[str, Attempt]]:
            for input_hash, first, history in with_histories(store):
                graders.add(first, history)
                yield input_hash, first

        rows = Selection(RecordQuery(), policy, previous_rule_today(policy)).rows(firsts())
        # alerts() reads the newest `limit`: all that are kept, oldest first. Read before the
        # rows, so that the report keeps the place of the hashes they name only; the rows
        # stream through it, and its memory does not grow with the store.
        alerts = store.alerts(limit=max(store.alert_count(), 1))
        report = build_report(
            report_lines(rows, alerts),
            source=source,
            time_field=args.days_from,
            windows=windows_of(policy),
            alert_hashes={alert.input_hash for alert in alerts},
            graders=False,
        )
    # The rows are first outcomes only: the store's histories say what was re-graded.
    update = {"graders": grader_reports(graders.stability().rows), "store": masked_url(args.store)}
    return source, report.model_copy(update=update)


def windows_of(policy: Policy | None) -> dict[str, date]:
    """The observation window a policy names, as the Calibration section knows windows: its
    last day by its previous policy's version (SPEC §12)."""
    if policy is None or policy.observe is None:
        return {}
    return {policy.observe.rule.version: policy.observe.until}


def _file_windows(settings: Settings) -> dict[str, date]:
    """A record file's rows were decided when written, and do not carry a window's end: the
    configured policy file (EVIDENCE_POLICY_FILE), when it reads, says it. One that does not
    read changes nothing here: the report does not decide rows."""
    from contracts import PolicyError
    from worker.errors import ConfigurationError
    from worker.settings import read_policy_file

    if settings.policy_file is None:
        return {}
    try:
        return windows_of(read_policy_file(settings.policy_file))
    except (PolicyError, ConfigurationError):
        return {}
