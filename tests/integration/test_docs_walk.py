"""The README's and docs' walk, in their documented order, on one fresh SQLite store: the
README's main job, docs/quickstart.md, then docs/triage.md's walk-through, each command run
as a user runs it (the installed console script, in a directory holding only the examples).

The commands and the outputs the pages print are read from the pages (their ```sh and ```text
blocks, and `evidence-worker ...` spans in their prose), so page and test cannot drift apart.
A ```text block is the output of the command before it: its stdout, or its stderr (a
summary, with its run time, which varies, read as the page's). The pages give most exit
codes in prose; they are kept in WALK below, beside the commands the pages must hold.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT
from tests.factories import without_progress

pytestmark = pytest.mark.integration

CONSOLE_SCRIPT = Path(sys.executable).parent / "evidence-worker"
# (page, section) in the order a newcomer reads them: the README's first screen points to the
# quickstart, which points to triage.md.
SECTIONS = [
    ("README.md", "Run it"),
    ("docs/quickstart.md", "Run the main job"),
    ("docs/quickstart.md", "What every row says"),
    ("docs/quickstart.md", "Add a policy, then look rows up"),
    ("docs/triage.md", "The walk-through"),
]
POLICY = "--policy contracts/examples/policy.toml"
BASELINE = "--baseline-policy contracts/examples/policy-2026-11.toml"
# Every command of the walk and its exit code, in order. The README's main job is the
# quickstart's (make run runs it): it is run once.
WALK = [
    ("evidence-worker score contracts/examples/attribution-results.jsonl", 3),
    (f"evidence-worker score contracts/examples/attribution-results.jsonl {POLICY}", 3),
    (f"evidence-worker gate contracts/examples/release-rows.jsonl {POLICY}", 0),
    ("evidence-worker show <input_hash>", 0),
    ("evidence-worker show --case refund-001", 0),
    (f"evidence-worker explain --case refund-001 {POLICY}", 0),
    ("evidence-worker alerts", 3),
    (f"evidence-worker score contracts/examples/triage-rows.jsonl {POLICY}", 2),
    (f"evidence-worker explain --case parser-rollout-101 {POLICY}", 1),
    ("evidence-worker alerts --kind contract_drift", 2),
    (f"evidence-worker explain --case refund-drift-104 {POLICY}", 2),
    (f"evidence-worker explain --case threshold-moved-109 {POLICY} {BASELINE}", 1),
    (f"evidence-worker gate contracts/examples/triage-rows.jsonl {POLICY} {BASELINE}", 2),
]
BLOCK_OR_SPAN = re.compile(r"```(sh|text)\n(.*?)```|`(evidence-worker [^`]+)`", re.DOTALL)
RUN_TIME = re.compile(r"\(\d+\.\d+s, ")


def section(page: str, heading: str) -> str:
    text = (ROOT / page).read_text("utf-8")
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def walk(sections: list[tuple[str, str]] = SECTIONS) -> list[tuple[str, list[str]]]:
    """Each command of the pages' sections in order, with the text blocks that follow it."""
    steps: list[tuple[str, list[str]]] = []
    for page, heading in sections:
        for kind, body, span in BLOCK_OR_SPAN.findall(section(page, heading)):
            if kind == "text":
                steps[-1][1].append(body)
                continue
            lines = body.splitlines() if kind == "sh" else [span]
            for line in lines:
                command = " ".join(shlex.split(line, comments=True))
                if command.startswith("evidence-worker ") and (
                    not steps or steps[-1][0] != command or page != "docs/quickstart.md"
                ):
                    steps.append((command, []))
    return steps


def as_documented(stderr: str, output: str) -> str:
    """`stderr` with its run time, which varies, replaced by the page's."""
    documented = RUN_TIME.search(output)
    return stderr if documented is None else RUN_TIME.sub(documented[0], stderr)


def fresh_directory(path: Path) -> Path:
    """`path` as a new user's directory: the examples at contracts/examples, nothing else."""
    (path / "contracts").mkdir(parents=True)
    (path / "contracts" / "examples").symlink_to(EXAMPLES)
    return path


def with_hash(command: str, first_hash: str | None) -> str:
    """The page's command, its placeholder filled: refund-001's input hash, from its record."""
    if "<input_hash>" not in command:
        return command
    assert first_hash is not None
    return command.replace("<input_hash>", first_hash)


def as_the_page_says(
    command: str, code: int, outputs: list[str], done: subprocess.CompletedProcess[str]
) -> None:
    """A piped run of a page's command: the exit code as documented, a summary at most on
    stderr, and each output the page prints exactly (its stdout, or its stderr)."""
    assert done.returncode == code, (command, done.stderr)
    assert len(without_progress(done.stderr)) <= 1, (command, done.stderr)  # a summary at most
    for output in outputs:
        assert output in (done.stdout, as_documented(done.stderr, output)), (
            command,
            done.stdout,
            done.stderr,
        )


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("EVIDENCE_")}
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *shlex.split(command)[1:]],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_documented_walk_gives_the_documented_outputs_and_exit_codes(
    tmp_path: Path,
) -> None:
    """Every command of the README, quickstart and triage walk-through, in order, on one fresh
    store: each exit code as documented, each printed output exactly."""
    fresh_directory(tmp_path)
    steps = walk()
    assert [command for command, _ in steps] == [command for command, _ in WALK]
    # quickstart's summary; triage.md's explain of the three near-misses
    assert [len(outputs) for _, outputs in steps] == [1, *[0] * 7, 1, 0, 1, 1, 0]

    first_hash = None
    for (documented, outputs), (_, code) in zip(steps, WALK, strict=True):
        command = with_hash(documented, first_hash)
        done = run(command, tmp_path)
        as_the_page_says(command, code, outputs, done)
        if first_hash is None:
            first_hash = json.loads(done.stdout.splitlines()[0])["input_hash"]
