"""The terminal view: on a terminal (a pty here) the row commands print a compact table and
the summary; on a pipe the JSON lines as before, without importing rich; --format and
--quiet choose; NO_COLOR is honoured."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bad_input import Ran, clean_env, run_in_process
from tests.conftest import EXAMPLES, Run
from worker.cli.output import Table

RESULTS = str(EXAMPLES / "attribution-results.jsonl")
ROWS = str(EXAMPLES / "release-rows.jsonl")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COLOUR = re.compile(r"\x1b\[[0-9;]*3[0-7]m")  # a foreground colour
SCORE_HEADER = ["case", "status", "value", "owner", "missing IDs", "cache"]


def on_terminal(
    argv: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    program: tuple[str, ...] = (sys.executable, "-m", "worker.cli"),
) -> tuple[int, str, str]:
    """Run `python -m worker.cli ARGV` (or `program` ARGV) with stdout on a 120-column pty:
    the exit code, the screen (escapes kept, \\r\\n as \\n) and stderr (a pipe)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
    process = subprocess.Popen(
        [*program, *argv],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=clean_env({"COLUMNS": "120", "TERM": "xterm-256color", **(env or {})}),
    )
    # The slave stays open here until the child has exited and the screen is drained: closed,
    # a fast child's last output could be lost to EIO before it is read.
    chunks = []
    while True:
        if select.select([master], [], [], 0.1)[0]:
            chunks.append(os.read(master, 65536))
        elif process.poll() is not None:
            while select.select([master], [], [], 0)[0]:
                chunks.append(os.read(master, 65536))
            break
    os.close(slave)
    os.close(master)
    assert process.stderr is not None
    err = process.stderr.read().decode()
    code = process.wait(timeout=60)
    return code, b"".join(chunks).decode().replace("\r\n", "\n"), err


def screen_lines(screen: str) -> list[list[str]]:
    """The screen's lines without escapes, split into cells (two or more spaces apart)."""
    plain = ANSI.sub("", screen)
    return [re.split(r"\s{2,}", line.strip()) for line in plain.splitlines() if line.strip()]


def on_pipe(argv: list[str], cwd: Path) -> Ran:
    """The same command off a terminal, in-process: stdout and stderr as on pipes."""
    return run_in_process(argv, cwd)


def test_score_on_a_terminal_prints_a_table_and_the_summary(tmp_path: Path) -> None:
    """One row per line of the file: case, status, value, owner, missing IDs, cache, and no
    JSON; the summary on stderr names the store."""
    code, screen, err = on_terminal(["score", RESULTS, "--min-coverage", "0.85"], tmp_path)

    cells = screen_lines(screen)
    assert code == 3, err
    assert cells[0] == SCORE_HEADER
    assert cells[2] == ["refund-001", "pass", "1.000", "-", "-", "miss"]
    assert cells[3] == ["refund-002", "fail", "0.667", "attribution", "refund-method", "miss"]
    assert cells[5] == ["refund-002-retry", "fail", "0.667", "attribution", "refund-method",
                        "conflict"]  # fmt: skip
    assert len(cells) == 2 + 10
    assert "{" not in screen
    assert err.endswith(", store sqlite:///evidence-coverage.sqlite3)\n")


def test_the_table_colours_the_status_unless_no_color_is_set(tmp_path: Path) -> None:
    """pass in green on a terminal; with NO_COLOR=1 no colour at all."""
    _, coloured, _ = on_terminal(["gate", ROWS, "--min-coverage", "0.85"], tmp_path)
    _, plain, _ = on_terminal(["gate", ROWS, "--min-coverage", "0.85"], tmp_path, {"NO_COLOR": "1"})

    assert "\x1b[32mpass" in coloured
    assert COLOUR.search(plain) is None
    assert screen_lines(plain) == screen_lines(coloured)


def test_gate_on_a_terminal_prints_a_table_and_names_the_non_blocking_failure(
    tmp_path: Path,
) -> None:
    """The example rows as a table with a blocking column; the summary says the failing
    shipping row does not block."""
    code, screen, err = on_terminal(["gate", ROWS, "--min-coverage", "0.85"], tmp_path)

    cells = screen_lines(screen)
    assert code == 2, err
    assert cells[0] == ["case", "status", "value", "owner", "missing IDs", "blocking"]
    assert cells[-1] == [
        "shipping-020", "fail", "0.250", "product", "ship-cost, ship-region, ship-tracking", "no"
    ]  # fmt: skip
    assert err == (
        "gate: 4 rows: fail 1, invalid 1, pass 2; policy cli:0.85; 1 non-blocking row failed "
        "or invalid (reported, never the exit code); exit 2\n"
    )


