"""What the commands share: the parser's conventions, policy and store options, the tally."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from worker.cli.exit_codes import INVALID, NONDETERMINISM, OK, POLICY_FAILURE
from worker.errors import ConfigurationError

if TYPE_CHECKING:
    from contracts import Policy
    from worker.settings import Settings
    from worker.stores import ResultStore

PROG = "evidence-worker"


class HelpfulParser(argparse.ArgumentParser):
    """A usage error prints the full help to stderr and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.print_help(sys.stderr)
        self.exit(INVALID, f"{self.prog}: error: {message}\n")


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


def add_path(parser: argparse.ArgumentParser, what: str = "JSON-lines file") -> None:
    parser.add_argument("path", metavar="PATH", help=f"{what}, or - for stdin")


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """--policy or --min-coverage: one of them at most (choosing silently would hide a typo)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--policy",
        metavar="FILE",
        type=Path,
        help="policy TOML file (default: $EVIDENCE_POLICY_FILE)",
    )
    group.add_argument(
        "--min-coverage",
        metavar="X",
        help="one-group policy with this threshold, versioned cli:X "
        "(default: $MIN_EVIDENCE_COVERAGE, versioned env:X)",
    )


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help="sqlite:///file or redis://host:port/db "
        "(default: $EVIDENCE_STORE_URL, else sqlite:///evidence-coverage.sqlite3)",
    )


def resolve_policy(
    args: argparse.Namespace, settings: Settings, *, required: bool
) -> Policy | None:
    """--policy, else --min-coverage, else the environment; gate requires one."""
    from contracts import policy_from_threshold

    if args.policy is not None:
        return read_policy_file(args.policy)
    if args.min_coverage is not None:
        return policy_from_threshold(args.min_coverage, name="--min-coverage", origin="cli")
    return settings.load_policy(required=required)


def read_policy_file(path: Path) -> Policy:
    """A policy file as text, or a ConfigurationError that names the file and the problem."""
    from contracts import parse_policy

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigurationError(f"cannot read policy file {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigurationError(
            f"policy file {path} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    return parse_policy(text, source=f"policy file {path}")


def store_url(args: argparse.Namespace, settings: Settings) -> str:
    """--store, else EVIDENCE_STORE_URL, else the embedded SQLite file."""
    return str(args.store or settings.embedded_store_url())


def open_existing_store(args: argparse.Namespace, settings: Settings) -> ResultStore:
    """The store a reading command looks in; a SQLite file that is not there is an error,
    not a new empty store that would report "nothing recorded"."""
    from worker.stores import SQLITE_PREFIX, open_store

    url = store_url(args, settings)
    path = Path(url.removeprefix(SQLITE_PREFIX))
    if url.startswith(SQLITE_PREFIX) and url != SQLITE_PREFIX and not path.exists():
        raise ConfigurationError(
            f"no store at {path}: nothing has been recorded there (pass --store or set "
            "EVIDENCE_STORE_URL to the store `score` or the worker wrote to)"
        )
    return open_store(url, settings)


def source_name(path: str) -> str:
    """How messages name an input: '-' reads as stdin."""
    return "stdin" if path == "-" else path


def dumps_line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Tally:
    """Counts for the summary line, and the exit code they imply (the highest applies)."""

    statuses: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    rejected: int = 0
    alerts: int = 0
    gating_failures: int = 0
    gating_invalid: int = 0

    def add(self, status: str, *, blocking: bool | None, cache: str | None = None) -> None:
        self.statuses[status] += 1
        if cache:
            self.cache[cache] += 1
        gates = blocking is not False  # unknown (unparsable row) counts as blocking
        self.gating_invalid += status == "invalid" and gates
        self.gating_failures += status == "fail" and gates

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def exit_code(self) -> int:
        if self.alerts:
            return NONDETERMINISM
        if self.gating_invalid:
            return INVALID
        return POLICY_FAILURE if self.gating_failures else OK

    def summary(self, label: str, policy: Policy | None) -> str:
        statuses = ", ".join(f"{name} {n}" for name, n in sorted(self.statuses.items()))
        parts = [f"{label}: {self.total} rows: {statuses or 'none'}"]
        if self.rejected:
            parts.append(f"{self.rejected} rejected before scoring")
        if self.cache:
            parts.append("cache " + ", ".join(f"{k} {v}" for k, v in sorted(self.cache.items())))
        if self.alerts:
            parts.append(f"{self.alerts} nondeterminism alert{'s' * (self.alerts != 1)}")
        parts.append(f"policy {policy.version}" if policy else "report-only (no policy)")
        parts.append(f"exit {self.exit_code}")
        return "; ".join(parts)
