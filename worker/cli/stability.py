"""`evidence-worker stability`: per grader, how often re-grading the same inputs changed the
outcome, with the rate's 95% Wilson interval (SPEC §10)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from worker.cli.alerts import iso_time
from worker.cli.arguments import add_store_option, describe, nonempty, rate
from worker.cli.exit_codes import NONDETERMINISM, OK
from worker.cli.inputs import source_name
from worker.cli.output import dumps_line
from worker.cli.store_access import existing_store, store_url
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings

if TYPE_CHECKING:
    from contracts.grader_stability import GraderStability


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "stability",
        **describe(
            "per grader, how often re-grading the same inputs flipped the outcome (exit 3 "
            "above --max-flip-rate)",
            example="stability --store redis://localhost:6379/0 --max-flip-rate 0.05",
            details="Print one line per grader (name, version, model): the input hashes it "
            "graded, those graded at least twice (re-graded), those where some attempt's "
            "outcome differed from the first (flipped), the flip rate flipped / re-graded and "
            "its 95% Wilson score interval; least stable first (by the interval's low end). "
            "Read from the store's attempts, or with --records from the record lines the "
            "worker or score wrote. With --json, one JSON object per grader. Exit 3 when some "
            "grader's flip_rate_low exceeds --max-flip-rate; 0 otherwise; 2 on bad input, a "
            "store that is not there, or a record file without scored records.",
        ),
    )
    source = parser.add_mutually_exclusive_group()
    add_store_option(source)
    source.add_argument(
        "--records",
        metavar="FILE",
        type=nonempty(str, "name a file, or - for stdin"),
        help="read a JSON-lines record file (the worker's or score's lines) instead of the "
        "store, or - for stdin (default: read the store)",
    )
    parser.add_argument(
        "--since",
        type=iso_time,
        metavar="ISO8601",
        help="only attempts recorded at or after this time, each still compared with its "
        "hash's first outcome, e.g. 2026-12-01T12:00:00Z; no offset means UTC "
        "(default: any time)",
    )
    parser.add_argument(
        "--max-flip-rate",
        metavar="R",
        type=rate,
        help="exit 3 when a grader's flip_rate_low (the interval's low end) exceeds R, "
        "in 0.0..1.0 (default: never)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per grader")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.audit.stability_sources import records_stability, store_stability
    from worker.report.graders import GraderReport, grader_line

    if args.records is not None:
        from worker.cli.inputs import JsonLines

        source = source_name(args.records)
        stability = records_stability(JsonLines(args.records), since=args.since)
        if not stability.rows and not stability.unnamed:
            raise InputError(f"{source} contains no evidence_coverage scored records")
    else:
        from worker.stores import describe as describe_store

        with existing_store(args, settings) as store:
            source = describe_store(store, store_url(args, settings))
            stability = store_stability(store, since=args.since)
    for row in stability.rows:
        fields = row.as_json()
        print(dumps_line(fields) if args.json else grader_line(GraderReport(**fields)))
    above = [row for row in stability.rows if exceeds(row, args.max_flip_rate)]
    print(summary(source, stability.rows, stability.unnamed, above, args), file=sys.stderr)
    return NONDETERMINISM if above else OK


def exceeds(row: GraderStability, max_flip_rate: float | None) -> bool:
    low = row.flip_rate_low
    return max_flip_rate is not None and low is not None and low > max_flip_rate


def summary(
    source: str,
    rows: list[GraderStability],
    unnamed: int,
    above: list[GraderStability],
    args: argparse.Namespace,
) -> str:
    text = f"stability: {counted(len(rows), 'grader')} in {source}"
    if args.since is not None:
        text += f" since {args.since.isoformat()}"
    if unnamed:
        what = "record line" if args.records is not None else "input hash"
        text += f"; {counted(unnamed, what)} without a grader (kept before graders were named)"
    if args.max_flip_rate is not None:
        text += f"; {len(above):,} with flip_rate_low above --max-flip-rate {args.max_flip_rate:g}"
    return text
