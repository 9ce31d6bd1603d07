"""The bad-input harness shared by the unit and integration command-line tests: a case is a
command line with the exit code and the one stderr line it must give, run in a directory of its
own holding the bad files it names: in-process through the CLI's entry function (main), or as
`python -m worker.cli` when what it checks needs a process (see `needs_a_process`)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from worker.cli import main
from worker.cli.exit_codes import INVALID
from worker.stores.sqlite.sqlite_store import SQLiteStore

PROG = "evidence-worker"
ROWS = str(EXAMPLES / "release-rows.jsonl")
RESULTS = str(EXAMPLES / "attribution-results.jsonl")
HASH = "0" * 64
CONFIG = f"{PROG}: configuration error: "
REDIS_HINT = "use redis://host:port/db, db a database number the server has (0-15 by default)"
# How long one CLI run may take before it counts as hung: a guard, not a measure. A loaded
# 2-core machine took 27 s to start `canary` (it imports the scorer), past the 30 s this was.
HANG_SECONDS = 100
LEDGER_DB = "sqlite:///ledger.sqlite3"  # a publish ledger that is there, in the run's directory
# Root reads and writes through permission bits: a case that needs them to hold runs without
# the capabilities that let it (setpriv, from util-linux).
UNPRIVILEGED = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def make_files(directory: Path) -> None:
    """The bad (and a few good) files the cases name, in the case's working directory."""
    (directory / "binary.toml").write_bytes(b"min_coverage = 0.8\xff\xfe\n")
    (directory / "latin1.toml").write_bytes(b"# caf\xe9\nversion = '1'\n")
    (directory / "binary.dat").write_bytes(bytes(range(11, 256)) * 4)  # one line: no \n
    (directory / "not-a-db.txt").write_text("just text, not SQLite\n")
    (directory / "a-file").write_text("")
    unreadable = directory / "unreadable.jsonl"
    shutil.copy(ROWS, unreadable)
    unreadable.chmod(0o000)
    SQLiteStore(directory / "empty.db").close()
    SQLiteStore(directory / "readonly.db").close()
    (directory / "readonly.db").chmod(0o444)
    (directory / "readonly-dir").mkdir(mode=0o555)


@dataclass(frozen=True)
class Case:
    """A command line, what it is run with, and the exit code and stderr line it must give."""

    args: Sequence[str]
    line: str  # the one stderr line; for usage errors, the `error:` line before the hint
    code: int = INVALID
    env: Mapping[str, str] = field(default_factory=dict)
    usage: bool = False
    unprivileged: bool = False
    stdout: str = "pipe"  # or "full" (/dev/full) or "closed"
    stdin: str = "null"  # or "closed"


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a user who set nothing: no EVIDENCE_*, buffered stdout."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("EVIDENCE_")
        and name not in {"MIN_EVIDENCE_COVERAGE", "PYTHONUNBUFFERED"}
    }
    return env | dict(extra)


def command_prefix(unprivileged: bool) -> list[str]:
    """What runs before the command: as root, for a case that needs permission bits to hold,
    setpriv without the capabilities that override them."""
    if not unprivileged or os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.fail("as root, permission cases need setpriv (util-linux) to drop the override")
    return UNPRIVILEGED


@dataclass(frozen=True)
class Ran:
    """What one CLI run gave: its exit code and what it wrote, decoded."""

    code: int
    stdout: str
    stderr: str


def run_in_process(
    args: Sequence[str],
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
) -> Ran:
    """main(args) as `python -m worker.cli ARGS` runs it on pipes, in `cwd`, in the
    environment of a user who set nothing but `env`: stdout UTF-8 with strict errors and
    stderr with backslashreplace, as Python opens them in a UTF-8 locale. An exception main()
    lets out is raised (it would be a traceback); argparse's exit (a usage error, --help) is
    the exit code. Environment, directory and standard streams are restored after."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
    source = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        _stdin(source),
        _environment(env or {}),
        contextlib.chdir(cwd or Path.cwd()),
    ):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse: a usage error (2) or --help (0)
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
        out.flush()
        err.flush()
    return Ran(
        code,
        out.buffer.getvalue().decode(),
        err.buffer.getvalue().decode("utf-8", "replace"),
    )


@contextlib.contextmanager
def _stdin(stream: io.TextIOWrapper) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = stream
    try:
        yield
    finally:
        sys.stdin = saved


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """clean_env(extra) as os.environ for the block, the test's own environment after."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(clean_env(extra))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def needs_a_process(case: Case) -> bool:
    """A case whose behaviour lives in the process: permission bits that hold only without
    root's capabilities, a standard stream closed or on a full disk (what main() does then
    is on the file descriptors, and the interpreter's exit flush is part of it)."""
    return case.unprivileged or case.stdout != "pipe" or case.stdin != "null"


def closing(*fds: int) -> Callable[[], None]:
    """A preexec_fn that starts the child with these descriptors closed (`<&-`, `>&-`)."""

    def close() -> None:
        for fd in fds:
            os.close(fd)

    return close


def check(case: Case, directory: Path) -> None:
    """Run the case in `directory`: its exit code, its one exact stderr line (and the line
    naming --help, for usage errors), and no traceback anywhere."""
    make_files(directory)
    ran = (
        run_process(case, directory)
        if needs_a_process(case)
        else run_in_process(case.args, directory, case.env)
    )
    lines = ran.stderr.splitlines()

    assert "Traceback" not in ran.stdout + ran.stderr
    assert ran.code == case.code, ran.stderr
    if case.usage:
        prog = case.line.partition(": error: ")[0]
        assert lines == [case.line, f"run '{prog} --help' for the options"]
    else:
        assert lines == [case.line]


def run_process(case: Case, directory: Path) -> Ran:
    """The case as `python -m worker.cli` in `directory`, its streams as the case says."""
    closed = [fd for fd, how in ((0, case.stdin), (1, case.stdout)) if how == "closed"]
    with open(os.devnull if case.stdout != "full" else "/dev/full", "wb") as sink:
        run = subprocess.run(
            [*command_prefix(case.unprivileged), sys.executable, "-m", "worker.cli", *case.args],
            cwd=directory,
            env=clean_env(case.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if case.stdout == "pipe" else sink,
            stderr=subprocess.PIPE,
            preexec_fn=closing(*closed) if closed else None,
            timeout=HANG_SECONDS,
            check=False,
        )
    stdout = run.stdout.decode(errors="replace") if run.stdout else ""
    return Ran(run.returncode, stdout, run.stderr.decode(errors="replace"))
