"""Stores written before triage (tests/fixtures/store-28e2bf7) stay readable: `show`,
`alerts`, `canary` and `report` read them, and scoring goes on in them (SPEC §9 added fields
to attempts and records; none of those is required when reading)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import EXAMPLES, Run
from tests.integration.store_factories import REDIS
from tests.integration.store_outputs import restore_redis_keys

pytestmark = pytest.mark.integration

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "store-28e2bf7"
POLICY = EXAMPLES / "policy.toml"


def old_redis_keys() -> dict[str, Any]:
    return json.loads((OLD / "redis-keys.json").read_text())


def old_hashes() -> list[str]:
    return sorted(
        key.split("{")[1].split("}")[0] for key in old_redis_keys() if key.endswith(":outcome")
    )


@pytest.fixture(params=["sqlite", REDIS])
def old_store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """The URL of a store holding exactly what main at 28e2bf7 wrote."""
    if request.param == "sqlite":
        path = tmp_path / "old.sqlite3"
        db = sqlite3.connect(path)
        db.executescript((OLD / "store.sql").read_text())
        db.close()
        return f"sqlite:///{path}"
    client: redis.Redis = request.getfixturevalue("redis_client")
    prefix: str = request.getfixturevalue("key_prefix")
    monkeypatch.setenv("EVIDENCE_KEY_PREFIX", prefix)
    restore_redis_keys(client, prefix, old_redis_keys())
    return request.getfixturevalue("redis_url")


def test_show_reads_every_old_hash(cli: Callable[..., Run], old_store: str) -> None:
    """Each hash shows its first attempt and its attempts, without the fields added since."""
    shown = [cli("show", input_hash, "--store", old_store) for input_hash in old_hashes()]

    assert [run.code for run in shown] == [0] * len(old_hashes())
    histories = [json.loads(run.out) for run in shown]
    assert sum(h["total_attempts"] for h in histories) == 20
    for history in histories:
        for attempt in [history["first"], *history["attempts"]]:
            assert (attempt["citations"], attempt["findings"], attempt["owner"]) == (
                None,
                None,
                None,
            )
            assert (attempt["contract_drift"], attempt["contract_version"]) == (False, None)


def test_alerts_and_canary_read_the_old_store(cli: Callable[..., Run], old_store: str) -> None:
    alerts = cli("alerts", "--store", old_store)
    canary = cli("canary", "--all", "--store", old_store)

    assert alerts.code == 3
    assert len(alerts.lines) == 4
    assert {line["input_hash"] for line in alerts.lines} == {
        "f4a60bffff38ff313c11ab8913e01295481e46a154e779215d15bb8a87825a44",
        "f514f7862c676eb82639bf1fe0bfeb407b97500343407388e28712c7695db920",
    }
    assert canary.code == 0, canary.err


def test_scoring_goes_on_in_an_old_store(cli: Callable[..., Run], old_store: str) -> None:
    """The same file again: every scored row is a hit or the known conflict, and the
    new attempts (with triage fields) read back beside the old ones."""
    run = cli("score", OLD / "run.jsonl", "--store", old_store, "--policy", POLICY)

    caches = [r["cache"] for r in run.records if r["event"] == "evidence_coverage.scored"]
    assert sorted(caches) == ["conflict"] * 2 + ["hit"] * 8
    refund = cli(
        "show",
        "f514f7862c676eb82639bf1fe0bfeb407b97500343407388e28712c7695db920",
        "--store",
        old_store,
    )
    history = json.loads(refund.out)
    newest = history["attempts"][-1]
    assert history["first"]["citations"] is None
    assert [c["claim_id"] for c in newest["citations"]] == [
        "refund-window",
        "refund-method",
        "support-channel",
    ]
    assert newest["missing_claim_ids"] == ["refund-method", "support-channel"]


def test_report_reads_old_records(cli: Callable[..., Run]) -> None:
    """Record lines written before triage (no missing_claim_ids, findings, contract_drift)."""
    run = cli("report", OLD / "records.jsonl", "--json")

    assert run.code == 0, run.err
    report = json.loads(run.out)
    assert (report["records"], report["nondeterminism_alerts"]) == (12, 2)
    owners: dict[str, int] = {}
    for version in report["contract_versions"]:
        for group in version["groups"]:
            for owner, count in group["owners"].items():
                owners[owner] = owners.get(owner, 0) + count
    assert owners == {
        "attribution": 0,
        "retrieval": 0,
        "product": 5,
        "evaluation-data": 4,
        "release-rule": 0,
    }


def test_old_cases_are_found_on_sqlite_and_on_redis_once_recorded_again(
    cli: Callable[..., Run], old_store: str
) -> None:
    """A SQLite file is indexed from its attempts as it is migrated; Redis keeps no index of
    what was recorded before it existed, so a case is found there once its hash is recorded
    again (docs/triage.md: looking a row up)."""
    before = cli("show", "--case", "refund-002-retry", "--store", old_store)
    cli("score", OLD / "run.jsonl", "--store", old_store, "--policy", POLICY)
    after = cli("show", "--case", "refund-002-retry", "--store", old_store)

    retry_hash = "f4a60bffff38ff313c11ab8913e01295481e46a154e779215d15bb8a87825a44"
    if old_store.startswith("sqlite"):
        assert before.code == 0, before.err
        assert [history["input_hash"] for history in json.loads(before.out)] == [retry_hash]
    else:
        assert (before.code, before.err) == (
            2,
            "evidence-worker: no input hash recorded for case refund-002-retry\n",
        )
    assert [history["input_hash"] for history in json.loads(after.out)] == [retry_hash]


def test_explain_says_what_an_old_attempt_does_not_keep(
    cli: Callable[..., Run], old_store: str
) -> None:
    retry_hash = "f4a60bffff38ff313c11ab8913e01295481e46a154e779215d15bb8a87825a44"

    run = cli("explain", retry_hash, "--store", old_store, "--policy", POLICY)

    assert run.code == 3  # its attempts disagree: the nondeterminism the fixture holds
    lines = run.out.splitlines()
    assert lines[0] == "case: refund-002 (also recorded for: refund-002-rerun, refund-002-retry)"
    assert lines[2] == "contract version: not kept by this store"
    assert lines[6:9] == [
        "status: fail under policy 2026-12-01, group default, threshold 0.85 (no group kept"
        " by this attempt: default assumed)",
        "owner: not known: recorded before findings were kept (score the message again)",
        "missing claims: refund-method (no findings kept by this store: recorded before triage)",
    ]
