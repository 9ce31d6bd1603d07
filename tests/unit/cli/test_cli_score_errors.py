"""`evidence-worker score` on unusable input files, configuration or usage: one line on
stderr and exit 2 (help for usage errors), never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts import PolicyError, parse_policy, policy_from_threshold
from tests.conftest import Run
from worker.cli import main


def assert_one_line_error(run: Run, message: str) -> None:
    assert run.code == 2
    assert run.out == ""
    assert run.err == f"evidence-worker: {message}\n"
    assert "Traceback" not in run.err


def test_empty_file_contains_no_messages(
    score: Callable[..., Run], write_jsonl: Callable[..., Path]
) -> None:
    """A file with no non-blank line exits 2: '<path> contains no messages'."""
    path = write_jsonl(["", "  "])

    assert_one_line_error(score(path), f"{path} contains no messages")


def test_missing_path_cannot_be_read(score: Callable[..., Run], tmp_path: Path) -> None:
    """A path that does not exist exits 2: 'cannot read <path>: <why>'."""
    path = tmp_path / "absent.jsonl"

    assert_one_line_error(score(path), f"cannot read {path}: No such file or directory")


def test_directory_path_cannot_be_read(score: Callable[..., Run], tmp_path: Path) -> None:
    """A directory exits 2: 'cannot read <path>: it is a directory'."""
    assert_one_line_error(score(tmp_path), f"cannot read {tmp_path}: it is a directory")


def contract_error(build: Callable[[], object]) -> str:
    """The PolicyError text contracts/ gives for a bad threshold or policy file."""
    with pytest.raises(PolicyError) as raised:
        build()
    return str(raised.value)


@pytest.mark.parametrize("raw", ["nan", "1.5", "-0.1", "inf", "abc", ""])
def test_bad_min_evidence_coverage_is_a_configuration_error(
    raw: str,
    score: Callable[..., Run],
    one_message_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A threshold that is not a finite number in 0..1 stops the run in one line, naming it."""
    monkeypatch.setenv("MIN_EVIDENCE_COVERAGE", raw)
    problem = contract_error(lambda: policy_from_threshold(raw))

    run = score(one_message_file)

    assert_one_line_error(run, f"configuration error: {problem}")
    assert f"MIN_EVIDENCE_COVERAGE={raw!r}" in run.err


def test_bad_min_coverage_option_names_the_option(
    score: Callable[..., Run], one_message_file: Path
) -> None:
    """A bad --min-coverage is reported against the option the user typed."""
    run = score(one_message_file, "--min-coverage", "abc")

    assert_one_line_error(
        run, "configuration error: --min-coverage='abc' is not a number; set a value in 0.0..1.0"
    )


@pytest.mark.parametrize(
    ("toml", "names"),
    [
        pytest.param(
            'version = "v1"\n[groups.default]\nmin_coverage = 1.5\n',
            "groups.default.min_coverage",
            id="threshold-above-1",
        ),
        pytest.param(
            'version = "v1"\n[groups.default]\nmin_coverage = nan\n',
            "groups.default.min_coverage",
            id="threshold-nan",
        ),
        pytest.param(
            'version = "v1"\n[groups.default]\nmin_coverage = "0.8"\n',
            "groups.default.min_coverage",
            id="threshold-string",
        ),
        pytest.param(
            'version = "v1"\n[groups.default]\nminimum = 0.8\n',
            "groups.default.minimum",
            id="unknown-group-key",
        ),
        pytest.param(
            'version = "v1"\nowner = "me"\n[groups.default]\nmin_coverage = 0.8\n',
            "owner",
            id="unknown-top-level-key",
        ),
        pytest.param('version = "v1"\n[groups.default]\n', "groups.default", id="no-threshold"),
        pytest.param("version = \n", "not valid TOML", id="not-toml"),
    ],
)
def test_bad_policy_file_is_a_configuration_error(
    toml: str,
    names: str,
    score: Callable[..., Run],
    one_message_file: Path,
    tmp_path: Path,
) -> None:
    """A policy file with a bad, missing or unknown setting stops the run in one line naming it."""
    policy = tmp_path / "policy.toml"
    policy.write_text(toml)
    problem = contract_error(lambda: parse_policy(toml, source=f"policy file {policy}"))

    run = score(one_message_file, "--policy", policy)

    assert_one_line_error(run, f"configuration error: {problem}")
    assert run.err.startswith(f"evidence-worker: configuration error: policy file {policy}")
    assert names in run.err


