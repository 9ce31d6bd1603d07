"""docs/calibration.md's walk, as a user runs it: its commands in order (the installed console
script, in a directory holding only the examples), each exit code as listed here, each output
the page shows exactly (a ```text block is the stdout or the stderr of the command before it;
the ```csv block is the sheet it wrote). The example reviewer sheets are that sheet, filled."""

from __future__ import annotations

import csv
import io
import os
import re
import shlex
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.integration

CONSOLE_SCRIPT = Path(sys.executable).parent / "evidence-worker"
PAGE = ROOT / "docs" / "calibration.md"
POLICY = "--policy contracts/examples/policy.toml"
LEGACY = "--legacy contracts/examples/legacy-scores.jsonl --legacy-threshold 0.7"
STORE = "--store sqlite:///evidence-coverage.sqlite3"
SHEETS = (
    "contracts/examples/calibration-reviewer-a.csv contracts/examples/calibration-reviewer-b.csv"
)
SWITCH = "--policy contracts/examples/policy-switch.toml"
# Checkpoint 5's observation window ends on 2026-12-31: its commands run on the dates the page
# names (the CLI's clock, worker.cli.policy_options.utc_today, set in the process that runs them).
OPEN, ENDED = date(2026, 12, 7), date(2027, 1, 4)
# Every command of the page and its exit code (and the day it runs on, for the window), in order.
WALK: list[tuple[str, int] | tuple[str, int, date]] = [
    (f"evidence-worker compare contracts/examples/attribution-results.jsonl {LEGACY} {POLICY}", 1),
    (f"evidence-worker score contracts/examples/attribution-results.jsonl {POLICY}", 3),
    (f"evidence-worker compare {STORE} {LEGACY} {POLICY}", 1),
    (f"evidence-worker score contracts/examples/triage-rows.jsonl {POLICY}", 2),
    (
        f"evidence-worker calibrate {STORE} {POLICY} --candidates 0.6,0.7,0.8 --band 0.1 "
        "--sheet sheet.csv",
        0,
    ),
    (f"evidence-worker calibrate --decisions {SHEETS}", 1),
    (f"evidence-worker gate contracts/examples/triage-rows.jsonl {SWITCH}", 2, OPEN),
    (f"evidence-worker explain --case threshold-moved-109 {SWITCH}", 1, OPEN),
    (f"evidence-worker gate contracts/examples/triage-rows.jsonl {SWITCH}", 2, ENDED),
]
# Runs the CLI as the console script does, on a given day (-P: the directory, which holds a
# contracts/ of examples, does not shadow the package).
ON_DAY = (
    "import datetime, sys; import worker.cli.policy_options as options; "
    "day = datetime.date.fromisoformat(sys.argv.pop(1)); options.utc_today = lambda: day; "
    "sys.argv[0] = 'evidence-worker'; from worker.entrypoint import run; run()"
)
BLOCK = re.compile(r"```(sh|text|csv)\n(.*?)```", re.DOTALL)
TOML = re.compile(r"```toml\n(.*?)```", re.DOTALL)


def steps() -> list[tuple[str, list[tuple[str, str]]]]:
    """Each command of the page with the (kind, text) blocks that follow it."""
    found: list[tuple[str, list[tuple[str, str]]]] = []
    for kind, body in BLOCK.findall(PAGE.read_text("utf-8")):
        if kind == "sh":
            for line in body.splitlines():
                if line.strip():
                    found.append((" ".join(shlex.split(line, comments=True)), []))
        else:
            found[-1][1].append((kind, body))
    return found


def run(command: str, cwd: Path, day: date | None = None) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("EVIDENCE_")}
    program = [str(CONSOLE_SCRIPT)]
    if day is not None:
        program = [sys.executable, "-P", "-c", ON_DAY, day.isoformat()]
    return subprocess.run(
        [*program, *shlex.split(command)[1:]],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_calibration_walk_gives_the_documented_outputs_and_exit_codes(tmp_path: Path) -> None:
    """Every command of docs/calibration.md in order on one fresh store: each exit code as
    listed, each text block exactly the command's stdout or stderr, the csv block the sheet."""
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "examples").symlink_to(EXAMPLES)
    walk = steps()
    assert [command for command, _ in walk] == [step[0] for step in WALK]
    assert [len(blocks) for _, blocks in walk] == [2, 0, 2, 0, 2, 2, 1, 1, 1]

    for (command, blocks), (_, code, *day) in zip(walk, WALK, strict=True):
        done = run(command, tmp_path, *day)
        assert done.returncode == code, (command, done.stderr)
        for kind, text in blocks:
            if kind == "csv":
                assert (tmp_path / "sheet.csv").read_bytes() == text.replace("\n", "\r\n").encode()
            else:
                assert text in (done.stdout, done.stderr), (command, done.stdout, done.stderr)


def test_the_switch_policy_is_the_one_the_page_shows() -> None:
    """Checkpoint 5's policy file is shipped exactly as the page prints it."""
    (shown,) = TOML.findall(PAGE.read_text("utf-8"))
    assert (EXAMPLES / "policy-switch.toml").read_text("utf-8") == shown


def cells(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text("utf-8"), newline="")))


def test_the_example_sheets_are_the_documented_sheet_filled() -> None:
    """Each reviewer's sheet is the page's sheet, row for row, with only `decision` filled."""
    (sheet,) = [body for kind, body in BLOCK.findall(PAGE.read_text("utf-8")) if kind == "csv"]
    documented = list(csv.reader(io.StringIO(sheet)))
    for name in ("calibration-reviewer-a.csv", "calibration-reviewer-b.csv"):
        filled = cells(EXAMPLES / name)
        assert [row[:-1] for row in filled] == [row[:-1] for row in documented]
        assert {row[-1] for row in filled[1:]} <= {"pass", "fail"}


def test_the_invalid_rows_sentence_is_the_one_compare_prints() -> None:
    """The page quotes compare's invalid-rows line as the first compare prints it."""
    text = PAGE.read_text("utf-8")
    quoted = text.split("in the same words:\n\n```\n", 1)[1].split("```", 1)[0]
    printed = [body for kind, body in BLOCK.findall(text) if kind == "text"][1]
    assert quoted.strip() == printed.splitlines()[1]
