"""Every command fed what a careless or demanding user would: one line on stderr, exit 2.

Each case runs in a directory of its own holding the bad files tests/bad_input.py writes (so
messages name them by relative path), with no EVIDENCE_* variables but the case's own:
in-process through main(), with stdout and stderr as Python opens them on pipes, or, when
the case is about the process (root's capabilities dropped, a standard stream closed or on a
full disk), as `python -m worker.cli` without PYTHONUNBUFFERED, so stdout is block-buffered as
a user's is. None of these needs a service: Redis URLs that are refused
before connecting, or port 1, where nothing listens. The cases that need a Redis server are in
tests/integration.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_input import (
    CONFIG,
    HASH,
    LEDGER_DB,
    PROG,
    REDIS_HINT,
    RESULTS,
    ROWS,
    Case,
    check,
    clean_env,
    make_files,
    run_in_process,
)
from tests.conftest import EXAMPLES
from worker.cli.exit_codes import CLOSED_PIPE

POLICY = str(EXAMPLES / "policy.toml")
STORE_HINT = "use sqlite:///path/to.db or redis://host:port/db"
ACCEPTED = "accepted: redis://, rediss://, amqp://, amqps://"
BROKER_HINT = "use redis://host:port/db or amqp://user:password@host:port/vhost"
NO_STORE = (
    f"{CONFIG}no store at missing.db: nothing has been recorded there (pass --store or set "
    "EVIDENCE_STORE_URL to the store `score` or the worker wrote to)"
)
REFUSED = "Error 111 connecting to 127.0.0.1:1. Connection refused"
NOT_UTF8_POLICY = (
    f"{CONFIG}policy file binary.toml is not UTF-8 text (invalid start byte at byte 18): "
    "save it as UTF-8"
)
LATIN1_POLICY = (
    f"{CONFIG}policy file latin1.toml is not UTF-8 text (invalid continuation byte at byte 5): "
    "save it as UTF-8"
)


def usage(command: str, message: str) -> str:
    """The first line of a usage error: argparse's, before the line naming --help."""
    return f"{PROG} {command}: error: {message}"


