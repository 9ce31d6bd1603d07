"""`evidence-worker`: one module per command, each with `register(commands)` and `run(args,
settings) -> exit code`. Exit codes per SPEC §7 (exit_codes.py); every user error is one line
on stderr and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

from worker.cli import alerts, bench, canary, gate, publish, report, schema, score, show
from worker.cli.common import PROG, HelpfulParser
from worker.cli.exit_codes import INTERRUPTED, INVALID
from worker.errors import ConfigurationError, InputError, TransientError

if TYPE_CHECKING:
    from worker.settings import Settings

Handler = Callable[[argparse.Namespace, "Settings"], int]
MODULES = (score, gate, show, alerts, publish, bench, report, canary, schema)


def build_parser() -> argparse.ArgumentParser:
    parser = HelpfulParser(
        prog=PROG,
        description="Explainable evidence-coverage scores: score, gate, inspect.",
        epilog="Exit codes: 0 ok, 1 policy failures, 2 invalid input or rows (also "
        "configuration and usage errors), 3 nondeterminism detected; the highest applies. "
        f"130 when interrupted. Run '{PROG} COMMAND --help' for a command's options.",
    )
    parser.add_argument(
        "--version", action="version", version=f"{PROG} {version('evidence-coverage-worker')}"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=HelpfulParser)
    commands.required = True
    for module in MODULES:
        module.register(commands)
    return parser


# Each command's module is named after it.
COMMANDS: dict[str, Handler] = {
    module.__name__.rpartition(".")[2]: module.run for module in MODULES
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors print one line and exit 2, never a traceback."""
    args = build_parser().parse_args(argv)
    try:
        from worker.logging import configure_logging
        from worker.settings import load_settings

        settings = load_settings()
        configure_logging(settings.log_format, schema=settings.log_schema)
        handler: Handler = args.handler
        return handler(args, settings)
    except KeyboardInterrupt:
        return _fail("interrupted", INTERRUPTED)
    except BrokenPipeError:
        return _closed_pipe()
    except Exception as error:
        message = _user_error(error)
        if message is None:
            raise  # a bug: its traceback is what a report needs
        return _fail(message)


def _user_error(error: Exception) -> str | None:
    """The one line for an error the user can fix; None for anything else."""
    from contracts import PolicyError

    if isinstance(error, ConfigurationError | PolicyError):
        return f"configuration error: {error}"
    if isinstance(error, InputError):
        return str(error)
    if isinstance(error, TransientError):
        return f"store unavailable: {error}"
    from kombu.exceptions import OperationalError

    if isinstance(error, OperationalError):
        return f"broker unreachable ({error}); check EVIDENCE_BROKER_URL"
    return None


def _fail(message: str, code: int = INVALID) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def _closed_pipe() -> int:
    """The reader went away (`| head`): stop quietly, and keep Python from complaining when
    it flushes stdout at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def run() -> Any:  # pragma: no cover - console-script shim
    sys.exit(main())
