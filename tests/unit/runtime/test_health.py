"""`evidence-worker health`: the heartbeat file's age decides, in one line, with nothing heavy
imported (worker/runtime/health.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT
from worker import cli, entrypoint
from worker.constants import EMPTY_FILE_PROBLEM, HEARTBEAT_FILE_ENV
from worker.errors import ConfigurationError
from worker.runtime import health
from worker.runtime.health import (
    NOT_CONFIGURED_PROBLEM,
    HealthConfigurationError,
    Verdict,
    judge,
)
from worker.settings import Settings, load_settings

NOW = 1_800_000_000.0
HEARTBEAT = Path("/tmp/worker.heartbeat")


@pytest.mark.parametrize(
    ("touched_at", "max_age", "expected"),
    [
        (
            None,
            30,
            Verdict(
                False,
                "unhealthy: no heartbeat at /tmp/worker.heartbeat: the worker has not started "
                "consuming",
            ),
        ),
        (
            NOW - 2.04,
            30,
            Verdict(True, "healthy: last heartbeat 2.0 s ago at /tmp/worker.heartbeat"),
        ),
        (
            NOW - 30,
            30,
            Verdict(True, "healthy: last heartbeat 30.0 s ago at /tmp/worker.heartbeat"),
        ),
        (
            NOW - 30.5,
            30,
            Verdict(
                False,
                "unhealthy: last heartbeat 30.5 s ago at /tmp/worker.heartbeat, over the 30 s "
                "allowed: the worker's consumer has stopped consuming",
            ),
        ),
        (
            NOW - 400,
            2.5,
            Verdict(
                False,
                "unhealthy: last heartbeat 400.0 s ago at /tmp/worker.heartbeat, over the 2.5 s "
                "allowed: the worker's consumer has stopped consuming",
            ),
        ),
        (NOW + 5, 30, Verdict(True, "healthy: last heartbeat 0.0 s ago at /tmp/worker.heartbeat")),
    ],
    ids=["missing", "fresh", "exactly-max-age", "just-over", "long-stale", "clock-set-back"],
)
def test_verdict_follows_the_heartbeat_age(
    touched_at: float | None, max_age: float, expected: Verdict
) -> None:
    """Healthy while the age is at most max-age; a missing file or an older one is not, and
    a modification time ahead of the clock counts as now."""
    assert judge(HEARTBEAT, touched_at, NOW, max_age) == expected


def test_check_reads_the_file_modification_time(tmp_path: Path) -> None:
    """The age is the clock minus the file's mtime."""
    path = tmp_path / "heartbeat"
    path.touch()
    os.utime(path, (NOW - 12, NOW - 12))

    verdict = health.check(path, 10, clock=lambda: NOW)

    assert verdict == Verdict(
        False,
        f"unhealthy: last heartbeat 12.0 s ago at {path}, over the 10 s allowed: the worker's "
        "consumer has stopped consuming",
    )


def test_check_of_an_unreadable_path_says_why(tmp_path: Path) -> None:
    """A path that cannot be examined is unhealthy, with the system's reason."""
    (tmp_path / "file").touch()
    path = tmp_path / "file" / "heartbeat"

    assert health.check(path, 10) == Verdict(
        False, f"unhealthy: cannot read heartbeat {path}: Not a directory"
    )


def test_touch_creates_then_refreshes_and_forget_removes(tmp_path: Path) -> None:
    """touch() sets the mtime to now whether or not the file exists; forget() removes it,
    and forgetting a missing file is no error."""
    path = tmp_path / "heartbeat"
    health.touch(path)
    os.utime(path, (NOW - 100, NOW - 100))
    health.touch(path)
    assert health.check(path, 5).healthy

    health.forget(path)
    health.forget(path)
    assert not path.exists()


def test_directory_problem_names_a_missing_directory(tmp_path: Path) -> None:
    """The worker refuses a heartbeat path whose directory does not exist."""
    assert health.directory_problem(tmp_path / "heartbeat") is None
    assert health.directory_problem(tmp_path / "nope" / "heartbeat") == (
        f"EVIDENCE_HEARTBEAT_FILE: directory {tmp_path / 'nope'} does not exist"
    )


# The environment, read as Settings reads it ---------------------------------------------------


