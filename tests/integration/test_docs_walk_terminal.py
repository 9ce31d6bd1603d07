"""The README's and docs/quickstart.md's walk as a new user at a terminal: each command the
pages give (read from the pages, as test_docs_walk reads them) run with stdout on a
120-column pty in one fresh directory, and on a pipe in another.

On the terminal: the exit code as documented, the summary line on stderr naming the store
(and the broker) the command opened, and for the row commands a table, its header cells
exactly, with no JSON on the screen. On the pipe: what the page prints, byte for byte, by
test_docs_walk's own check.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.factories import without_progress
from tests.integration.test_docs_walk import (
    CONSOLE_SCRIPT,
    SECTIONS,
    WALK,
    as_documented,
    as_the_page_says,
    fresh_directory,
    run,
    walk,
    with_hash,
)
from tests.unit.cli.test_cli_terminal import SCORE_HEADER, on_terminal, screen_lines

pytestmark = pytest.mark.integration

FIRST_SECTIONS = [(page, heading) for page, heading in SECTIONS if page != "docs/triage.md"]
STORE = "store sqlite:///evidence-coverage.sqlite3"
GATE_HEADER = ["case", "status", "value", "owner", "missing IDs", "blocking"]
ALERTS_HEADER = ["kind", "raised at", "case", "what differed", "input hash"]
# Each command of the pages, in order: where its summary says it read or wrote (None: it opens
# no store; gate reads rows, and a store only with --store), and the header of the table it
# prints on a terminal (None: show prints JSON, explain plain text, on a terminal too). No
# command of these pages opens a broker: the quickstart runs on the embedded store alone.
OPENED = [
    (STORE, SCORE_HEADER),
    (STORE, SCORE_HEADER),
    (None, GATE_HEADER),
    (STORE, None),
    (STORE, None),
    (STORE, None),
    (STORE, ALERTS_HEADER),
]


def test_the_readme_and_quickstart_on_a_terminal_name_the_store_and_print_tables(
    tmp_path: Path,
) -> None:
    """Every README and quickstart command on a pty: the documented exit code, a summary
    naming the store it opened (the same as on a pipe), a table where it prints rows; piped,
    the page's outputs exactly."""
    terminal = fresh_directory(tmp_path / "terminal")
    pipe = fresh_directory(tmp_path / "pipe")
    steps = walk(FIRST_SECTIONS)
    assert [command for command, _ in steps] == [command for command, _ in WALK[: len(steps)]]
    assert [len(outputs) for _, outputs in steps] == [1, *[0] * 6]  # the quickstart's summary
    assert len(steps) == len(OPENED)

    first_hash = None
    for (documented, outputs), (_, code), (store, header) in zip(
        steps, WALK[: len(steps)], OPENED, strict=True
    ):
        command = with_hash(documented, first_hash)
        piped = run(command, pipe)
        as_the_page_says(command, code, outputs, piped)
        if first_hash is None:
            first_hash = json.loads(piped.stdout.splitlines()[0])["input_hash"]
        exit_code, screen, err = on_terminal(
            shlex.split(command)[1:], terminal, program=(str(CONSOLE_SCRIPT),)
        )

        assert exit_code == code, (command, err)
        [summary] = without_progress(err)
        [piped_summary] = without_progress(piped.stderr)
        assert summary == as_documented(piped_summary, summary), command
        assert "broker " not in summary, summary
        if store is None:
            assert "store " not in summary, summary
        else:
            assert summary.endswith(f"{store})"), summary
        if header is not None:
            assert screen_lines(screen)[0] == header, (command, screen)
            assert "{" not in screen, (command, screen)
