"""What the commands share: the parser's conventions, policy and store options, the tally."""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from worker.cli.exit_codes import INVALID, NONDETERMINISM, OK, POLICY_FAILURE
from worker.errors import ConfigurationError
from worker.human_counts import counted
from worker.settings import display_path

if TYPE_CHECKING:
    from contracts import Policy
    from worker.settings import Settings
    from worker.stores import ResultStore

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


def add_policy_options(parser: argparse.ArgumentParser) -> None:
    """--policy or --min-coverage: one of them at most (choosing silently would hide a typo)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--policy",
        metavar="FILE",
        type=nonempty(Path, "name a policy TOML file"),
        help="policy TOML file (default: $EVIDENCE_POLICY_FILE)",
    )
    group.add_argument(
        "--min-coverage",
        metavar="X",
        help="one-group policy with this threshold, versioned cli:X "
        "(default: $MIN_EVIDENCE_COVERAGE, versioned env:X)",
    )


def add_baseline_policy_option(parser: argparse.ArgumentParser) -> None:
    """--baseline-policy, for `gate` and `explain`: the release rule is named alike by both."""
    parser.add_argument(
        "--baseline-policy",
        metavar="OLD.toml",
        type=nonempty(Path, "name the baseline policy TOML file"),
        help="also decide under this policy (e.g. the released one): a row that fails now "
        "and passed under it is owned by release-rule; never changes the exit code "
        "(default: no baseline)",
    )


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        type=STORE_URL,
        help="sqlite:///file or redis://host:port/db "
        "(default: $EVIDENCE_STORE_URL, else sqlite:///evidence-coverage.sqlite3)",
    )


def resolve_policy(
    args: argparse.Namespace, settings: Settings, *, required: bool
) -> Policy | None:
    """--policy, else --min-coverage, else the environment; gate requires one.

    A policy file whose observation window ([observe], SPEC §12) has ended prints one WARNING
    line on stderr naming the file to remove (window_warning())."""
    from contracts import policy_from_threshold
    from worker.settings import read_policy_file, window_warning

    policy: Policy | None
    if args.policy is not None:
        policy, path = read_policy_file(args.policy), args.policy
    elif args.min_coverage is not None:
        return policy_from_threshold(args.min_coverage, name="--min-coverage", origin="cli")
    else:
        policy, path = settings.load_policy(required=required), settings.policy_file
    warning = window_warning(policy, path, utc_today())
    if warning is not None:
        print(warning, file=sys.stderr)
    return policy


def utc_today() -> date:
    """Today's UTC date, the CLI's clock for a policy's observation window (tests replace it)."""
    return datetime.now(UTC).date()


def previous_rule_today(policy: Policy | None) -> Policy | None:
    """The previous rule of the policy's observation window when it is open today (UTC)."""
    from contracts.policy import previous_rule

    return previous_rule(policy, utc_today())


def store_url(args: argparse.Namespace, settings: Settings) -> str:
    """--store, else EVIDENCE_STORE_URL, else the embedded SQLite file."""
    return str(args.store or settings.embedded_store_url())


@contextmanager
def existing_store(
    args: argparse.Namespace, settings: Settings, *, read_only: bool = True
) -> Iterator[ResultStore]:
    """The store a command looks in, closed afterwards: opened for reading only unless the
    command writes to it; a SQLite file that is not there is an error, not a new empty
    store that would report "nothing recorded"."""
    from worker.stores import SQLITE_PREFIX

    url = store_url(args, settings)
    path = Path(url.removeprefix(SQLITE_PREFIX))
    if url.startswith(SQLITE_PREFIX) and url != SQLITE_PREFIX and not path.exists():
        raise ConfigurationError(
            f"no store at {display_path(path)}: nothing has been recorded there (pass --store "
            "or set EVIDENCE_STORE_URL to the store `score` or the worker wrote to)"
        )
    with opened_store(url, settings, read_only=read_only) as store:
        yield store


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


def store_name(store: ResultStore, args: argparse.Namespace, settings: Settings) -> str:
    """How a summary line names the store a command opened: its URL, password masked (a Redis
    Cluster's kind and size after it)."""
    from worker.stores import describe as describe_store

    return describe_store(store, store_url(args, settings))


def add_worker_store_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        type=STORE_URL,
        help=f"{what}: the workers' store (default: $EVIDENCE_STORE_URL, else the broker's "
        "Redis, as the worker)",
    )


