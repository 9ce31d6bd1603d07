"""Not one traceback: every command's text inputs (case IDs, letter IDs, hashes, option
values, file contents) fed arbitrary Unicode, lone surrogates included, and arbitrary bytes
(as argv holds them: undecodable bytes become lone surrogates), give an exit code in
{0, 1, 2, 3} and never a traceback.

Run in-process through the CLI's entry function (main) with stdout as a real one is (UTF-8,
strict errors), so that an exception main() lets out fails the example; a few subprocesses
run the real entry point on the cases issue 39 found.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.bad_input import clean_env, run_in_process
from tests.conftest import BASE_MESSAGE, EXAMPLES

EXIT_CODES = {0, 1, 2, 3}
EXAMPLES_PER_COMMAND = 25
POLICY = str(EXAMPLES / "policy.toml")

# What argv can hold: any Unicode text, or bytes as Python decodes them (surrogateescape).
ARGUMENT = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=40).map(os.fsdecode),
).filter(lambda text: "\x00" not in text)  # execve cannot pass a NUL; argparse never sees one
# Option values that would reach a server: refused by the strategy, not the command.
NOT_A_SERVER = ARGUMENT.filter(lambda text: "://" not in text)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite store holding records, an alert and dead letters, one with a lone surrogate
    in its case ID (valid JSON): what the read commands list."""
    directory = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{directory / 'store.sqlite3'}"
    rows = [
        json.dumps(BASE_MESSAGE),
        json.dumps({**BASE_MESSAGE, "case_id": "refund-001-retry", "supported_claim_ids": []}),
        json.dumps({"case_id": "\ud800", "x": 1}),
        json.dumps({"case_id": "\x1b[31mred", "x": 1}),
        "{not json",
    ]
    path = directory / "rows.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, _, err = run_main(["score", str(path), "--store", url])
    assert code == 3, err
    return url


def run_main(argv: list[str], stdin: bytes = b"", cwd: Path | None = None) -> tuple[int, str, str]:
    """main(argv) with stdin, stdout and stderr as a process has them (stdout UTF-8 and
    strict); the exit code and what it wrote. An exception main() lets out is raised."""
    ran = run_in_process(argv, cwd, stdin=stdin)
    return ran.code, ran.stdout, ran.stderr


