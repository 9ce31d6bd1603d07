"""Command-line conventions: --version, help with examples, Ctrl-C, progress on long runs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from worker.cli import COMMANDS, main
from worker.cli.progress import Progress
from worker.pipeline.service import Service

COMMAND_NAMES = sorted(COMMANDS)


def test_version_names_the_worker_the_metric_and_ragas(capsys: pytest.CaptureFixture[str]) -> None:
    """`--version` prints the three versions every record carries, and exits 0."""
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out == (
        f"evidence-worker {version('evidence-coverage-worker')} "
        f"(metric evidence_coverage/1, ragas {version('ragas')})\n"
    )


@pytest.mark.parametrize("command", COMMAND_NAMES)
def test_every_command_help_has_a_description_and_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each subcommand's --help says what it does and shows one runnable example."""
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    out = capsys.readouterr().out

    assert exited.value.code == 0
    assert f"\nexample:\n  evidence-worker {command} " in out
    description = out.split("\n\n")[1]
    assert len(description) > 40


@pytest.mark.parametrize("command", COMMAND_NAMES)
def test_every_option_with_a_value_states_its_default(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every option that takes a value says what happens without it: `default` in its help."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    options = capsys.readouterr().out.split("options:\n", 1)[1]
    entries = [entry for entry in options.split("\n  -") if entry.strip()]
    for entry in entries:
        flags = entry.split("  ", 1)[0]
        if any(char.isupper() for char in flags.replace("-h", "")) and "--help" not in flags:
            assert "default" in entry, f"{command}: {entry.strip()}"


def test_interrupted_score_says_how_many_rows_were_recorded(
    monkeypatch: pytest.MonkeyPatch,
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C during a run exits 130 after saying how many rows were recorded so far."""
    rows = [message_dict(case_id=f"case-{n}", answer=f"answer {n}") for n in range(1_200)]
    path = write_jsonl(rows)
    handle = Service.handle
    calls = []

    def interrupted_second_chunk(self: Service, bodies: Any) -> Any:
        calls.append(len(bodies))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return handle(self, bodies)

    monkeypatch.setattr(Service, "handle", interrupted_second_chunk)
    store = tmp_path / "s.sqlite3"

    code = main(["score", str(path), "--store", f"sqlite:///{store}"])
    captured = capsys.readouterr()

    assert code == 130
    assert len(captured.out.splitlines()) == 500
    assert captured.err == (
        f"score: interrupted; 500 rows recorded in sqlite:///{store} "
        "(run the file again: recorded rows come back as cache hits)\n"
    )


class Clock:
    """time.monotonic stand-in that moves only when told."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("worker.cli.progress.time.monotonic", fake)
    return fake


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_silent_for_short_runs(clock: Clock) -> None:
    """Nothing is printed before the first interval has passed."""
    stream = io.StringIO()
    progress = Progress("score", stream=stream)
    clock.now += 1.9
    progress.tick(100)

    assert stream.getvalue() == ""


def test_progress_prints_plain_lines_with_percentage_and_eta_off_a_terminal(clock: Clock) -> None:
    """Off a terminal: one plain line per interval, with the share read and the time left."""
    stream = io.StringIO()
    read = {"bytes": 0}
    progress = Progress("score", stream=stream, done=lambda: read["bytes"], total=lambda: 4_000)
    clock.now += 2.0
    read["bytes"] = 1_000
    progress.tick(250)
    clock.now += 2.0
    read["bytes"] = 2_000
    progress.tick(250)

    assert stream.getvalue().splitlines() == [
        "score: 250 lines (125/s), 25%, ETA 0:06",
        "score: 500 lines (125/s), 50%, ETA 0:04",
    ]


def test_progress_without_a_known_size_has_no_percentage(clock: Clock) -> None:
    """stdin from a pipe has no size: counts and rate only."""
    stream = io.StringIO()
    progress = Progress("gate", stream=stream, done=lambda: 500, total=lambda: None)
    clock.now += 2.0
    progress.tick(1_000)

    assert stream.getvalue() == "gate: 1,000 lines (500/s)\n"


def test_progress_rewrites_one_line_on_a_terminal_and_clears_it(clock: Clock) -> None:
    """On a terminal the line is redrawn in place, often, and cleared before the summary."""
    stream = Terminal()
    progress = Progress("score", stream=stream, done=lambda: 3, total=lambda: 4)
    clock.now += 0.5
    progress.tick(30)
    progress.finish()

    assert stream.getvalue() == "\r\x1b[Kscore: 30 lines (60/s), 75%, ETA 0:00\r\x1b[K"


def test_summary_elapsed_counts_from_process_start(tmp_path: Path) -> None:
    """The summary's time is the command's real run, start-up included: never 0.0s."""
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"case_id": "x"}) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "worker.cli", "score", str(path), "--store",
         f"sqlite:///{tmp_path}/s.sqlite3"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    seconds = float(result.stderr.rsplit("(", 1)[1].split("s,", 1)[0])

    assert result.returncode == 2
    assert seconds >= 0.05