def test_missing_policy_file_is_a_configuration_error(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """--policy naming a file that does not exist exits 2 with 'cannot read policy file'."""
    policy = tmp_path / "absent.toml"

    assert_one_line_error(
        score(write_jsonl([message_dict()]), "--policy", policy),
        f"configuration error: cannot read policy file {policy}: No such file or directory",
    )


def test_unknown_store_scheme_is_a_configuration_error(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """A store URL that is neither sqlite:/// nor redis:// exits 2 naming the scheme."""
    run = cli("score", write_jsonl([message_dict()]), "--store", "postgres://db/x")

    assert run.code == 2
    assert run.out == ""
    assert run.err.startswith(
        "evidence-worker: configuration error: unknown store scheme 'postgres'"
    )
    assert len(run.err.splitlines()) == 1


def test_unknown_store_scheme_from_environment(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EVIDENCE_STORE_URL with an unknown scheme is reported the same way."""
    monkeypatch.setenv("EVIDENCE_STORE_URL", "memcached://localhost")

    assert_one_line_error(
        cli("score", write_jsonl([message_dict()])),
        "configuration error: unknown store scheme 'memcached' in store URL "
        "(EVIDENCE_STORE_URL or --store): "
        "use sqlite:///path/to.db or redis://host:port/db",
    )


def test_unopenable_sqlite_store_is_a_configuration_error(
    cli: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """A SQLite path in a missing directory exits 2 in one line."""
    database = tmp_path / "no-such-dir" / "s.sqlite3"

    run = cli("score", write_jsonl([message_dict()]), "--store", f"sqlite:///{database}")

    assert (run.code, run.out) == (2, "")
    assert len(run.err.splitlines()) == 1
    assert run.err.startswith(
        f"evidence-worker: configuration error: cannot open SQLite store {database}: "
    )


def test_bad_setting_names_its_variable(
    score: Callable[..., Run],
    write_jsonl: Callable[..., Path],
    message_dict: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unusable EVIDENCE_* value is a configuration error naming the variable."""
    monkeypatch.setenv("EVIDENCE_LOG_FORMAT", "xml")

    run = score(write_jsonl([message_dict()]))

    assert (run.code, run.out) == (2, "")
    assert len(run.err.splitlines()) == 1
    assert run.err.startswith("evidence-worker: configuration error: EVIDENCE_LOG_FORMAT: ")
    assert "'json'" in run.err
    assert "Traceback" not in run.err


# Usage --------------------------------------------------------------------------------


def test_no_command_prints_the_command_list_and_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bare `evidence-worker`: the help with every command on stderr, nothing on stdout, 2."""
    code = main([])
    captured = capsys.readouterr()

    assert (code, captured.out) == (2, "")
    assert captured.err.startswith("usage: evidence-worker [-h] [--version] COMMAND ...\n")
    commands = [line.split()[0] for line in captured.err.splitlines() if line.startswith("    ")]
    assert commands[:2] == ["score", "gate"]
    assert {"records", "report", "dead-letters", "publish", "completion"} <= set(commands)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        pytest.param(["bogus"], "argument COMMAND: invalid choice: 'bogus'", id="unknown-command"),
        pytest.param(["score"], "the following arguments are required: PATH", id="score-no-path"),
        pytest.param(["gate"], "the following arguments are required: PATH", id="gate-no-path"),
        pytest.param(["show"], "one of the arguments HASH --case is required", id="show-no-hash"),
        pytest.param(["score", "x", "--bogus"], "unrecognized arguments: --bogus", id="bad-flag"),
    ],
)
def test_usage_error_is_the_error_and_where_the_help_is_and_exits_2(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage error is two lines on stderr, the error and the command for the help; exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()

    assert exit_info.value.code == 2
    assert captured.out == ""
    prog = "evidence-worker" if argv in ([], ["bogus"]) else f"evidence-worker {argv[0]}"
    lines = captured.err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{prog}: error: {error}")
    assert lines[1] == f"run '{prog} --help' for the options"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["score", "--help"],
        ["gate", "--help"],
        ["publish", "--help"],
        ["bench", "--help"],
        ["show", "--help"],
        ["alerts", "--help"],
        ["schema", "--help"],
    ],
    ids=" ".join,
)
def test_help_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` prints usage for the command on stdout and exits 0."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out = capsys.readouterr().out

    assert exit_info.value.code == 0
    command = " ".join(argv[:-1])
    assert out.startswith(f"usage: evidence-worker {command}".rstrip())
