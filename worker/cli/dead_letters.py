"""`evidence-worker dead-letters list|show|replay|purge`: read, replay and remove the
messages the worker and `score` rejected (SPEC §11). The replay's steps are in
dead_letters_replay.py."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from worker.cli.alerts import iso_time
from worker.cli.arguments import (
    add_broker_option,
    add_store_option,
    describe,
    positive_int,
    utf8_text,
    with_broker,
)
from worker.cli.exit_codes import OK
from worker.cli.output import (
    JSONL,
    TABLE,
    Table,
    add_format_options,
    chosen_format,
    dumps_line,
    located,
)
from worker.cli.policy_options import add_policy_options
from worker.cli.store_access import existing_store, store_url
from worker.errors import InputError
from worker.human_counts import counted
from worker.settings import Settings
from worker.stores import ResultStore
from worker.usage_errors import HelpfulParser

NAME = "dead-letters"
LETTER_ID = utf8_text("letter IDs")
LIST_COLUMNS = ("id", "received at", "origin", "case", "reason")
REASON = utf8_text("reasons")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        NAME,
        **describe(
            "list, show, replay or purge the messages that were rejected (dead letters)",
            example="dead-letters list --reason schema --limit 20",
            details="A message that fails validation is kept whole as a dead letter, by the "
            "worker (in its store) and by `score` (in its store: --store, else "
            "EVIDENCE_STORE_URL, else the embedded SQLite file). `list` prints one JSON line "
            "per letter, oldest first (id, time, reason, case_id: null when the body is not "
            "readable, origin: worker or score); `show ID` prints its body as received; "
            "`replay` sends letters back the way they came and removes each once its replay "
            "is recorded or dead-lettered anew; `purge --before T --yes` removes old ones.",
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=HelpfulParser)
    actions.required = True

    listing = actions.add_parser(
        "list",
        **describe(
            "one JSON line per letter, oldest first",
            example="dead-letters list --since 2026-12-01 --reason 'Field required'",
        ),
    )
    listing.add_argument(
        "--since", type=iso_time, metavar="ISO8601", help="only letters received at or after it"
    )
    listing.add_argument(
        "--reason", metavar="TEXT", type=REASON, help="only letters whose reason contains TEXT"
    )
    listing.add_argument(
        "--limit", type=positive_int, metavar="N", help="only the newest N that match"
    )
    add_store_option(listing)
    add_format_options(listing)
    listing.set_defaults(handler=run_list)

    show = actions.add_parser(
        "show",
        **describe(
            "print one letter's body exactly as it was received",
            example="dead-letters show 17",
            details="Print the body of letter ID as it was received (a newline after it), "
            "nothing else: `dead-letters show 17 > fixed.jsonl` gives a file to edit and "
            "`score`. A body over EVIDENCE_DEAD_LETTER_MAX_BYTES was kept cut; stderr says so.",
        ),
    )
    show.add_argument(
        "letter_id", metavar="ID", type=LETTER_ID, help="a letter's id, as `list` prints it"
    )
    add_store_option(show)
    show.set_defaults(handler=run_show)

    replay = actions.add_parser(
        "replay",
        **describe(
            "send letters back the way they came; remove each once it is recorded",
            example="dead-letters replay --all --reason 'Field required'",
            details="A worker's letter goes to the broker through the publish ledger "
            "(EVIDENCE_BROKER_URL, EVIDENCE_QUEUE); its letter is removed once the worker has "
            "recorded it, or dead-lettered it anew, which replay waits for (--wait). A letter "
            "`score` wrote is scored here, as `score` does, and its record printed. A body "
            "that is still invalid is dead-lettered again with its reason (exit 2); then the "
            "old letter goes. A letter is never removed before: one not recorded within --wait "
            "is kept (exit 3), and replaying it again sends the same write, which the store "
            "never records twice.",
        ),
    )
    chosen = replay.add_mutually_exclusive_group()
    chosen.add_argument(
        "letter_ids", nargs="*", default=[], metavar="ID", type=LETTER_ID, help="letters to replay"
    )
    chosen.add_argument("--all", action="store_true", help="every letter (with --reason: those)")
    replay.add_argument(
        "--reason",
        metavar="TEXT",
        type=REASON,
        help="with --all: only letters whose reason contains TEXT",
    )
    replay.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the worker to record the letters sent to it (default 60)",
    )
    add_store_option(replay)
    add_broker_option(replay, "where a worker's letters are sent")
    add_policy_options(replay)
    replay.set_defaults(handler=run_replay)

    purge = actions.add_parser(
        "purge",
        **describe(
            "remove the letters received before a time (asks for --yes)",
            example="dead-letters purge --before 2026-11-01 --yes",
        ),
    )
    purge.add_argument(
        "--before",
        type=iso_time,
        required=True,
        metavar="ISO8601",
        help="remove letters received before this time (no offset: UTC)",
    )
    purge.add_argument("--yes", action="store_true", help="remove them (without: only count)")
    add_store_option(purge)
    purge.set_defaults(handler=run_purge)


def run(args: argparse.Namespace, settings: Settings) -> int:
    """The command's entry in COMMANDS (the parser sets each action's handler itself)."""
    handler = {
        "list": run_list,
        "show": run_show,
        "replay": run_replay,
        "purge": run_purge,
    }[args.action]
    return handler(args, settings)


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    from worker.audit.letters import listing_line, select

    with existing_store(args, settings) as store:
        named = where(store, args, settings)
        chosen = select(
            store.letters_newest_first(), since=args.since, reason=args.reason, limit=args.limit
        )
    shown = chosen_format(args)
    if shown == JSONL:
        for letter_id, letter in chosen:
            print(dumps_line(listing_line(letter_id, letter)))
    elif shown == TABLE:
        table = Table(LIST_COLUMNS, wrap="reason")
        for letter_id, letter in chosen:
            line = listing_line(letter_id, letter)
            table.add(line["id"], line["time"], line["origin"], line["case_id"], line["reason"])
        table.print()
    print(located(f"{NAME} list: {counted(len(chosen), 'letter')}", store=named), file=sys.stderr)
    return OK


def run_show(args: argparse.Namespace, settings: Settings) -> int:
    with existing_store(args, settings) as store:
        named = where(store, args, settings)
        letter = store.letter(args.letter_id)
        if letter is None:
            raise unknown_letter(named, args.letter_id, "show")
    sys.stdout.write(letter.body + "\n")
    if letter.truncated:
        print(
            f"{NAME} show: letter {args.letter_id}'s body was kept cut to its first bytes "
            f"({len(letter.body.encode('utf-8', 'surrogatepass')):,} of {letter.body_bytes:,}"
            f" bytes, SHA-256 {letter.body_sha256})",
            file=sys.stderr,
        )
    print(located(f"{NAME} show: letter {args.letter_id}", store=named), file=sys.stderr)
    return OK


def run_replay(args: argparse.Namespace, settings: Settings) -> int:
    from worker.cli.dead_letters_replay import replay

    if args.reason is not None and not args.all:
        raise InputError(f"{NAME} replay: --reason goes with --all")
    if not args.all and not args.letter_ids:
        raise InputError(f"{NAME} replay: give letter ids (see `{NAME} list`) or --all")
    if args.wait < 0:
        raise InputError(f"{NAME} replay: --wait must be 0 or more seconds, got {args.wait:g}")
    settings = with_broker(args, settings)
    with existing_store(args, settings) as store:
        letter_ids = _chosen(store, args, settings)
    return replay(letter_ids, args, settings)


def _chosen(store: ResultStore, args: argparse.Namespace, settings: Settings) -> list[str]:
    """The ids asked for (oldest first with --all); an unknown id stops the run before it
    touches anything."""
    from worker.audit.letters import select

    if args.all:
        chosen = select(store.letters_newest_first(), reason=args.reason)
        return [letter_id for letter_id, _ in chosen]
    for letter_id in args.letter_ids:
        if store.letter(letter_id) is None:
            raise unknown_letter(where(store, args, settings), letter_id, "replay")
    return list(dict.fromkeys(args.letter_ids))


def run_purge(args: argparse.Namespace, settings: Settings) -> int:
    from worker.audit.letters import received_before

    with existing_store(args, settings, read_only=False) as store:
        letter_ids = list(received_before(store.letters_newest_first(), args.before))
        when = args.before.isoformat()
        if not args.yes:
            raise InputError(
                f"{NAME} purge: would remove {counted(len(letter_ids), 'letter')} received before "
                f"{when}; add --yes to remove {'it' if len(letter_ids) == 1 else 'them'}"
            )
        removed = store.remove_letters(letter_ids)
        named = where(store, args, settings)
    removed_said = counted(removed, "letter")
    said = f"{NAME} purge: removed {removed_said} received before {when}"
    print(located(said, store=named), file=sys.stderr)
    return OK


def where(store: ResultStore, args: argparse.Namespace, settings: Settings) -> str:
    """How messages name the store: its URL without the password."""
    from worker.stores import describe as describe_store

    return describe_store(store, store_url(args, settings))


def unknown_letter(where: str, letter_id: str, action: str) -> InputError:
    return InputError(
        f"{NAME} {action}: no dead letter {letter_id!r} in {where} (`{NAME} list` shows the ids)"
    )