@contextmanager
def opened_store(url: str, settings: Settings, *, read_only: bool = False) -> Iterator[ResultStore]:
    """The store at `url`, its errors said in one line (store_errors), closed afterwards."""
    from worker.stores import open_store

    with store_errors(url):
        store = open_store(url, settings, read_only=read_only)
        try:
            yield store
        finally:
            store.close()


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """What a store's client library raises while it is used, when the user can fix it (a
    read-only file, a full disk, a Redis server refusing writes), as one line that names
    the store."""
    try:
        yield
    except Exception as error:
        # A library that was never imported cannot have raised: look, do not import.
        sqlite3 = sys.modules.get("sqlite3")
        redis = sys.modules.get("redis.exceptions")
        message = None
        if sqlite3 is not None and isinstance(error, sqlite3.DatabaseError):
            message = _sqlite_problem(error, url, sqlite3)
        elif redis is not None:
            message = _redis_problem(error, url, redis)
        if message is None:
            raise
        raise ConfigurationError(message) from None


def _sqlite_problem(error: Exception, url: str, sqlite3: Any) -> str | None:
    """By SQLite's primary result code: what the user fixes outside the program (any other
    code is a bug, which keeps its traceback)."""
    from worker.stores import SQLITE_PREFIX

    code = getattr(error, "sqlite_errorcode", -1) & 0xFF
    path = display_path(url.removeprefix(SQLITE_PREFIX))
    if code in {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN}:
        return (
            f"cannot write to SQLite store {path}: {error} (make the file and its directory "
            "writable, or pass another --store)"
        )
    elsewhere = {
        sqlite3.SQLITE_BUSY,  # another process held the lock past the busy timeout
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
    }
    return f"SQLite store {path}: {error}" if code in elsewhere else None


def _redis_problem(error: Exception, url: str, redis: Any) -> str | None:
    """A refused write (a replica, an ACL, maxmemory); the store itself names a refused login
    or a database the server does not have."""
    from worker.settings import masked_url

    if isinstance(error, redis.ReadOnlyError | redis.NoPermissionError | redis.OutOfMemoryError):
        return f"store {masked_url(url)}: Redis refused to write: {error}"
    return None


def source_name(path: str) -> str:
    """How messages name an input: '-' reads as stdin."""
    return "stdin" if path == "-" else display_path(path)


def dumps_line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class Tally:
    """Counts for the summary line, and the exit code they imply (the highest applies)."""

    statuses: Counter[str] = field(default_factory=Counter)
    cache: Counter[str] = field(default_factory=Counter)
    rejected: int = 0
    alerts: int = 0
    drift_alerts: int = 0
    drifted: int = 0  # rows with contract_drift, alerted now or before
    gating_failures: int = 0
    gating_invalid: int = 0
    # Blocking rows in a group's review band (SPEC §12): not failures of the row, yet a person
    # must decide them before a release, so they gate as a failure does (exit 1).
    gating_review: int = 0
    # An open observation window's previous policy version, when records carried one, and how
    # many records' status differed from their previous_status.
    previous_version: str | None = None
    previous_changed: int = 0
    alerts_drift: bool = True  # False for `gate`: it sees drift in its input, alerts nothing

    def add(self, status: str, *, blocking: bool | None, cache: str | None = None) -> None:
        self.statuses[status] += 1
        if cache:
            self.cache[cache] += 1
        gates = blocking is not False  # unknown (unparsable row) counts as blocking
        self.gating_invalid += status == "invalid" and gates
        self.gating_failures += status == "fail" and gates
        if status == "review" and gates:  # rare: no attribute write on every row
            self.gating_review += 1

    @property
    def total(self) -> int:
        return sum(self.statuses.values())

    @property
    def exit_code(self) -> int:
        # A known conflict is raised once, yet a run that meets it again still met it.
        if self.alerts or self.cache["conflict"]:
            return NONDETERMINISM
        if self.gating_invalid or self.drifted:
            return INVALID
        return POLICY_FAILURE if self.gating_failures or self.gating_review else OK

    def summary(self, label: str, policy: Policy | None, *, notes: Sequence[str] = ()) -> str:
        statuses = ", ".join(f"{name} {n:,}" for name, n in sorted(self.statuses.items()))
        parts = [f"{label}: {counted(self.total, 'row')}: {statuses or 'none'}"]
        if self.rejected:
            parts.append(f"{self.rejected:,} rejected before scoring")
        if self.cache:
            parts.append("cache " + ", ".join(f"{k} {v:,}" for k, v in sorted(self.cache.items())))
        if self.alerts:
            parts.append(counted(self.alerts, "nondeterminism alert"))
        if self.drifted:
            alerted = f" ({counted(self.drift_alerts, 'new alert')})" if self.alerts_drift else ""
            parts.append(f"{counted(self.drifted, 'row')} with contract drift{alerted}")
        if self.gating_review:
            parts.append(
                f"{counted(self.gating_review, 'blocking row')} to review (within a review_band:"
                " a person decides; evidence-worker calibrate)"
            )
        parts.append(f"policy {policy.version}" if policy else "report-only (no policy)")
        if self.previous_version is not None:
            parts.append(
                f"{counted(self.previous_changed, 'row')} changed status against previous"
                f" policy {self.previous_version} (observation window)"
            )
        parts += notes
        parts.append(f"exit {self.exit_code}")
        return "; ".join(parts)