@pytest.mark.parametrize("value", [None, "/tmp/evidence.heartbeat", "relative/heartbeat"])
def test_light_reader_agrees_with_settings(
    value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check reads EVIDENCE_HEARTBEAT_FILE without pydantic, to the same value."""
    environ = {} if value is None else {HEARTBEAT_FILE_ENV: value}
    for name, setting in environ.items():
        monkeypatch.setenv(name, setting)

    assert health.heartbeat_file(environ) == Settings().heartbeat_file


def test_empty_heartbeat_file_is_the_same_error_for_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty EVIDENCE_HEARTBEAT_FILE is refused by the worker and the check alike."""
    monkeypatch.setenv(HEARTBEAT_FILE_ENV, "")
    with pytest.raises(ConfigurationError) as worker_error:
        load_settings()
    with pytest.raises(HealthConfigurationError) as check_error:
        health.heartbeat_file({HEARTBEAT_FILE_ENV: ""})

    assert (
        str(worker_error.value)
        == str(check_error.value)
        == f"EVIDENCE_HEARTBEAT_FILE: {EMPTY_FILE_PROBLEM}"
    )


# The command, on its light path and through the whole command line ---------------------------


def light(argv: list[str]) -> int:
    return health.main(argv, environ=os.environ)


def whole(argv: list[str]) -> int:
    return cli.main(["health", *argv])


PATHS: dict[str, Callable[[list[str]], int]] = {"light": light, "whole": whole}


@pytest.fixture(params=sorted(PATHS))
def run_health(request: pytest.FixtureRequest) -> Callable[[list[str]], int]:
    """`evidence-worker health` as the console script runs it (light) and as `python -m
    worker.cli health` does (whole): the same answers."""
    return PATHS[request.param]


def test_healthy_prints_one_line_on_stdout_and_exits_0(
    run_health: Callable[[list[str]], int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "heartbeat"
    path.touch()
    monkeypatch.setenv(HEARTBEAT_FILE_ENV, str(path))

    code = run_health(["--max-age", "30"])

    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.startswith("healthy: last heartbeat 0.")
    assert out.endswith(f" s ago at {path}\n")


def test_stale_prints_one_line_on_stderr_and_exits_1(
    run_health: Callable[[list[str]], int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "heartbeat"
    path.touch()
    os.utime(path, (1, 1))  # 1970: far older than any max-age
    monkeypatch.setenv(HEARTBEAT_FILE_ENV, str(path))

    code = run_health(["--max-age", "30"])

    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.startswith("evidence-worker: unhealthy: last heartbeat ")
    assert err.endswith(
        f" s ago at {path}, over the 30 s allowed: the worker's consumer has stopped consuming\n"
    )
    assert err.count("\n") == 1


def test_missing_file_exits_1_saying_the_worker_has_not_consumed(
    run_health: Callable[[list[str]], int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--file wins over the environment (here unset)."""
    path = tmp_path / "heartbeat"

    code = run_health(["--file", str(path)])

    assert (code, capsys.readouterr()) == (
        1,
        (
            "",
            f"evidence-worker: unhealthy: no heartbeat at {path}: the worker has not started "
            "consuming\n",
        ),
    )


def test_empty_heartbeat_file_is_a_configuration_error_of_the_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The light path says what the worker would say about an empty EVIDENCE_HEARTBEAT_FILE."""
    monkeypatch.setenv(HEARTBEAT_FILE_ENV, "")

    code = light([])

    assert (code, capsys.readouterr()) == (
        2,
        (
            "",
            "evidence-worker: configuration error: EVIDENCE_HEARTBEAT_FILE: "
            f"{EMPTY_FILE_PROBLEM}\n",
        ),
    )


def test_unset_heartbeat_file_is_a_configuration_error(
    run_health: Callable[[list[str]], int], capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_health([])

    assert (code, capsys.readouterr()) == (
        2,
        ("", f"evidence-worker: configuration error: {NOT_CONFIGURED_PROBLEM}\n"),
    )


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("--max-age", "0", "must be above 0, got 0"),
        ("--max-age", "-1", "must be above 0, got -1"),
        ("--max-age", "nan", "must be above 0, got nan"),
        ("--max-age", "soon", "'soon' is not a number of seconds"),
        ("--file", "", "empty: name the heartbeat file"),
    ],
)
def test_bad_options_are_usage_errors(
    run_health: Callable[[list[str]], int],
    option: str,
    value: str,
    problem: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A usage error exits 2, naming the option and what is wrong with its value."""
    with pytest.raises(SystemExit) as exited:
        run_health([option, value])

    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"evidence-worker health: error: argument {option}: {problem}",
        "run 'evidence-worker health --help' for the options",
    ]


@pytest.mark.parametrize(
    ("argv", "code", "out"),
    [
        (["health", "--max-age", "30"], 0, "healthy: last heartbeat "),
        (["--version"], 0, "evidence-worker "),
    ],
    ids=["health", "any-other-command"],
)
def test_console_script_sends_health_one_way_and_the_rest_the_other(
    argv: list[str],
    code: int,
    out: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`evidence-worker health` takes the light path; every other command the whole one."""
    path = tmp_path / "heartbeat"
    path.touch()
    monkeypatch.setenv(HEARTBEAT_FILE_ENV, str(path))
    monkeypatch.setattr(sys, "argv", ["evidence-worker", *argv])

    with pytest.raises(SystemExit) as exited:
        entrypoint.run()

    assert exited.value.code == code
    assert capsys.readouterr().out.startswith(out)


def test_console_script_runs_health_importing_only_the_standard_library(tmp_path: Path) -> None:
    """The probe's command loads worker.entrypoint and worker.runtime.health and nothing else
    not in the standard library: no pydantic, no Celery, not the rest of the command line."""
    path = tmp_path / "heartbeat"
    path.touch()
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "from worker import entrypoint\n"
        f"sys.argv = ['evidence-worker', 'health', '--file', {str(path)!r}]\n"
        "stdlib = sys.stdlib_module_names\n"
        "try:\n"
        "    entrypoint.run()\n"
        "except SystemExit as exit:\n"
        "    new = set(sys.modules) - before\n"
        "    print(exit.code, sorted(m for m in new if m.split('.')[0] not in stdlib))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )

    assert result.stdout.splitlines()[-1] == (
        "0 ['worker', 'worker.constants', 'worker.entrypoint', 'worker.runtime', "
        "'worker.runtime.health', 'worker.usage_errors']"
    )


@pytest.mark.parametrize("variable", ["EVIDENCE_HEARTBEAT_FILE", "EVIDENCE_HEARTBEAT_SECONDS"])
def test_heartbeat_settings_are_in_the_settings_page(variable: str) -> None:
    """Each heartbeat setting is a Settings field with a row in docs/settings.md's tables
    generated from Settings (not in its hand-written section)."""
    page = (ROOT / "docs" / "settings.md").read_text("utf-8")
    table = page.split("\n## Other variables", 1)[0]
    assert variable.removeprefix("EVIDENCE_").lower() in Settings.model_fields
    assert f"\n| `{variable}` | " in table