CASES: dict[str, Case] = {
    # --- score ------------------------------------------------------------------------------
    "score --policy binary file": Case(
        ["score", RESULTS, "--policy", "binary.toml"], NOT_UTF8_POLICY
    ),
    "score EVIDENCE_POLICY_FILE Latin-1": Case(
        ["score", RESULTS], LATIN1_POLICY, env={"EVIDENCE_POLICY_FILE": "latin1.toml"}
    ),
    "score EVIDENCE_POLICY_FILE binary": Case(
        ["score", RESULTS], NOT_UTF8_POLICY, env={"EVIDENCE_POLICY_FILE": "binary.toml"}
    ),
    "score --policy with --min-coverage": Case(
        ["score", RESULTS, "--policy", POLICY, "--min-coverage", "0.5"],
        usage("score", "argument --min-coverage: not allowed with argument --policy"),
        usage=True,
    ),
    "score --min-coverage empty": Case(
        ["score", RESULTS, "--min-coverage", ""],
        f"{CONFIG}--min-coverage='' is not a number; set a value in 0.0..1.0",
    ),
    "score MIN_EVIDENCE_COVERAGE empty": Case(
        ["score", RESULTS],
        f"{CONFIG}MIN_EVIDENCE_COVERAGE='' is not a number; set a value in 0.0..1.0",
        env={"MIN_EVIDENCE_COVERAGE": ""},
    ),
    "score read-only store file": Case(
        ["score", RESULTS, "--store", "sqlite:///readonly.db"],
        f"{CONFIG}cannot write to SQLite store readonly.db: attempt to write a readonly "
        "database (make the file and its directory writable, or pass another --store)",
        unprivileged=True,
    ),
    "score store in a read-only directory": Case(
        ["score", RESULTS, "--store", "sqlite:///readonly-dir/s.db"],
        f"{CONFIG}cannot open SQLite store readonly-dir/s.db: directory readonly-dir is not "
        "writable",
        unprivileged=True,
    ),
    "score store in a missing directory": Case(
        ["score", RESULTS, "--store", "sqlite:///missing-dir/s.db"],
        f"{CONFIG}cannot open SQLite store missing-dir/s.db: directory missing-dir does not "
        "exist (create it first)",
    ),
    "score store is a directory": Case(
        ["score", RESULTS, "--store", "sqlite:///readonly-dir"],
        f"{CONFIG}cannot open SQLite store readonly-dir: it is a directory",
    ),
    "score store is not SQLite": Case(
        ["score", RESULTS, "--store", "sqlite:///not-a-db.txt"],
        f"{CONFIG}cannot open SQLite store not-a-db.txt: file is not a database",
    ),
    "score sqlite:// without a path": Case(
        ["score", RESULTS, "--store", "sqlite://"],
        f"{CONFIG}store URL 'sqlite://' is not sqlite:///FILE: use sqlite:///relative/path.db "
        "or sqlite:////absolute/path.db",
    ),
    "score sqlite:/// without a file": Case(
        ["score", RESULTS, "--store", "sqlite:///"],
        f"{CONFIG}store URL 'sqlite:///' names no file: use sqlite:///path/to.db",
    ),
    "score sqlite:relative": Case(
        ["score", RESULTS, "--store", "sqlite:relative.db"],
        f"{CONFIG}store URL 'sqlite:relative.db' is not sqlite:///FILE: use "
        "sqlite:///relative/path.db or sqlite:////absolute/path.db",
    ),
    "score sqlite://host/path": Case(
        ["score", RESULTS, "--store", "sqlite://host/s.db"],
        f"{CONFIG}store URL 'sqlite://host/s.db' is not sqlite:///FILE: use "
        "sqlite:///relative/path.db or sqlite:////absolute/path.db",
    ),
    "score store without a scheme": Case(
        ["score", RESULTS, "--store", "s.db"],
        f"{CONFIG}store URL 's.db' has no scheme: use sqlite:///s.db for a SQLite file, or "
        "redis://host:port/db",
    ),
    "score unknown store scheme": Case(
        ["score", RESULTS, "--store", "postgres://x"],
        f"{CONFIG}unknown store scheme 'postgres' in store URL (EVIDENCE_STORE_URL or "
        f"--store): {STORE_HINT}",
    ),
    "score empty --store": Case(
        ["score", RESULTS, "--store", ""],
        usage("score", f"argument --store: empty value: {STORE_HINT}"),
        usage=True,
    ),
    "score Redis DB not a number": Case(
        ["score", RESULTS, "--store", "redis://127.0.0.1:6379/abc"],
        f"{CONFIG}store URL redis://127.0.0.1:6379/abc: database 'abc' is not a number: "
        f"{REDIS_HINT}",
    ),
    "score Redis DB with a path after it, password masked": Case(
        ["score", RESULTS, "--store", "redis://:secret@127.0.0.1:6379/0/x"],
        f"{CONFIG}store URL redis://:**@127.0.0.1:6379/0/x: database '0/x' is not a number: "
        f"{REDIS_HINT}",
    ),
    "score Redis port not a number": Case(
        ["score", RESULTS, "--store", "redis://127.0.0.1:port/0"],
        f"{CONFIG}store URL redis://127.0.0.1:port/0: the port is not a number from 1 to "
        f"65535: {REDIS_HINT}",
    ),
    "score EVIDENCE_STORE_URL Redis DB not a number": Case(
        ["score", RESULTS],
        f"{CONFIG}EVIDENCE_STORE_URL: redis://127.0.0.1:6379/abc: database 'abc' is not a "
        f"number: {REDIS_HINT}",
        env={"EVIDENCE_STORE_URL": "redis://127.0.0.1:6379/abc"},
    ),
    "score Redis unreachable": Case(
        ["score", RESULTS, "--store", "redis://127.0.0.1:1/0"],
        f"{PROG}: store unavailable: Redis unreachable: {REFUSED}; check --store or "
        "EVIDENCE_STORE_URL",
    ),
    "score empty PATH": Case(
        ["score", ""],
        usage("score", "argument PATH: empty value: name a file, or - for stdin"),
        usage=True,
    ),
    "score PATH is a directory": Case(["score", "."], f"{PROG}: cannot read .: it is a directory"),
    "score PATH missing": Case(
        ["score", "missing.jsonl"], f"{PROG}: cannot read missing.jsonl: No such file or directory"
    ),
    "score PATH unreadable": Case(
        ["score", "unreadable.jsonl"],
        f"{PROG}: cannot read unreadable.jsonl: Permission denied",
        unprivileged=True,
    ),
    "score PATH not UTF-8": Case(
        ["score", os.fsdecode(b"\xff.jsonl")],
        f"{PROG}: cannot read \\xff.jsonl: No such file or directory",
    ),
    "score stdin closed": Case(
        ["score", "-"],
        f"{PROG}: cannot read stdin: it is closed; pass a file instead of -",
        stdin="closed",
    ),
    "score stdout on a full disk": Case(
        ["score", RESULTS], f"{PROG}: cannot write output: No space left on device", stdout="full"
    ),
    "score stdout closed": Case(
        ["score", RESULTS],
        f"{PROG}: cannot write output: stdout is closed; redirect it to a file or /dev/null",
        stdout="closed",
    ),
    "score EVIDENCE_MAX_MESSAGE_BYTES not a number": Case(
        ["score", RESULTS],
        f"{CONFIG}EVIDENCE_MAX_MESSAGE_BYTES: Input should be a valid integer, unable to parse "
        "string as an integer",
        env={"EVIDENCE_MAX_MESSAGE_BYTES": "abc"},
    ),
    "score EVIDENCE_LOG_FORMAT unknown": Case(
        ["score", RESULTS],
        f"{CONFIG}EVIDENCE_LOG_FORMAT: must be 'json' or 'console'",
        env={"EVIDENCE_LOG_FORMAT": "xml"},
    ),
    # --- gate -------------------------------------------------------------------------------
    "gate without a policy": Case(
        ["gate", ROWS],
        f"{CONFIG}no policy configured: set MIN_EVIDENCE_COVERAGE (e.g. 0.85) or "
        "EVIDENCE_POLICY_FILE, or pass --policy / --min-coverage",
    ),
    "gate --policy binary file": Case(["gate", ROWS, "--policy", "binary.toml"], NOT_UTF8_POLICY),
    "gate EVIDENCE_POLICY_FILE Latin-1": Case(
        ["gate", ROWS], LATIN1_POLICY, env={"EVIDENCE_POLICY_FILE": "latin1.toml"}
    ),
    "gate EVIDENCE_POLICY_FILE empty": Case(
        ["gate", ROWS],
        f"{CONFIG}EVIDENCE_POLICY_FILE: empty: name a policy TOML file, or unset it",
        env={"EVIDENCE_POLICY_FILE": ""},
    ),
    "gate --policy missing": Case(
        ["gate", ROWS, "--policy", "missing.toml"],
        f"{CONFIG}cannot read policy file missing.toml: No such file or directory",
    ),
    "gate --policy a directory": Case(
        ["gate", ROWS, "--policy", "."], f"{CONFIG}cannot read policy file .: Is a directory"
    ),
    "gate empty --policy": Case(
        ["gate", ROWS, "--policy", ""],
        usage("gate", "argument --policy: empty value: name a policy TOML file"),
        usage=True,
    ),
    "gate --policy with --min-coverage": Case(
        ["gate", ROWS, "--min-coverage", "0.5", "--policy", POLICY],
        usage("gate", "argument --policy: not allowed with argument --min-coverage"),
        usage=True,
    ),
    "gate --min-coverage out of range": Case(
        ["gate", ROWS, "--min-coverage", "1.5"], f"{CONFIG}--min-coverage='1.5' is outside 0.0..1.0"
    ),
    "gate a binary file is one invalid row": Case(
        ["gate", "binary.dat", "--min-coverage", "0.5"],
        "gate: 1 row: invalid 1; policy cli:0.5; exit 2",
    ),
    "gate an empty file": Case(
        ["gate", "/dev/null", "--min-coverage", "0.5"], f"{PROG}: /dev/null contains no rows"
    ),
    "gate PATH is a directory": Case(
        ["gate", ".", "--min-coverage", "0.5"], f"{PROG}: cannot read .: it is a directory"
    ),
    # --- show, alerts, canary: stores that are not there ------------------------------------
    "show missing store": Case(["show", HASH, "--store", "sqlite:///missing.db"], NO_STORE),
    "show malformed hash": Case(
        ["show", "abc", "--store", "sqlite:///empty.db"],
        f"{PROG}: no outcome recorded for input hash abc (an input hash is 64 lowercase hex "
        "digits, as in a record's input_hash; to look a row up by its case ID: "
        f"{PROG} show --case CASE_ID)",
    ),
    "show store is not SQLite": Case(
        ["show", HASH, "--store", "sqlite:///not-a-db.txt"],
        f"{CONFIG}cannot open SQLite store not-a-db.txt: file is not a database",
    ),
    "show Redis DB not a number": Case(
        ["show", HASH, "--store", "redis://127.0.0.1:6379/abc"],
        f"{CONFIG}store URL redis://127.0.0.1:6379/abc: database 'abc' is not a number: "
        f"{REDIS_HINT}",
    ),
    "show without HASH": Case(
        ["show"], usage("show", "one of the arguments HASH --case is required"), usage=True
    ),
    "alerts missing store": Case(["alerts", "--store", "sqlite:///missing.db"], NO_STORE),
    "alerts --limit 0": Case(
        ["alerts", "--limit", "0"],
        usage("alerts", "argument --limit: must be at least 1, got 0"),
        usage=True,
    ),
    "alerts --limit empty": Case(
        ["alerts", "--limit", ""],
        usage("alerts", "argument --limit: '' is not an integer"),
        usage=True,
    ),
    "alerts Redis unreachable": Case(
        ["alerts", "--store", "redis://127.0.0.1:1/0"],
        f"{PROG}: store unavailable: Redis unreachable: {REFUSED}; check --store or "
        "EVIDENCE_STORE_URL",
    ),
    "canary missing store": Case(["canary", "--store", "sqlite:///missing.db"], NO_STORE),
    "canary default store missing": Case(
        ["canary"],
        f"{CONFIG}no store at evidence-coverage.sqlite3: nothing has been recorded there "
        "(pass --store or set EVIDENCE_STORE_URL to the store `score` or the worker wrote to)",
    ),
    "canary --sample 0": Case(
        ["canary", "--sample", "0"],
        usage("canary", "argument --sample: must be at least 1, got 0"),
        usage=True,
    ),
    # --- publish ----------------------------------------------------------------------------
    **{
        f"publish {scheme}:// broker": Case(
            ["publish", RESULTS],
            f"{CONFIG}EVIDENCE_BROKER_URL: {scheme}://x: unsupported broker scheme {scheme!r} "
            f"({ACCEPTED}): {BROKER_HINT}",
            env={"EVIDENCE_BROKER_URL": f"{scheme}://x"},
        )
        # foo: no transport; kafka and sqs: kombu's, failing on first send; memory: a queue
        # that dies with the process.
        for scheme in ("foo", "kafka", "sqs", "memory")
    },
    "publish broker URL without a scheme": Case(
        ["publish", RESULTS],
        f"{CONFIG}EVIDENCE_BROKER_URL: localhost: not a URL: {BROKER_HINT}",
        env={"EVIDENCE_BROKER_URL": "localhost"},
    ),
    "publish broker Redis DB not a number, password masked": Case(
        ["publish", RESULTS],
        f"{CONFIG}EVIDENCE_BROKER_URL: redis://user:**@127.0.0.1:6379/abc: database 'abc' is "
        f"not a number: {REDIS_HINT}",
        env={"EVIDENCE_BROKER_URL": "redis://user:secret@127.0.0.1:6379/abc"},
    ),
    "publish EVIDENCE_BROKER_URL empty": Case(
        ["publish", RESULTS],
        f"{CONFIG}EVIDENCE_BROKER_URL: empty: {BROKER_HINT}, or unset it for the default",
        env={"EVIDENCE_BROKER_URL": ""},
    ),
    "publish broker unreachable": Case(
        ["publish", RESULTS],
        f"{PROG}: broker unreachable ({REFUSED}.); check EVIDENCE_BROKER_URL",
        env={"EVIDENCE_BROKER_URL": "redis://127.0.0.1:1/0", "EVIDENCE_STORE_URL": LEDGER_DB},
    ),
    "publish ledger store unreachable (noted before the send)": Case(
        ["publish", RESULTS],
        f"{PROG}: store unavailable: Redis unreachable: {REFUSED}; check --store or "
        "EVIDENCE_STORE_URL",
        env={"EVIDENCE_BROKER_URL": "redis://127.0.0.1:1/0"},
    ),
    "publish --store unknown scheme": Case(
        ["publish", RESULTS, "--store", "foo://x"],
        f"{CONFIG}unknown store scheme 'foo' in store URL (EVIDENCE_STORE_URL or --store): "
        f"{STORE_HINT}",
    ),
    "publish PATH missing": Case(
        ["publish", "missing.jsonl"],
        f"{PROG}: cannot read missing.jsonl: No such file or directory",
        env={"EVIDENCE_BROKER_URL": "redis://127.0.0.1:1/0"},
    ),
    "publish --batch 0": Case(
        ["publish", RESULTS, "--batch", "0"],
        usage("publish", "argument --batch: must be at least 1, got 0"),
        usage=True,
    ),
    "publish --sample-rate above 1": Case(
        ["publish", RESULTS, "--sample-rate", "1.5"],
        usage("publish", "argument --sample-rate: '1.5' is outside 0.0..1.0"),
        usage=True,
    ),
    "publish --sample-rate below 0": Case(
        ["publish", RESULTS, "--sample-rate", "-0.1"],
        usage("publish", "argument --sample-rate: '-0.1' is outside 0.0..1.0"),
        usage=True,
    ),
    "publish --sample-rate nan": Case(
        ["publish", RESULTS, "--sample-rate", "nan"],
        usage(
            "publish", "argument --sample-rate: 'nan' is not a finite number: give one in 0.0..1.0"
        ),
        usage=True,
    ),
    "publish --sample-rate inf": Case(
        ["publish", RESULTS, "--sample-rate", "inf"],
        usage(
            "publish", "argument --sample-rate: 'inf' is not a finite number: give one in 0.0..1.0"
        ),
        usage=True,
    ),
    "publish --sample-rate not a number": Case(
        ["publish", RESULTS, "--sample-rate", "abc"],
        usage("publish", "argument --sample-rate: 'abc' is not a number: give one in 0.0..1.0"),
        usage=True,
    ),
    "publish --sample-rate empty": Case(
        ["publish", RESULTS, "--sample-rate", ""],
        usage("publish", "argument --sample-rate: '' is not a number: give one in 0.0..1.0"),
        usage=True,
    ),
    "publish --sample-rate a percentage": Case(
        ["publish", RESULTS, "--sample-rate", "25%"],
        usage("publish", "argument --sample-rate: '25%' is not a number: give one in 0.0..1.0"),
        usage=True,
    ),
    # --- stability --------------------------------------------------------------------------
    "stability missing store": Case(["stability", "--store", "sqlite:///missing.db"], NO_STORE),
    "stability --records missing": Case(
        ["stability", "--records", "missing.jsonl"],
        f"{PROG}: cannot read missing.jsonl: No such file or directory",
    ),
    "stability --records without records": Case(
        ["stability", "--records", ROWS],
        f"{PROG}: {ROWS} contains no evidence_coverage scored records",
    ),
    "stability --store and --records": Case(
        ["stability", "--store", "sqlite:///missing.db", "--records", RESULTS],
        usage("stability", "argument --records: not allowed with argument --store"),
        usage=True,
    ),
    "stability --max-flip-rate above 1": Case(
        ["stability", "--max-flip-rate", "1.5"],
        usage("stability", "argument --max-flip-rate: '1.5' is outside 0.0..1.0"),
        usage=True,
    ),
    "stability --max-flip-rate below 0": Case(
        ["stability", "--max-flip-rate", "-0.1"],
        usage("stability", "argument --max-flip-rate: '-0.1' is outside 0.0..1.0"),
        usage=True,
    ),
    "stability --max-flip-rate nan": Case(
        ["stability", "--max-flip-rate", "nan"],
        usage(
            "stability",
            "argument --max-flip-rate: 'nan' is not a finite number: give one in 0.0..1.0",
        ),
        usage=True,
    ),
    "stability --max-flip-rate not a number": Case(
        ["stability", "--max-flip-rate", "5%"],
        usage("stability", "argument --max-flip-rate: '5%' is not a number: give one in 0.0..1.0"),
        usage=True,
    ),
    "stability --since not a time": Case(
        ["stability", "--since", "yesterday"],
        usage(
            "stability",
            "argument --since: 'yesterday' is not an ISO 8601 time: use e.g. "
            "2026-12-01T12:00:00Z or 2026-12-01",
        ),
        usage=True,
    ),
    "stability --records empty": Case(
        ["stability", "--records", ""],
        usage("stability", "argument --records: empty value: name a file, or - for stdin"),
        usage=True,
    ),
    # --- reconcile --------------------------------------------------------------------------
    "reconcile --older-than not a duration": Case(
        ["reconcile", "--older-than", "ten minutes"],
        usage(
            "reconcile",
            "argument --older-than: 'ten minutes' is not a duration: use seconds (90) or a "
            "number with s, m, h or d (10m)",
        ),
        usage=True,
    ),
    "reconcile store unreachable": Case(
        ["reconcile"],
        f"{PROG}: store unavailable: Redis unreachable: {REFUSED}; check --store or "
        "EVIDENCE_STORE_URL",
        env={"EVIDENCE_STORE_URL": "redis://127.0.0.1:1/0"},
    ),
    # --- bench (the cheap refusals, before any worker starts) --------------------------------
    "bench unknown phase": Case(
        ["bench", "--phases", "nope"],
        f"{PROG}: --phases: unknown phase(s) nope; use noop,score,batch",
    ),
    "bench no phase": Case(
        ["bench", "--phases", ","],
        f"{PROG}: --phases: no phase named; use noop,score,batch or a part of it",
    ),
    "bench unknown broker scheme": Case(
        ["bench", "--broker", "foo://x"],
        f"{CONFIG}--broker: foo://x: unsupported broker scheme 'foo' ({ACCEPTED}): {BROKER_HINT}",
    ),
    "bench --worker-checkout not a checkout": Case(
        ["bench", "--worker-checkout", "/nonexistent"],
        f"{PROG}: --worker-checkout: /nonexistent holds no worker/app.py: give a checkout",
    ),
    "bench empty --broker": Case(
        ["bench", "--broker", ""],
        usage("bench", "argument --broker: empty value: use redis://host:port/db"),
        usage=True,
    ),
    "bench EVIDENCE_BENCH_BROKER_URL Redis DB not a number": Case(
        ["bench"],
        f"{CONFIG}EVIDENCE_BENCH_BROKER_URL: redis://127.0.0.1:6379/x: database 'x' is not a "
        f"number: {REDIS_HINT}",
        env={"EVIDENCE_BENCH_BROKER_URL": "redis://127.0.0.1:6379/x"},
    ),
    "bench --messages 0": Case(
        ["bench", "--messages", "0"],
        usage("bench", "argument --messages: must be at least 1, got 0"),
        usage=True,
    ),
    # --- report -----------------------------------------------------------------------------
    "report a binary file": Case(
        ["report", "binary.dat"],
        f"{PROG}: binary.dat contains no evidence_coverage records (0 other lines, 1 unreadable)",
    ),
    "report an empty file": Case(
        ["report", "/dev/null"],
        f"{PROG}: /dev/null contains no evidence_coverage records (0 other lines, 0 unreadable)",
    ),
    "report PATH is a directory": Case(
        ["report", "."], f"{PROG}: cannot read .: it is a directory"
    ),
    "report PATH unreadable": Case(
        ["report", "unreadable.jsonl"],
        f"{PROG}: cannot read unreadable.jsonl: Permission denied",
        unprivileged=True,
    ),
    "report empty --html": Case(
        ["report", RESULTS, "--html", ""],
        usage("report", "argument --html: empty value: name the HTML file to write"),
        usage=True,
    ),
    # --- schema -----------------------------------------------------------------------------
    "schema --write an existing file": Case(
        ["schema", "--write", "a-file"],
        f"{PROG}: cannot write schemas into a-file: it is not a directory",
    ),
    "schema --write under a file": Case(
        ["schema", "--write", "a-file/schemas"],
        f"{PROG}: cannot write schemas into a-file/schemas: Not a directory",
    ),
    "schema --write empty": Case(
        ["schema", "--write", ""],
        usage("schema", "argument --write: empty value: name a directory"),
        usage=True,
    ),
    "schema stdout on a full disk": Case(
        ["schema"], f"{PROG}: cannot write output: No space left on device", stdout="full"
    ),
    "schema stdout closed": Case(
        ["schema"],
        f"{PROG}: cannot write output: stdout is closed; redirect it to a file or /dev/null",
        stdout="closed",
    ),
    # --- the command line itself ------------------------------------------------------------
    "--help on a full disk": Case(
        ["--help"], f"{PROG}: cannot write output: No space left on device", stdout="full"
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_line_and_its_exit_code(case: Case, tmp_path: Path) -> None:
    """Exit code, one exact stderr line (and the --help line, for usage errors), no
    traceback."""
    check(case, tmp_path)


# Each command that writes to stdout, for a reader that left before reading any of it
# (`| head`); alerts and report read what score wrote first (scored.db, records.jsonl).
PIPED: dict[str, list[str]] = {
    "score": ["score", RESULTS, "--store", "sqlite:///s.db"],
    "gate": ["gate", ROWS, "--min-coverage", "0.5"],
    "alerts": ["alerts", "--store", "sqlite:///scored.db"],
    "report": ["report", "records.jsonl"],
    "schema": ["schema"],
    "help": ["--help"],
    "score help": ["score", "--help"],
}


@pytest.mark.parametrize("args", PIPED.values(), ids=PIPED.keys())
@pytest.mark.parametrize("stderr_too", [False, True], ids=["stdout", "stdout and stderr"])
def test_a_reader_that_goes_away_stops_the_command_quietly(
    args: list[str], stderr_too: bool, tmp_path: Path
) -> None:
    """`| head`: exit 141 (as a shell reports SIGPIPE), no traceback, no "Exception ignored"
    (which would come with exit 120), also when the summary on stderr goes into the pipe."""
    make_files(tmp_path)
    if args[0] in {"alerts", "report"}:
        scored = run_in_process(["score", RESULTS, "--store", "sqlite:///scored.db"], tmp_path)
        (tmp_path / "records.jsonl").write_text(scored.stdout, encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", *args],
        cwd=tmp_path,
        env=clean_env({}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr_too else subprocess.PIPE,
    )
    assert child.stdout is not None
    child.stdout.close()  # before the child has started writing: every write fails
    _, stderr = child.communicate(timeout=30)
    stderr_text = (stderr or b"").decode(errors="replace")

    assert child.returncode == CLOSED_PIPE, stderr_text
    assert "Traceback" not in stderr_text
    assert "Exception ignored" not in stderr_text
