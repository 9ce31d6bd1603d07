"""`evidence-worker show HASH`: the first outcome and every attempt behind a number."""

from __future__ import annotations

import argparse
import re
from typing import Any

from worker.cli.common import add_store_option, describe, existing_store
from worker.cli.exit_codes import OK
from worker.errors import InputError
from worker.settings import Settings

HASH_PATTERN = re.compile(r"[0-9a-f]{64}")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "show",
        **describe(
            "print the first outcome and every attempt for an input hash",
            example="show f4a60bffff38ff313c11ab8913e01295481e46a154e779215d15bb8a87825a44",
            details="Print, as JSON, the first (canonical) outcome recorded for an input hash "
            "and every attempt kept beside it, with the exact claim ID lists behind each.",
        ),
    )
    parser.add_argument("input_hash", metavar="HASH", help="the record's input_hash")
    add_store_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    with existing_store(args, settings) as store:
        history = store.history(args.input_hash)
    if history is None:
        hint = (
            ""
            if HASH_PATTERN.fullmatch(args.input_hash)
            else " (an input hash is 64 lowercase hex digits, as in a record's input_hash)"
        )
        raise InputError(f"no outcome recorded for input hash {args.input_hash}{hint}")
    print(history.model_dump_json(indent=2))
    return OK
