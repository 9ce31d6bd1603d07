"""`records` and `report --store` fed bad input (issue 25): one clear line on stderr (after the
help, for usage errors), exit 2, and nothing created or changed. Run by the harness of
test_cli_bad_input (tests/bad_input.py), in a directory holding its files."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_input import CONFIG, PROG, RESULTS, Case, check, clean_env, run_in_process
from tests.unit.cli.test_cli_bad_input import NO_STORE, REFUSED, usage
from worker.cli.exit_codes import CLOSED_PIPE

EMPTY = "sqlite:///empty.db"  # a store that is there, with nothing recorded
CASES: dict[str, Case] = {
    "records bad --since": Case(
        ["records", "--store", EMPTY, "--since", "yesterday"],
        usage(
            "records",
            "argument --since: 'yesterday' is not an ISO 8601 time: use e.g. "
            "2026-12-01T12:00:00Z or 2026-12-01",
        ),
        usage=True,
    ),
    "records bad --until": Case(
        ["records", "--store", EMPTY, "--until", "2026-13-01"],
        usage(
            "records",
            "argument --until: '2026-13-01' is not an ISO 8601 time: use e.g. "
            "2026-12-01T12:00:00Z or 2026-12-01",
        ),
        usage=True,
    ),
    "records --until before --since": Case(
        ["records", "--store", EMPTY, "--since", "2026-12-02", "--until", "2026-12-01"],
        f"{PROG}: --until 2026-12-01T00:00:00+00:00 is not after --since "
        "2026-12-02T00:00:00+00:00: no row could match",
    ),
    "records unknown --format": Case(
        ["records", "--store", EMPTY, "--format", "xml"],
        usage(
            "records",
            "argument --format: invalid choice: 'xml' (choose from 'table', 'jsonl', 'csv')",
        ),
        usage=True,
    ),
    "records unknown --owner": Case(
        ["records", "--store", EMPTY, "--owner", "nobody"],
        usage(
            "records",
            "argument --owner: invalid choice: 'nobody' (choose from 'evaluation-data', "
            "'attribution', 'retrieval', 'product', 'release-rule')",
        ),
        usage=True,
    ),
    "records empty --case-prefix": Case(
        ["records", "--store", EMPTY, "--case-prefix", ""],
        usage("records", "argument --case-prefix: empty value: give the start of a case ID"),
        usage=True,
    ),
    "records missing store": Case(["records", "--store", "sqlite:///missing.db"], NO_STORE),
    "records not a database": Case(
        ["records", "--store", "sqlite:///not-a-db.txt"],
        f"{CONFIG}cannot open SQLite store not-a-db.txt: file is not a database",
    ),
    "records Redis down": Case(
        ["records", "--store", "redis://127.0.0.1:1/0"],
        f"{PROG}: store unavailable: Redis unreachable: {REFUSED}; check --store or "
        "EVIDENCE_STORE_URL",
    ),
    "report --store missing store": Case(["report", "--store", "sqlite:///missing.db"], NO_STORE),
    "report --store empty store": Case(
        ["report", "--store", EMPTY],
        f"{PROG}: {EMPTY} contains no evidence_coverage records (0 other lines, 0 unreadable)",
    ),
    "report --store and PATH": Case(
        ["report", "--store", EMPTY, "records.jsonl"],
        usage("report", "argument PATH: not allowed with argument --store"),
        usage=True,
    ),
    "report neither PATH nor --store": Case(
        ["report"],
        usage("report", "one of the arguments PATH --store is required"),
        usage=True,
    ),
    "report PATH with a policy": Case(
        ["report", "records.jsonl", "--min-coverage", "0.8"],
        f"{PROG}: --policy and --min-coverage apply to report --store only: a record file's "
        "rows were decided when they were written",
    ),
}


def _snapshot(directory: Path) -> dict[str, str]:
    """Every readable file in `directory` with the SHA-256 of its bytes."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.iterdir())
        if path.is_file() and os.access(path, os.R_OK) and path.stat().st_mode & 0o444
    }


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_bad_input_is_one_line_exit_2_and_changes_nothing(case: Case, tmp_path: Path) -> None:
    """The harness's check; run once more on the files it left: no store is created where
    there was none (missing.db), and no file changes."""
    check(case, tmp_path)
    before = _snapshot(tmp_path)

    again = run_in_process(case.args, tmp_path, case.env)

    assert again.code == case.code
    assert not (tmp_path / "missing.db").exists()
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("output", ["jsonl", "csv"])
def test_a_reader_that_goes_away_stops_records_quietly(output: str, tmp_path: Path) -> None:
    """`records | head`: exit 141, no traceback, no "Exception ignored", as every command."""
    run_in_process(["score", RESULTS, "--store", "sqlite:///s.db"], tmp_path)
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "worker.cli",
            "records",
            "--store=sqlite:///s.db",
            f"--format={output}",
        ],
        cwd=tmp_path,
        env=clean_env({}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    child.stdout.close()  # before the child has started writing: every write fails
    _, stderr = child.communicate(timeout=30)
    stderr_text = stderr.decode(errors="replace")

    assert child.returncode == CLOSED_PIPE, stderr_text
    assert "Traceback" not in stderr_text
    assert "Exception ignored" not in stderr_text