def test_format_jsonl_on_a_terminal_prints_the_json_lines(tmp_path: Path) -> None:
    """--format jsonl overrides the terminal: one JSON object per line, as on a pipe."""
    code, screen, _ = on_terminal(["gate", ROWS, "--min-coverage", "0.85", "--format", "jsonl"],
                                  tmp_path)  # fmt: skip
    piped = on_pipe(["gate", ROWS, "--min-coverage", "0.85"], tmp_path)

    assert code == piped.code == 2
    assert screen == piped.stdout


def test_quiet_prints_the_summary_only(tmp_path: Path) -> None:
    """--quiet: nothing on stdout, on a terminal or a pipe; the summary on stderr."""
    code, screen, err = on_terminal(["score", RESULTS, "--quiet"], tmp_path)
    piped = on_pipe(["score", RESULTS, "-q", "--store", "sqlite:///other.sqlite3"], tmp_path)

    assert (code, screen) == (3, "")
    assert err.startswith("score: 10 rows: ")
    assert (piped.code, piped.stdout) == (3, "")
    assert piped.stderr.startswith("score: 10 rows: ")


def test_read_commands_on_a_terminal_print_tables(tmp_path: Path) -> None:
    """records, alerts and dead-letters list after the example: a table each, then the
    summary naming the store."""
    on_pipe(["score", RESULTS, "--min-coverage", "0.85"], tmp_path)

    _, records, records_err = on_terminal(["records", "--min-coverage", "0.85"], tmp_path)
    _, alerts, _ = on_terminal(["alerts"], tmp_path)
    _, letters, letters_err = on_terminal(["dead-letters", "list"], tmp_path)

    store = "(store sqlite:///evidence-coverage.sqlite3)"
    assert screen_lines(records)[0] == [
        "case", "status", "value", "owner", "missing IDs", "recorded at"
    ]  # fmt: skip
    assert len(screen_lines(records)) == 2 + 7
    assert records_err.endswith(f"policy cli:0.85 {store}\n")
    assert screen_lines(alerts)[0] == ["kind", "raised at", "case", "what differed", "input hash"]
    assert screen_lines(alerts)[2][2:4] == ["refund-002", "first 0.667, then 0.333"]
    assert screen_lines(letters)[0] == ["id", "received at", "origin", "case", "reason"]
    assert screen_lines(letters)[2][2:4] == ["score", "refund-003"]
    assert letters_err == f"dead-letters list: 1 letter {store}\n"


def test_a_case_id_with_escapes_is_shown_escaped_in_the_table(tmp_path: Path) -> None:
    """A case ID holding an escape sequence is written as \\x1b, never sent to the terminal."""
    path = tmp_path / "escape.jsonl"
    path.write_text(json.dumps({"case_id": "\x1b[2Jwiped", "x": 1}) + "\n")

    _, screen, _ = on_terminal(["score", str(path)], tmp_path)

    assert "\x1b[2J" not in screen
    assert "\\x1b[2Jwiped" in ANSI.sub("", screen)


@pytest.mark.parametrize(
    "argv",
    [["score", RESULTS], ["gate", ROWS, "--min-coverage", "0.85"]],
    ids=lambda argv: argv[0],
)
def test_the_pipe_path_never_builds_a_table(
    argv: list[str], cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Not a terminal (captured): the JSON lines, and no table is ever made (structlog
    imports rich itself; the table's drawing is what a pipe must not pay for)."""

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("a table on a pipe")

    monkeypatch.setattr(Table, "__init__", refuse)
    monkeypatch.chdir(tmp_path)

    run = cli(*argv)

    assert run.code in (2, 3)
    assert all(line.startswith("{") for line in run.out.splitlines())
    assert len(run.out.splitlines()) in (4, 11)  # gate: 4 rows; score: 10 records, 1 alert


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_every_column_fits_the_terminal_width(
    columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal narrower than the rows, long cells are cut with an ellipsis and no column
    is lost: the last one, cache, stays on 80 and 60 columns."""
    monkeypatch.setenv("COLUMNS", str(columns))
    table = Table(SCORE_HEADER)
    table.add("refund-002-rerun", "fail", 0.6667, "attribution",
              ["ship-cost", "ship-region", "ship-tracking"], "miss")  # fmt: skip
    table.add("transfer-fee-007", "invalid", None, "evaluation-data", None, "conflict")
    screen = io.StringIO()

    table.print(screen)

    lines = screen.getvalue().splitlines()
    assert max(len(line) for line in lines) <= columns
    assert lines[0].split() == ["case", "status", "value", "owner", "missing", "IDs", "cache"]
    assert lines[2].split()[-1] == "miss"
    assert lines[3].split()[-1] == "conflict"
