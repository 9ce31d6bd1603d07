"""`evidence-worker`: one module per command, each with `register(commands)` and `run(args,
settings) -> exit code`. Exit codes per SPEC §7 (exit_codes.py); every user error is one line
on stderr and exit 2, never a traceback. What the commands share is in modules named for what
they hold: arguments, policy_options, store_access, run_summary, inputs, progress, output."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from worker.cli import (
    alerts,
    bench,
    calibrate,
    canary,
    compare,
    completion,
    dead_letters,
    explain,
    gate,
    health,
    prune,
    publish,
    reconcile,
    records,
    report,
    schema,
    score,
    show,
    stability,
)
from worker.cli.arguments import PROG
from worker.cli.exit_codes import CLOSED_PIPE, INTERRUPTED, INVALID
from worker.errors import ConfigurationError, InputError, StoreBusy, TransientError
from worker.usage_errors import HelpfulParser

if TYPE_CHECKING:
    from worker.settings import Settings

Handler = Callable[[argparse.Namespace, "Settings"], int]
MODULES = (
    score,
    gate,
    compare,
    calibrate,
    show,
    explain,
    alerts,
    dead_letters,
    publish,
    reconcile,
    bench,
    records,
    report,
    stability,
    canary,
    prune,
    schema,
    health,
    completion,
)


def build_parser() -> argparse.ArgumentParser:
    parser = HelpfulParser(
        prog=PROG,
        description="Explainable evidence-coverage scores: score, gate, inspect.",
        epilog="Exit codes: 0 ok, 1 policy failures, 2 invalid input or rows (also "
        "configuration and usage errors), 3 nondeterminism detected (reconcile: messages "
        "never recorded); the highest applies. "
        f"130 when interrupted, 141 when the reader of the output goes away (| head). "
        f"Run '{PROG} COMMAND --help' for a command's options.",
    )
    parser.add_argument(
        "--version",
        action=Versions,
        help="show the worker's, the metric's and Ragas's versions and exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=HelpfulParser)
    commands.required = True
    for module in MODULES:
        module.register(commands)
    for command in commands.choices.values():
        # An unrecognized option is the root parser's error in argparse; _dispatch reports
        # it as the command's, whose --help lists the options.
        # completion writes its script from the whole parser.
        command.set_defaults(command_parser=command, root_parser=parser)
    return parser


class Versions(argparse.Action):
    """--version: the worker, the metric and the Ragas it scores with, the three versions a
    record carries; looked up when asked for, so that no other command pays the import."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from contracts import METRIC_VERSION, RAGAS_VERSION

        worker = version("evidence-coverage-worker")
        print(f"{PROG} {worker} (metric {METRIC_VERSION}, ragas {RAGAS_VERSION})")
        parser.exit()


# Each command's module is named after it, "_" for "-" (dead_letters: dead-letters).
COMMANDS: dict[str, Handler] = {
    module.__name__.rpartition(".")[2].replace("_", "-"): module.run for module in MODULES
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors print one line and exit 2, never a traceback."""
    if (closed := _hold_closed_standard_streams()) is not None:
        return closed
    _escape_lone_surrogates(sys.stdout)
    try:
        try:
            return _dispatch(argv)
        finally:
            # Flushed here rather than at exit, where a reader that went away (`| head`) or
            # a full disk could no longer be caught: Python would print "Exception ignored".
            sys.stdout.flush()
    except BrokenPipeError:
        return _closed_pipe()
    except OSError as error:
        if error.errno not in OUTPUT_ERRNOS:
            raise
        _discard(1)
        return _fail(f"cannot write output: {error.strerror}")


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        # No command: the list of them, as `git` does, on stderr with the usage error's code.
        parser.print_help(sys.stderr)
        return INVALID
    args, unrecognized = parser.parse_known_args(argv)
    if unrecognized:
        getattr(args, "command_parser", parser).error(
            f"unrecognized arguments: {' '.join(unrecognized)}"
        )
    try:
        from worker.observability.logging import configure_logging
        from worker.settings import load_settings

        settings = load_settings()
        configure_logging(settings.log_format, schema=settings.log_schema)
        handler: Handler = args.handler
        return handler(args, settings)
    except KeyboardInterrupt:
        return _fail("interrupted", INTERRUPTED)
    except Exception as error:
        message = _user_error(error)
        if message is None:
            raise  # a bug: its traceback is what a report needs
        return _fail(message)


# What writing our output can fail with that the user fixes: a full disk or quota, a file
# over its size limit, a device error (`> /dev/full` gives the first).
OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


def _user_error(error: Exception) -> str | None:
    """The one line for an error the user can fix; None for anything else."""
    from contracts import PolicyError

    if isinstance(error, ConfigurationError | PolicyError):
        return f"configuration error: {error}"
    if isinstance(error, InputError):
        return str(error)
    if isinstance(error, StoreBusy):  # the URL is right: the store cannot take writes yet
        return f"store unavailable: {str(error).rstrip('.')}; run again once it takes writes"
    if isinstance(error, TransientError):
        return f"store unavailable: {str(error).rstrip('.')}; check --store or EVIDENCE_STORE_URL"
    # kombu raises it only once imported: look, do not import.
    kombu = sys.modules.get("kombu.exceptions")
    if kombu is not None and isinstance(error, kombu.OperationalError):
        return f"broker unreachable ({error}); check EVIDENCE_BROKER_URL"
    return None  # a closed pipe or a full disk included: main() says those


def _fail(message: str, code: int = INVALID) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


LOSSY_ERRORS = {"strict", "surrogateescape"}


def _escape_lone_surrogates(stream: Any) -> None:
    """Print a lone surrogate (a legal JSON escape a store may keep in a case ID or a letter,
    and what bytes that are not UTF-8 become) as its escape, \\ud800, as stderr already does:
    inside a JSON string that is the same JSON escape again, and one such row no longer stops
    the listing with a UnicodeEncodeError. Text that is UTF-8 is written as before. (In the C
    locale Python writes stdout with surrogateescape, which fails on \\ud800 and would write
    \\udcff as a raw byte, not UTF-8.)"""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and getattr(stream, "errors", None) in LOSSY_ERRORS:
        reconfigure(errors="backslashreplace")


def _closed_pipe() -> int:
    """The reader went away (`| head`): stop quietly, with the status a shell reports for a
    writer SIGPIPE stopped, so `set -o pipefail` still sees that the run did not finish."""
    _discard(1, 2)  # either may be the pipe (`2>&1 | head`)
    return CLOSED_PIPE


def _discard(*fds: int) -> None:
    """Point these descriptors at /dev/null, so that what is still buffered for them cannot
    fail again when Python flushes them at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in fds:
        os.dup2(devnull, fd)
    os.close(devnull)


def _hold_closed_standard_streams() -> int | None:
    """Started with stdin, stdout or stderr closed (`>&-`): hold each of those descriptors
    on /dev/null, so the next file opened (the SQLite store, say) cannot take its number and
    receive stray writes. A closed stdin is refused by the command that would read it, a
    closed stdout here: its exit code, else None."""
    streams = {0: sys.stdin, 1: sys.stdout, 2: sys.stderr}
    for fd, stream in streams.items():
        if stream is None:
            held = os.open(os.devnull, os.O_RDWR)
            if held != fd:
                os.dup2(held, fd)
                os.close(held)
    if sys.stderr is None:
        # print(file=None) would write to stdout: mix nothing into the records.
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
        return _fail("cannot write output: stdout is closed; redirect it to a file or /dev/null")
    return None


def run() -> Any:  # pragma: no cover - console-script shim
    sys.exit(main())
