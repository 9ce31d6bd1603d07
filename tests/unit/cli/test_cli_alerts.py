"""`evidence-worker alerts --since`: the alerts raised at or after a time, from the stream
that is the source of truth, on an embedded SQLite store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from contracts import Alert
from tests import factories
from tests.conftest import FIXED_NOW, Run
from worker.cli import main
from worker.stores.sqlite.sqlite_store import SQLiteStore

HOUR = timedelta(hours=1)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A SQLite store holding alerts raised 2 h before, 1 h before and at FIXED_NOW."""
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    for n, raised_at in enumerate([FIXED_NOW - 2 * HOUR, FIXED_NOW - HOUR, FIXED_NOW], start=1):
        store.record(f"{n:064x}", factories.attempt(), now=raised_at)
        store.record(f"{n:064x}", factories.attempt(value=0.5), now=raised_at)
    store.close()
    return f"sqlite:///{path}"


def test_since_lists_the_alerts_raised_at_or_after_it(
    cli: Callable[..., Run], store_url: str
) -> None:
    """Since an hour before FIXED_NOW: the 2nd and 3rd alerts as JSON lines, exit 3."""
    run = cli("alerts", "--store", store_url, "--since", "2026-12-01T11:00:00Z")

    assert (run.code, run.hashes) == (3, [f"{2:064x}", f"{3:064x}"])
    assert Alert.model_validate_json(run.out.splitlines()[0]).raised_at == FIXED_NOW - HOUR
    assert run.err == (
        "alerts: 2 nondeterminism, 0 contract drift raised since 2026-12-01T11:00:00+00:00"
        f" (store {store_url})\n"
    )


def test_since_without_an_offset_is_utc(cli: Callable[..., Run], store_url: str) -> None:
    """A time with no offset means UTC: the same alerts as with Z."""
    run = cli("alerts", "--store", store_url, "--since", "2026-12-01T11:00:00")

    assert run.hashes == [f"{2:064x}", f"{3:064x}"]


def test_since_with_an_offset_compares_instants(cli: Callable[..., Run], store_url: str) -> None:
    """12:00+01:00 is 11:00 UTC."""
    run = cli("alerts", "--store", store_url, "--since", "2026-12-01T12:00:00+01:00")

    assert run.hashes == [f"{2:064x}", f"{3:064x}"]


def test_since_with_more_than_the_limit_says_so(cli: Callable[..., Run], store_url: str) -> None:
    """Three alerts since, limit 2: the newest two, and a note to raise --limit."""
    run = cli("alerts", "--store", store_url, "--since", "2026-12-01", "--limit", "2")

    assert run.hashes == [f"{2:064x}", f"{3:064x}"]
    assert run.err == (
        "alerts: 2 nondeterminism, 0 contract drift raised since 2026-12-01T00:00:00+00:00"
        f" (the newest 2; raise --limit to see more) (store {store_url})\n"
    )


def test_since_after_every_alert_lists_none_and_exits_0(
    cli: Callable[..., Run], store_url: str
) -> None:
    """Nothing raised since: no lines, exit 0."""
    run = cli("alerts", "--store", store_url, "--since", "2026-12-01T12:00:01Z")

    assert (run.code, run.out) == (0, "")
    assert run.err == (
        "alerts: 0 nondeterminism, 0 contract drift raised since 2026-12-01T12:00:01+00:00"
        f" (store {store_url})\n"
    )


def test_since_that_is_not_a_time_is_a_usage_error(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --since exits 2 naming the value and an example."""
    with pytest.raises(SystemExit) as exit_info:
        main(["alerts", "--store", store_url, "--since", "yesterday"])

    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "evidence-worker alerts: error: argument --since: 'yesterday' is not an ISO 8601 time:"
        " use e.g. 2026-12-01T12:00:00Z or 2026-12-01",
        "run 'evidence-worker alerts --help' for the options",
    ]
