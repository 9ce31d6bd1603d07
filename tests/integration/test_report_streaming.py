"""`report --store` streams: its peak memory does not grow with the store (issue 39, item 4).

Needs no server (SQLite), but takes about a minute: marked integration so the fast lane stays
fast. The stores are filled synthetically: 200,000 first outcomes through the scoring path
would take many minutes, so the example run's real stored rows are copied with SQL, each copy
with its own input hash, case ID and recorded_at (spread over 30 days, so the per-day table
is filled too).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from worker.cli import main

pytestmark = pytest.mark.integration

SMALL, LARGE = 20_000, 200_000
# Copies of the seed's rows, the i-th of its (k)-th row: a hash, case ID and time of its own.
# total_attempts 1: each copy is a first outcome with no later attempt (no history rows).
COPY = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
INSERT INTO outcomes (input_hash, first_attempt, total_attempts, expires_at, outcome, shared)
SELECT substr(s.input_hash, 1, 48) || printf('%016x', n.i),
    json_set(
        s.first_attempt,
        '$.case_id', json_extract(s.first_attempt, '$.case_id') || '-' || n.i,
        '$.recorded_at', strftime(
            '%Y-%m-%dT%H:%M:%fZ', '2026-11-01', '+' || (n.i % 30) || ' days',
            '+' || (n.i % 86400) || ' seconds'
        )
    ),
    1, NULL, s.outcome, s.shared
FROM n JOIN seed AS s ON s.k = n.i % (SELECT count(*) FROM seed)
"""


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store that `score` wrote for the example run (with its alert)."""
    path = tmp_path_factory.mktemp("seed") / "seed.sqlite3"
    main(
        [
            "score",
            str(EXAMPLES / "attribution-results.jsonl"),
            "--store",
            f"sqlite:///{path}",
            "--policy",
            str(EXAMPLES / "policy.toml"),
            "--quiet",
        ]
    )
    return path


def filled(seed: Path, path: Path, copies: int) -> str:
    """A copy of the seed store at `path` with `copies` more first outcomes; its URL."""
    with closing(sqlite3.connect(seed)) as source, closing(sqlite3.connect(path)) as db:
        source.backup(db)
        db.execute(
            "CREATE TEMP TABLE seed AS"
            " SELECT row_number() OVER (ORDER BY id) - 1 AS k, * FROM outcomes"
        )
        db.execute(COPY, (copies,))
        db.commit()
    return f"sqlite:///{path}"


def test_report_store_peak_memory_does_not_grow_with_the_store(seed: Path, tmp_path: Path) -> None:
    """Ten times the first outcomes: the report's peak resident memory stays within 20%."""
    with closing(sqlite3.connect(seed)) as db:
        seed_rows = db.execute("SELECT count(*) FROM outcomes").fetchone()[0]
    runs = {}
    for copies in (SMALL, LARGE):
        out = (tmp_path / f"{copies}.json").open("wb")
        command = [sys.executable, "-m", "worker.cli", "report", "--json", "--store"]
        url = filled(seed, tmp_path / f"{copies}.sqlite3", copies)
        runs[copies] = (subprocess.Popen([*command, url], stdout=out), out)
    peaks, records = {}, {}
    for copies, (process, out) in runs.items():
        # wait4: this child's own peak, not the largest of every child this process had.
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.close()
        assert process.returncode == 0
        peaks[copies] = usage.ru_maxrss  # KiB on Linux
        records[copies] = json.loads((tmp_path / f"{copies}.json").read_bytes())["records"]

    assert records == {SMALL: SMALL + seed_rows, LARGE: LARGE + seed_rows}
    assert peaks[LARGE] <= peaks[SMALL] * 1.2, peaks
