"""`evidence-worker reconcile` on a SQLite store: the lines, the summary, the exit code."""

from __future__ import annotations

import argparse
import json
import socket
from datetime import timedelta
from pathlib import Path

import pytest

from tests.factories import age_ledger, ledger_entry
from worker.cli import main
from worker.cli.exit_codes import OK, UNRECORDED
from worker.cli.reconcile import duration
from worker.stores.sqlite.sqlite_store import SQLiteStore

HASH = "ab" * 32  # the factory's
SECRET = '{"answer": "not printed"}'


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), ("2h", 7200), ("1d", 86400), ("0.5m", 30), ("0", 0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "10 minutes", "-5m", "5w", "m"])
def test_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a duration"):
        duration(text)


def note(path: Path, *ages: timedelta) -> None:
    """One entry per age (oldest first), each that old by the store's clock."""
    store = SQLiteStore(path)
    for n, age in enumerate(ages):
        store.note_published(
            [ledger_entry(f"task-{n}", case_id=f"case-{n}", body='{"answer": "not printed"}')]
        )
        younger = ages[n + 1] if n + 1 < len(ages) else timedelta(0)
        age_ledger(store, age - younger)
    store.close()


def test_unrecorded_messages_are_one_line_each_and_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.sqlite3"
    note(path, timedelta(minutes=30), timedelta(minutes=11), timedelta(minutes=2))

    code = main(["reconcile", "--store", f"sqlite:///{path}"])

    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == UNRECORDED
    assert [(line["case_id"], line["task_id"], line["position"]) for line in lines] == [
        ("case-0", "task-0", 0),
        ("case-1", "task-1", 0),
    ]
    assert {line["event"] for line in lines} == {"evidence_coverage.unrecorded"}
    assert all(line["input_hash"] == HASH and line["age_seconds"] > 600 for line in lines)
    assert "not printed" not in out + err  # never the message's text
    assert err.startswith(
        f"reconcile: read the ledger of sqlite:///{path} on {socket.gethostname()}\n"
    )
    assert err.splitlines()[1].startswith("reconcile: 2 messages published before ")
    assert err.endswith(
        f" were neither recorded nor dead-lettered; 2 listed (store sqlite:///{path})\n"
    )


def test_nothing_unrecorded_is_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.sqlite3"
    note(path, timedelta(minutes=2))

    code = main(["reconcile", "--store", f"sqlite:///{path}", "--older-than", "5m"])

    out, err = capsys.readouterr()
    assert (code, out) == (OK, "")
    assert "reconcile: 0 messages published before " in err
