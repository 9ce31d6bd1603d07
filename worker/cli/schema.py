"""`evidence-worker schema`: the published JSON Schemas, printed or written to a directory."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from worker.cli.arguments import describe, nonempty
from worker.cli.exit_codes import OK
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings, display_path


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "schema",
        **describe(
            "print the published JSON Schemas",
            example="schema --write contracts/schemas",
            details="Print every published JSON Schema as one JSON object keyed by file name, "
            "or write one file per schema into a directory (created if needed; files of "
            "the same names are replaced).",
        ),
    )
    parser.add_argument(
        "--write",
        metavar="DIR",
        type=nonempty(Path, "name a directory"),
        help="write one file per schema into DIR (default: print them)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from contracts import json_schemas

    schemas = json_schemas()
    if args.write is None:
        print(json.dumps(schemas, indent=2, sort_keys=True))
        return OK
    directory: Path = args.write
    shown = display_path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"cannot write schemas into {shown}: it is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, schema in schemas.items():
            (directory / name).write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    except OSError as error:
        raise InputError(f"cannot write schemas into {shown}: {error.strerror}") from None
    print(f"schema: wrote {counted(len(schemas), 'file')} to {shown}", file=sys.stderr)
    return OK
