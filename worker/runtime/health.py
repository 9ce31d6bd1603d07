"""The heartbeat file: the worker's consumer touches it while it consumes
(worker/runtime/heartbeat.py),
and `evidence-worker health` judges its age, for Docker's HEALTHCHECK and Kubernetes' probes.

Standard library only, and it reads its one setting, EVIDENCE_HEARTBEAT_FILE, from the
environment itself rather than through Settings: a probe runs this every few seconds, and
importing pydantic for Settings would cost many times what the check itself does. Settings
declares the same variable with the same rules (tests/unit/test_health.py holds the two to
agreement).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from worker.constants import EMPTY_FILE_PROBLEM, HEARTBEAT_FILE_ENV
from worker.usage_errors import HelpfulParser

PROG = "evidence-worker health"
DEFAULT_MAX_AGE_SECONDS = 60.0
HEALTHY = 0
UNHEALTHY = 1
CONFIGURATION_ERROR = 2  # as every command's (SPEC §7)
NOT_CONFIGURED_PROBLEM = (
    f"{HEARTBEAT_FILE_ENV} is not set, so the worker writes no heartbeat to check: "
    "set it for the worker and for this check alike (the image sets it), or pass --file"
)
SUMMARY = "check that this container's worker is consuming, from its heartbeat file's age"
DETAILS = (
    "Exit 0 when the worker's consumer touched EVIDENCE_HEARTBEAT_FILE less than --max-age "
    "seconds ago, 1 with one line saying why when it did not (not yet consuming, or stopped: "
    "a broker that does not answer, an event loop that is stuck), 2 when there is no file to "
    "check. Made for Docker's HEALTHCHECK and Kubernetes' probes: it imports nothing but the "
    "standard library and reads one file's modification time."
)
EXAMPLE = "health --max-age 30"


class HealthConfigurationError(Exception):
    """Raised when EVIDENCE_HEARTBEAT_FILE is empty: there is no heartbeat file to check."""


@dataclass(frozen=True)
class Verdict:
    """The check's outcome: healthy or not, and the one line that says so."""

    healthy: bool
    line: str


def heartbeat_file(environ: Mapping[str, str]) -> Path | None:
    """EVIDENCE_HEARTBEAT_FILE as Settings reads it: None when unset, an error when empty
    (Path("") would be the working directory, which always exists)."""
    value = environ.get(HEARTBEAT_FILE_ENV)
    if value is None:
        return None
    if value == "":
        raise HealthConfigurationError(f"{HEARTBEAT_FILE_ENV}: {EMPTY_FILE_PROBLEM}")
    return Path(value)


def judge(path: Path, touched_at: float | None, now: float, max_age: float) -> Verdict:
    """The verdict on a heartbeat last touched at `touched_at` (None: no file), at `now`."""
    if touched_at is None:
        return Verdict(
            False,
            f"unhealthy: no heartbeat at {path}: the worker has not started consuming",
        )
    # A modification time ahead of the clock (the clock was set back) counts as now.
    age = max(now - touched_at, 0.0)
    if age > max_age:
        return Verdict(
            False,
            f"unhealthy: last heartbeat {age:.1f} s ago at {path}, over the {max_age:g} s "
            "allowed: the worker's consumer has stopped consuming",
        )
    return Verdict(True, f"healthy: last heartbeat {age:.1f} s ago at {path}")


def check(path: Path, max_age: float, clock: Callable[[], float] = time.time) -> Verdict:
    """Judge the heartbeat file at `path` by its modification time."""
    try:
        touched_at: float | None = path.stat().st_mtime
    except FileNotFoundError:
        touched_at = None
    except OSError as error:
        return Verdict(False, f"unhealthy: cannot read heartbeat {path}: {error.strerror}")
    return judge(path, touched_at, clock(), max_age)


def touch(path: Path) -> None:
    """Create the file or set its modification time to now: the heartbeat itself."""
    path.touch()


def forget(path: Path) -> None:
    """Remove a heartbeat left by an earlier run (a restarted container keeps its /tmp in
    Kubernetes), so that a new worker is not taken for healthy before it consumes."""
    path.unlink(missing_ok=True)


def directory_problem(path: Path) -> str | None:
    """Why the worker could not write its heartbeat at `path` (None when it can)."""
    directory = path.parent
    if not directory.is_dir():
        return f"{HEARTBEAT_FILE_ENV}: directory {directory} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{HEARTBEAT_FILE_ENV}: directory {directory} is not writable by this user"
    return None


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:  # NaN included
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def file_path(text: str) -> Path:
    """argparse type: a path that is not empty (Path("") is the working directory, whose
    modification time would pass for a heartbeat)."""
    if not text:
        raise argparse.ArgumentTypeError("empty: name the heartbeat file")
    return Path(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's options, the same under `evidence-worker` and on its light path."""
    parser.add_argument(
        "--max-age",
        metavar="SECONDS",
        type=positive_seconds,
        default=DEFAULT_MAX_AGE_SECONDS,
        help="the oldest heartbeat that counts as healthy (default: %(default)g)",
    )
    parser.add_argument(
        "--file",
        metavar="PATH",
        type=file_path,
        default=None,
        help=f"the heartbeat file (default: ${HEARTBEAT_FILE_ENV})",
    )


def report(path: Path | None, max_age: float) -> int:
    """Check `path`, print the verdict's line (stdout when healthy, stderr when not) and
    return the exit code."""
    if path is None:
        return configuration_error(NOT_CONFIGURED_PROBLEM)
    verdict = check(path, max_age)
    if verdict.healthy:
        print(verdict.line)
        return HEALTHY
    print(f"evidence-worker: {verdict.line}", file=sys.stderr)
    return UNHEALTHY


def configuration_error(problem: str) -> int:
    print(f"evidence-worker: configuration error: {problem}", file=sys.stderr)
    return CONFIGURATION_ERROR


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> int:
    """`evidence-worker health` without the rest of the command line (worker/entrypoint.py)."""
    parser = HelpfulParser(
        prog=PROG,
        description=f"{DETAILS}\n\nexample:\n  evidence-worker {EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        path = args.file or heartbeat_file(environ)
    except HealthConfigurationError as error:
        return configuration_error(str(error))
    return report(path, args.max_age)
