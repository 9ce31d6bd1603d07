"""`evidence-worker show HASH | --case CASE_ID`: the first outcome and every attempt behind a
number, for one input hash or for every hash recorded for a case (SPEC §9, looking a row up)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import TypeAdapter

from worker.cli.arguments import CASE_ID, PROG, add_store_option, describe, positive_int, utf8_text
from worker.cli.exit_codes import OK
from worker.cli.output import located
from worker.cli.store_access import existing_store, store_name
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings
from worker.stores import History

HASH_FORM = "an input hash is 64 lowercase hex digits, as in a record's input_hash"
_HISTORIES: TypeAdapter[list[History]] = TypeAdapter(list[History])


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "show",
        **describe(
            "print the first outcome and every attempt for an input hash or a case",
            example="show --case refund-001",
            details="Print, as JSON, the first (canonical) outcome recorded for an input hash "
            "and every attempt kept beside it, with the exact claim ID lists, citations and "
            "findings behind each. With --case: a JSON array of those, one per input hash "
            "recorded for the case, newest first (by when the case first recorded it).",
        ),
    )
    add_lookup_arguments(parser)
    parser.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="with --case: the newest N hashes only (default: all)",
    )
    parser.set_defaults(handler=run)


def add_lookup_arguments(parser: argparse.ArgumentParser) -> None:
    """HASH or --case CASE_ID, exactly one of them, and the store to look in."""
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "input_hash",
        nargs="?",
        metavar="HASH",
        type=utf8_text("input hashes"),
        help="the record's input_hash",
    )
    target.add_argument(
        "--case",
        metavar="CASE_ID",
        type=CASE_ID,
        help="a record's case_id: look up the hashes recorded for it (default: give HASH)",
    )
    add_store_option(parser)


def unknown_hash(text: str, command: str) -> InputError:
    """What to say when no outcome is recorded under `text`: what a hash looks like, and
    how to look a row up by its case ID instead."""
    return InputError(
        f"no outcome recorded for input hash {text} ({HASH_FORM}; to look a row up by its"
        f" case ID: {PROG} {command} --case CASE_ID)"
    )


def no_hash_for_case(case_id: str) -> InputError:
    return InputError(f"no input hash recorded for case {case_id}")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.case is None and args.limit is not None:
        raise InputError("--limit applies to show --case CASE_ID only")
    with existing_store(args, settings) as store:
        named = store_name(store, args, settings)
        if args.case is None:
            history = store.history(args.input_hash)
            if history is None:
                raise unknown_hash(args.input_hash, "show")
            print(history.model_dump_json(indent=2))
            print(located(f"show: input hash {args.input_hash}", store=named), file=sys.stderr)
            return OK
        hashes = store.hashes_for_case(args.case, None if args.limit is None else args.limit + 1)
        shown = [store.history(input_hash) for input_hash in hashes[: args.limit]]
    # A hash listed and then gone expired in between: there is nothing left to show.
    histories = [history for history in shown if history is not None]
    if not histories:
        raise no_hash_for_case(args.case)
    print(_HISTORIES.dump_json(histories, indent=2).decode())
    if args.limit is not None and len(hashes) > args.limit:
        print(
            f"{PROG} show: the newest {args.limit} input hashes of case {args.case} shown;"
            " it has more (raise --limit)",
            file=sys.stderr,
        )
    said = f"show: {counted(len(histories), 'input hash')} of case {args.case}"
    print(located(said, store=named), file=sys.stderr)
    return OK
