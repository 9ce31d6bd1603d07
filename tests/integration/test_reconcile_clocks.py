"""`evidence-worker reconcile` when a publisher's clock is wrong, on every store a URL names:
the ledger is stamped, trimmed and read by the store's clock, so reconcile lists exactly the
lost messages, whatever the publishers' clocks say."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from tests.factories import age_ledger, ledger_entry, publisher_clock
from worker.cli import main
from worker.cli.exit_codes import OK, UNRECORDED
from worker.settings import Settings
from worker.stores import ResultStore, open_store

pytestmark = pytest.mark.integration

LOST = 500
SUMMARY = re.compile(
    r"reconcile: read the ledger of [^\n]+\n"
    r"reconcile: (?P<count>[0-9,]+) messages? published before (?P<before>\S+) (?:was|were) "
    r"neither recorded nor dead-lettered; (?P<listed>[0-9,]+) listed \(store [^)\n]+\)\n"
)


@dataclass
class Where:
    url: str
    prefix: str


@pytest.fixture(params=["sqlite", "redis", "cluster"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """Every store kind a URL can name, each empty, under a prefix of its own."""
    if request.param == "sqlite":
        return Where(f"sqlite:///{tmp_path / 'ledger.sqlite3'}", "evidence")
    if request.param == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        return Where(cluster.url, request.getfixturevalue("cluster_prefix"))
    return Where(request.getfixturevalue("redis_url"), request.getfixturevalue("key_prefix"))


@pytest.fixture
def store(where: Where, monkeypatch: pytest.MonkeyPatch) -> Iterator[ResultStore]:
    monkeypatch.setenv("EVIDENCE_KEY_PREFIX", where.prefix)
    opened = open_store(where.url, Settings(key_prefix=where.prefix))
    yield opened
    opened.close()


def reconcile(
    where: Where, capsys: pytest.CaptureFixture[str], *options: str
) -> tuple[int, list[dict[str, object]], str]:
    capsys.readouterr()
    code = main(["reconcile", "--store", where.url, *options])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def test_a_publisher_25_hours_ahead_leaves_every_lost_message_listed(
    where: Where,
    store: ResultStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's repro: 500 lost messages 20 minutes old, then a publisher whose clock ran
    25 h ahead publishes 10. reconcile used to print "0 listed" and exit 0; it lists the 500,
    with their ages by the store's clock, also when it runs on that publisher's machine."""
    lost = [ledger_entry(f"lost-{n:03d}", case_id=f"lost-{n:03d}") for n in range(LOST)]
    store.note_published(lost)
    age_ledger(store, timedelta(minutes=20))
    ahead = publisher_clock(monkeypatch, timedelta(hours=25))
    store.note_published([ledger_entry(f"ahead-{n}", published_at=ahead) for n in range(10)])

    code, lines, err = reconcile(where, capsys, "--older-than", "10m")

    assert code == UNRECORDED
    assert sorted(str(line["case_id"]) for line in lines) == [f"lost-{n:03d}" for n in range(LOST)]
    assert all(1_200 <= float(str(line["age_seconds"])) < 1_260 for line in lines)
    summary = SUMMARY.fullmatch(err)
    assert summary is not None, err
    assert (summary["count"], summary["listed"]) == ("500", "500")


def test_a_publisher_2_hours_behind_makes_no_waiting_message_look_lost(
    where: Where,
    store: ResultStore,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """100 messages just published by a publisher whose clock is 2 h behind, still waiting in
    the queue: reconcile --older-than 10m used to list all 100; it lists none until they are
    10 minutes old by the store's clock."""
    behind = publisher_clock(monkeypatch, timedelta(hours=-2))
    store.note_published([ledger_entry(f"behind-{n:03d}", published_at=behind) for n in range(100)])

    code, lines, err = reconcile(where, capsys, "--older-than", "10m")

    assert (code, lines) == (OK, [])
    summary = SUMMARY.fullmatch(err)
    assert summary is not None, err
    assert (summary["count"], summary["listed"]) == ("0", "0")

    age_ledger(store, timedelta(minutes=11))
    code, lines, _ = reconcile(where, capsys, "--older-than", "10m")

    assert code == UNRECORDED
    assert len(lines) == 100
    assert all(660 <= float(str(line["age_seconds"])) < 720 for line in lines)
