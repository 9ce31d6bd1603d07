"""`evidence-worker completion bash|zsh`: the script completes the real commands and options.

bash's completion is exercised as bash runs it: the script sourced, the words of a command
line in COMP_WORDS, the function `complete -F` names called, COMPREPLY read back."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest

from tests.bad_input import run_in_process
from tests.conftest import Run
from worker.cli import COMMANDS


def completions(script: str, words: list[str]) -> list[str]:
    line = " ".join(words)
    program = (
        f"{script}\n"
        f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
        "COMP_POINT=${#COMP_LINE}\n"
        '_shtab_evidence_worker; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "--noprofile"],
        input=program,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return sorted(filter(None, done.stdout.splitlines()))


@pytest.fixture(scope="module")
def bash_script() -> str:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    done = run_in_process(["completion", "bash"])
    assert (done.code, done.stderr) == (0, "")
    return done.stdout


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["evidence-worker", ""], sorted(COMMANDS)),
        (["evidence-worker", "re"], ["reconcile", "records", "report"]),
        (["evidence-worker", "dead-letters", ""], ["list", "purge", "replay", "show"]),
        (["evidence-worker", "score", "--p"], ["--policy"]),
        (["evidence-worker", "explain", "--ca"], ["--case"]),
        (["evidence-worker", "completion", ""], ["bash", "zsh"]),
        (["evidence-worker", "--v"], ["--version"]),
    ],
)
def test_bash_completes_commands_actions_and_options(
    bash_script: str, words: list[str], expected: list[str]
) -> None:
    assert completions(bash_script, words) == expected


def test_the_zsh_script_names_every_command(cli: Callable[..., Run]) -> None:
    run = cli("completion", "zsh")

    assert (run.code, run.err) == (0, "")
    assert run.out.startswith("#compdef evidence-worker")
    for command in COMMANDS:
        assert f"    {command}:'" in run.out, command
