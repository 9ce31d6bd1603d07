"""`evidence-worker canary`: re-score stored first outcomes with the code installed now."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from worker.cli.arguments import add_store_option, describe, positive_int
from worker.cli.exit_codes import NONDETERMINISM, OK
from worker.cli.output import dumps_line, located
from worker.cli.store_access import existing_store, store_name
from worker.human_counts import counted
from worker.settings import Settings

DEFAULT_SAMPLE = 1000


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "canary",
        **describe(
            "re-score stored first outcomes with the installed code (exit 3 on any change)",
            example="canary --all --store redis://localhost:6379/0",
            details="The determinism check to run after upgrading Ragas or the metric: "
            "re-score stored first outcomes (a seeded sample, or all) through the worker's "
            "path and Ragas's own .score(); print one JSON line per row that no longer "
            "matches (hash, case_id, stored vs now, versions). Exit 3 on any difference.",
        ),
    )
    add_store_option(parser)
    parser.add_argument(
        "--sample",
        type=positive_int,
        default=DEFAULT_SAMPLE,
        metavar="N",
        help=f"re-score a uniform sample of N stored outcomes (default {DEFAULT_SAMPLE})",
    )
    parser.add_argument("--all", action="store_true", help="re-score every stored outcome")
    parser.add_argument("--seed", type=int, default=0, help="sample seed (default 0)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from worker.audit.canary import run_canary

    with existing_store(args, settings) as store:
        named = store_name(store, args, settings)
        result = run_canary(
            store.first_outcomes(), size=None if args.all else args.sample, seed=args.seed
        )
    for difference in result.differences:
        print(dumps_line(difference.as_json()))
    summary = (
        f"canary: re-scored {result.checked:,} of {counted(result.seen, 'stored first outcome')}; "
        f"{len(result.differences):,} {'differs' if len(result.differences) == 1 else 'differ'}"
    )
    print(located(summary, store=named), file=sys.stderr)
    return NONDETERMINISM if result.differences else OK
