"""The read commands open a SQLite store for reading only: a store on a read-only mount (here,
a directory and file without write permission, run without the capability that overrides
them) is read as a writable one is, and left as it was: no -wal or -shm file, same bytes.

The writable store is read in-process; the read-only one by `python -m worker.cli` without
the capabilities that let root write anyway (one process a command)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bad_input import Ran, clean_env, command_prefix, run_in_process
from tests.conftest import EXAMPLES

EXAMPLE = EXAMPLES / "attribution-results.jsonl"
READ_COMMANDS = [
    ["show", "--case", "refund-001"],
    ["explain", "--case", "refund-001"],
    ["alerts"],
    ["canary", "--all"],
    ["dead-letters", "list"],
    ["records"],
    ["report", "--json"],
    ["stability"],
    [
        "compare",
        "--legacy",
        str(EXAMPLES / "legacy-scores.jsonl"),
        "--legacy-threshold",
        "0.7",
        "--min-coverage",
        "0.85",
    ],
]


def unprivileged(args: list[str], cwd: Path) -> Ran:
    run = subprocess.run(
        [*command_prefix(True), sys.executable, "-m", "worker.cli", *args],
        cwd=cwd,
        env=clean_env({}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Ran(run.returncode, run.stdout, run.stderr)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The example scored into two copies of one store: one writable, one read-only."""
    writable, locked = tmp_path / "rw", tmp_path / "ro"
    writable.mkdir()
    scored = run_in_process(["score", str(EXAMPLE), "--store", "sqlite:///store.db"], writable)
    assert scored.code == 3, scored.stderr
    locked.mkdir()
    (locked / "store.db").write_bytes((writable / "store.db").read_bytes())
    (locked / "store.db").chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    yield writable, locked
    locked.chmod(stat.S_IRWXU)


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_a_read_only_store_reads_as_a_writable_one_and_is_left_as_it_was(
    stores: tuple[Path, Path], command: list[str]
) -> None:
    writable, locked = stores
    store = locked / "store.db"
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    args = [*command, "--store", "sqlite:///store.db"]

    expected = run_in_process(args, writable)
    got = unprivileged(args, locked)

    assert got == expected
    assert "Traceback" not in got.stderr
    assert expected.stdout + expected.stderr  # each has something to say of the example
    assert sorted(os.listdir(locked)) == ["store.db"]
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
