"""The command line's conventions: a subcommand's help text (describe), the argparse types
every command checks its values with, and the options several commands share (path, store,
broker)."""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from worker.errors import ConfigurationError
from worker.settings import display_path

if TYPE_CHECKING:
    from worker.settings import Settings

PROG = "evidence-worker"
T = TypeVar("T")


def describe(summary: str, *, example: str, details: str = "") -> dict[str, Any]:
    """A subcommand's help text: what it does, then an example, defaults shown per option."""
    return {
        "help": summary,
        "description": f"{textwrap.fill(details or summary, 78)}\n\nexample:\n  {PROG} {example}",
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def rate(text: str) -> float:
    """argparse type: a finite number in 0.0..1.0 (a share of messages, a rate)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number: give one in 0.0..1.0"
        ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number: give one in 0.0..1.0")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 0.0..1.0")
    return value


def nonempty(convert: Callable[[str], T], what: str) -> Callable[[str], T]:
    """argparse type: `convert` of a value that is not empty, else a usage error saying
    `what` to give. Empty would not be caught later: Path("") is the working directory,
    and an empty URL reads as "not set", the default."""

    def check(text: str) -> T:
        if not text:
            raise argparse.ArgumentTypeError(f"empty value: {what}")
        return convert(text)

    return check


STORE_URL = nonempty(str, "use sqlite:///path/to.db or redis://host:port/db")


def utf8_text(what: str) -> Callable[[str], str]:
    """argparse type: text that is UTF-8, as every ID a store keeps is. Bytes that are not
    reach Python as lone surrogates, which no store can look up (SQLite and Redis would raise
    as they encode them): a usage error naming them, as \\xff, instead."""

    def check(text: str) -> str:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise argparse.ArgumentTypeError(
                f"'{display_path(text)}' is not UTF-8 text: {what} are UTF-8"
            ) from None
        return text

    return check


CASE_ID = utf8_text("case IDs")


def add_path(parser: argparse.ArgumentParser, what: str = "JSON-lines file") -> None:
    parser.add_argument(
        "path",
        metavar="PATH",
        type=nonempty(str, "name a file, or - for stdin"),
        help=f"{what}, or - for stdin",
    )


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        type=STORE_URL,
        help="sqlite:///file or redis://host:port/db "
        "(default: $EVIDENCE_STORE_URL, else sqlite:///evidence-coverage.sqlite3)",
    )


def add_broker_option(parser: argparse.ArgumentParser, what: str) -> None:
    """--broker, for a command that sends to the workers' queue."""
    parser.add_argument(
        "--broker",
        metavar="URL",
        type=nonempty(str, "use redis://host:port/db or amqp://user:password@host:port/vhost"),
        help=f"{what} (default: $EVIDENCE_BROKER_URL, else redis://localhost:6379/0)",
    )


def with_broker(args: argparse.Namespace, settings: Settings) -> Settings:
    """`settings` with --broker as the broker, when given: checked as EVIDENCE_BROKER_URL is,
    and the workers' store defaults to its Redis as it does to EVIDENCE_BROKER_URL's."""
    from worker.settings import check_broker_url

    broker = getattr(args, "broker", None)
    if broker is None:
        return settings
    try:
        check_broker_url(broker)
    except ValueError as error:
        raise ConfigurationError(f"--broker: {error}") from None
    return settings.model_copy(update={"broker_url": broker})


def add_worker_store_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        type=STORE_URL,
        help=f"{what}: the workers' store (default: $EVIDENCE_STORE_URL, else the broker's "
        "Redis, as the worker)",
    )