def assert_no_traceback(code: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert code in EXIT_CODES, err


# Each command line with {} where the arbitrary argument goes; {store} is the test's store.
ARGUMENT_LINES = [
    ["show", "{}", "--store", "{store}"],
    ["show", "--case", "{}", "--store", "{store}"],
    ["explain", "{}", "--store", "{store}"],
    ["explain", "--case", "{}", "--store", "{store}"],
    ["dead-letters", "show", "{}", "--store", "{store}"],
    ["dead-letters", "list", "--reason", "{}", "--store", "{store}"],
    ["dead-letters", "list", "--since", "{}", "--store", "{store}"],
    ["dead-letters", "replay", "{}", "--store", "{store}"],
    ["dead-letters", "replay", "--all", "--reason", "{}", "--store", "{store}"],
    ["records", "--case-prefix", "{}", "--store", "{store}"],
    ["records", "--contract", "{}", "--store", "{store}"],
    ["records", "--since", "{}", "--store", "{store}"],
    ["records", "--min-coverage", "{}", "--store", "{store}"],
    ["alerts", "--since", "{}", "--store", "{store}"],
    ["alerts", "--limit", "{}", "--store", "{store}"],
    ["gate", str(EXAMPLES / "release-rows.jsonl"), "--min-coverage", "{}"],
    ["score", str(EXAMPLES / "attribution-results.jsonl"), "--store", "{store}", "--policy", "{}"],
    ["report", "{}"],
    ["reconcile", "--older-than", "{}", "--store", "{store}"],
    ["show", "{}"],  # the default store, which is not there
    ["compare", "--legacy", "{}", "--store", "{store}", "--min-coverage", "0.5"],
    ["compare", str(EXAMPLES / "release-rows.jsonl"), "--legacy", "{}", "--min-coverage", "0.5"],
    ["calibrate", "--store", "{store}", "--candidates", "{}", "--min-coverage", "0.5"],
    ["calibrate", "--store", "{store}", "--group", "{}", "--min-coverage", "0.5"],
]


@pytest.mark.parametrize("line", ARGUMENT_LINES, ids=" ".join)
@settings(
    max_examples=EXAMPLES_PER_COMMAND,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(argument=NOT_A_SERVER)
def test_an_arbitrary_argument_is_never_a_traceback(
    line: list[str], argument: str, store: str, tmp_path: Path
) -> None:
    """Whatever the argument, one line and an exit code in {0, 1, 2, 3}."""
    argv = [argument if part == "{}" else part.format(store=store) for part in line]
    assert_no_traceback(*run_main(argv, cwd=tmp_path))


# Lines as a file may hold them: JSON objects with arbitrary text in any field, and bytes.
JSON_TEXT = st.text(max_size=30)
MESSAGE_LINE = st.builds(
    lambda field, value, ascii: json.dumps({**BASE_MESSAGE, field: value}, ensure_ascii=ascii),
    st.sampled_from(["case_id", "answer", "contract_version", "required_claim_ids"]),
    st.one_of(JSON_TEXT, st.lists(JSON_TEXT, max_size=3), st.integers(), st.none()),
    st.booleans(),
).map(lambda text: text.encode("utf-8", "surrogatepass"))
FILE = st.lists(st.one_of(MESSAGE_LINE, st.binary(max_size=60)), min_size=1, max_size=4).map(
    lambda lines: b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n"
)


@pytest.mark.parametrize(
    "command",
    [
        ["score", "-", "--store", "{store}"],
        ["gate", "-", "--min-coverage", "0.5"],
        ["report", "-"],
        ["stability", "--records", "-"],
    ],
    ids=" ".join,
)
@settings(
    max_examples=EXAMPLES_PER_COMMAND,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(contents=FILE)
def test_arbitrary_file_contents_are_never_a_traceback(
    command: list[str], contents: bytes, tmp_path: Path
) -> None:
    """A file of arbitrary lines, read from stdin: its rows, or one line per bad row."""
    store = f"sqlite:///{tmp_path / 'scored.sqlite3'}"
    argv = [part.format(store=store) for part in command]
    assert_no_traceback(*run_main(argv, stdin=contents))


@settings(
    max_examples=EXAMPLES_PER_COMMAND,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(contents=FILE)
def test_what_score_stored_is_listed_by_every_read_command(contents: bytes, tmp_path: Path) -> None:
    """Arbitrary lines scored into a store, then listed by records, alerts, dead-letters
    list, canary and report --store, and each case ID shown: never a traceback."""
    store = f"sqlite:///{tmp_path / 'listed.sqlite3'}"
    code, out, err = run_main(["score", "-", "--store", store], stdin=contents)
    assert_no_traceback(code, out, err)
    if "no messages" in err:
        return
    for argv in (
        ["records", "--store", store, "--format", "jsonl"],
        ["records", "--store", store, "--format", "csv"],
        ["alerts", "--store", store],
        ["dead-letters", "list", "--store", store],
        ["canary", "--store", store, "--all"],
        ["report", "--store", store],
    ):
        assert_no_traceback(*run_main(argv))
    for line in out.splitlines():
        case_id: Any = json.loads(line).get("case_id")
        if isinstance(case_id, str) and case_id:
            assert_no_traceback(*run_main(["show", "--case", case_id, "--store", store]))
            assert_no_traceback(*run_main(["explain", "--case", case_id, "--store", store]))


def test_a_letter_with_a_lone_surrogate_is_listed_with_the_id_escaped(store: str) -> None:
    """The letter whose case_id is "\\ud800" (valid JSON) is listed as \\ud800, and the
    letters after it too, exit 0."""
    code, out, err = run_main(["dead-letters", "list", "--store", store])

    assert code == 0, err
    case_ids = [json.loads(line)["case_id"] for line in out.splitlines()]
    assert set(case_ids) == {"\ud800", "\x1b[31mred", None}
    assert '"case_id":"\\ud800"' in out


# The cases issue 39 found, through the real entry point (`python -m worker.cli`).
SUBPROCESS_CASES = [
    (["show", "--case", b"caf\xe9"], "argument --case: 'caf\\xe9' is not UTF-8 text"),
    (["explain", "--case", b"\xff"], "argument --case: '\\xff' is not UTF-8 text"),
    (["dead-letters", "show", b"\xff"], "argument ID: '\\xff' is not UTF-8 text"),
    (["dead-letters", "list"], None),
]


@pytest.mark.parametrize(("args", "said"), SUBPROCESS_CASES, ids=lambda v: repr(v)[:40])
@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
def test_the_entry_point_gives_one_line_or_a_listing(
    args: list[str | bytes], said: str | None, locale: str, store: str, tmp_path: Path
) -> None:
    """Invalid UTF-8 in an ID: one usage line, exit 2; the listing with a lone surrogate: the
    whole listing, exit 0; in the C locale too (stdout written with surrogateescape)."""
    argv = [os.fsencode(arg) if isinstance(arg, str) else arg for arg in [*args, "--store", store]]
    run = subprocess.run(
        [sys.executable.encode(), b"-m", b"worker.cli", *argv],
        env=clean_env({"LC_ALL": locale}),
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = run.stderr.decode("utf-8", "replace")

    assert "Traceback" not in err
    if said is None:
        assert run.returncode == 0, err
        assert len(run.stdout.splitlines()) == 3
        assert b'"case_id":"\\ud800"' in run.stdout
    else:
        assert run.returncode == 2
        assert said in err.splitlines()[0]
