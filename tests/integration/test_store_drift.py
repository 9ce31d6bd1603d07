"""Contract drift and alerts raised once (SPEC §9), on every store: SQLite, fakeredis and a
real Redis. The required set is kept per (contract version, case ID) in the call that records
the outcome; each conflict and each drift is alerted once however often it is met again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from contracts import Alert, Attempt
from contracts.record_models import ContractDriftAlert
from tests import factories
from tests.conftest import FIXED_NOW
from tests.integration.store_factories import CLUSTER, REDIS, StoreFactory, store_factory
from worker.stores import ResultStore
from worker.stores.redis.redis_store import RedisStore

VERSION = "support-faq/2026-10"
THREE = ["refund-window", "refund-method", "support-channel"]
FIVE = [*THREE, "refund-fee", "refund-receipt"]
LATER = FIXED_NOW + timedelta(minutes=1)


def judged(n: int, required: list[str], **fields: Any) -> Attempt:
    """Attempt n of case refund-001 under VERSION with this required set, all but
    refund-method supported, as the worker records it (with a contract version)."""
    supported = [claim for claim in required if claim != "refund-method"]
    values: dict[str, Any] = {
        "case_id": "refund-001",
        "task_id": f"task-{n}",
        "contract_version": VERSION,
        "required_claim_ids": required,
        "supported_claim_ids": supported,
        "value": len(supported) / len(required),
        "reason": f"r{len(required)}",
        "owner": "product",
        **fields,
    }
    return factories.attempt(**values)


@pytest.fixture(params=["sqlite", "fakeredis", REDIS, CLUSTER])
def drift_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ResultStore]:
    with store_factory(request.param, request, tmp_path) as make:
        yield make()


@pytest.fixture(params=["sqlite", "fakeredis", REDIS, CLUSTER])
def make_drift_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    with store_factory(request.param, request, tmp_path) as make:
        yield make


def drift_alerts(store: ResultStore) -> list[ContractDriftAlert]:
    found = store.alerts(kind="contract_drift")
    assert all(isinstance(alert, ContractDriftAlert) for alert in found)
    return [alert for alert in found if isinstance(alert, ContractDriftAlert)]


def test_another_required_set_for_a_known_pair_is_drift_alerted_once(
    drift_store: ResultStore,
) -> None:
    first = drift_store.record("a" * 64, judged(1, THREE), now=FIXED_NOW)
    drifted = drift_store.record("b" * 64, judged(2, FIVE), now=LATER)
    again = drift_store.record("b" * 64, judged(3, FIVE), now=LATER)

    assert (first.cache, first.contract_drift, first.drift) == ("miss", False, None)
    assert (drifted.cache, drifted.contract_drift) == ("miss", True)
    assert drifted.drift == ContractDriftAlert(
        case_id="refund-001",
        contract_version=VERSION,
        first_required_claim_ids=sorted(THREE),
        required_claim_ids=sorted(FIVE),
        added_claim_ids=["refund-fee", "refund-receipt"],
        removed_claim_ids=[],
        first_input_hash="a" * 64,
        input_hash="b" * 64,
        first_task_id="task-1",
        task_id="task-2",
        raised_at=LATER,
    )
    assert (again.cache, again.contract_drift, again.drift) == ("hit", True, None)
    assert drift_alerts(drift_store) == [drifted.drift]
    history = drift_store.history("b" * 64)
    assert history is not None
    assert [(a.contract_drift, a.owner) for a in history.attempts] == [
        (True, "evaluation-data"),
        (True, "evaluation-data"),
    ]
    kept = drift_store.history("a" * 64)
    assert kept is not None
    assert (kept.first.contract_drift, kept.first.owner) == (False, "product")


def test_each_distinct_required_set_is_its_own_drift(drift_store: ResultStore) -> None:
    drift_store.record("a" * 64, judged(1, THREE), now=FIXED_NOW)
    five = drift_store.record("b" * 64, judged(2, FIVE), now=FIXED_NOW)
    two = drift_store.record("c" * 64, judged(3, THREE[:2]), now=FIXED_NOW)
    back = drift_store.record("a" * 64, judged(4, THREE), now=FIXED_NOW)

    assert two.drift is not None
    assert (two.drift.added_claim_ids, two.drift.removed_claim_ids) == ([], ["support-channel"])
    assert back.contract_drift is False  # the first set itself never drifts
    assert [alert.input_hash for alert in drift_alerts(drift_store)] == ["b" * 64, "c" * 64]
    assert five.drift is not None


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"contract_version": "support-faq/2026-11"}, id="new-contract-version"),
        pytest.param({"case_id": "refund-002"}, id="other-case"),
        pytest.param({"value": None, "reason": "bad"}, id="invalid-row"),
        pytest.param({"contract_version": None}, id="no-contract-version"),
    ],
)
def test_no_drift_across_versions_cases_or_for_invalid_rows(
    drift_store: ResultStore, other: dict[str, Any]
) -> None:
    drift_store.record("a" * 64, judged(1, THREE), now=FIXED_NOW)

    recorded = drift_store.record("b" * 64, judged(2, FIVE, **other), now=FIXED_NOW)

    assert (recorded.contract_drift, recorded.drift) == (False, None)
    assert drift_alerts(drift_store) == []


def test_drift_within_one_batch_and_case_ids_are_compared_verbatim(
    drift_store: ResultStore,
) -> None:
    """Sequential within a batch; `Refund-001` is another case (IDs are case-sensitive)."""
    recorded = drift_store.record_many(
        [
            ("a" * 64, judged(1, THREE)),
            ("b" * 64, judged(2, FIVE)),
            ("c" * 64, judged(3, FIVE, case_id="Refund-001")),
            ("b" * 64, judged(4, FIVE)),
        ],
        now=FIXED_NOW,
    )

    assert [(r.contract_drift, r.drift is not None) for r in recorded] == [
        (False, False),
        (True, True),
        (False, False),
        (True, False),
    ]


def test_a_replayed_write_returns_its_drift_and_writes_nothing(drift_store: ResultStore) -> None:
    drift_store.record("a" * 64, judged(1, THREE), now=FIXED_NOW, write_id="task-1:0")
    original = drift_store.record("b" * 64, judged(2, FIVE), now=LATER, write_id="task-2:0")
    replay = drift_store.record("b" * 64, judged(2, FIVE), now=LATER, write_id="task-2:0")

    assert replay.replayed
    assert (replay.contract_drift, replay.drift) == (True, original.drift)
    assert len(drift_alerts(drift_store)) == 1
    history = drift_store.history("b" * 64)
    assert history is not None
    assert history.total_attempts == 1


def test_a_conflict_met_again_is_recorded_but_alerted_once(drift_store: ResultStore) -> None:
    """Three runs of one conflicting file: two conflicts recorded, one alert; a third
    outcome is another conflict, alerted."""
    first = judged(1, THREE)
    other = judged(2, THREE, value=1 / 3, reason="other")
    third = judged(3, THREE, value=0.0, reason="third")
    drift_store.record("a" * 64, first, now=FIXED_NOW)

    results = [
        drift_store.record("a" * 64, attempt, now=FIXED_NOW) for attempt in (other, other, third)
    ]

    assert [(r.cache, r.alert is not None) for r in results] == [
        ("conflict", True),
        ("conflict", False),
        ("conflict", True),
    ]
    alerts = drift_store.alerts(kind="nondeterminism")
    assert [a.observed.reason for a in alerts if isinstance(a, Alert)] == ["other", "third"]
    history = drift_store.history("a" * 64)
    assert history is not None
    assert history.total_attempts == 4


def test_alerts_of_both_kinds_share_the_stream_and_filter_by_kind(
    drift_store: ResultStore,
) -> None:
    drift_store.record("a" * 64, judged(1, THREE), now=FIXED_NOW)
    drift_store.record("a" * 64, judged(2, THREE, reason="other"), now=FIXED_NOW)
    drift_store.record("b" * 64, judged(3, FIVE), now=LATER)

    assert [a.kind for a in drift_store.alerts()] == ["nondeterminism", "contract_drift"]
    assert [a.kind for a in drift_store.alerts(kind="contract_drift")] == ["contract_drift"]
    assert [a.kind for a in drift_store.alerts(since=LATER)] == ["contract_drift"]
    assert [a.kind for a in drift_store.alerts(limit=1, kind="nondeterminism")] == [
        "nondeterminism"
    ]
    assert drift_store.alert_count() == 2


def test_drift_starts_over_when_the_kept_set_expires(make_drift_store: StoreFactory) -> None:
    """With a TTL the kept set goes with the outcomes: a later set is then the first."""
    store = make_drift_store(ttl_seconds=60)
    store.record("a" * 64, judged(1, THREE), now=FIXED_NOW)
    if isinstance(store, RedisStore):  # Redis expires keys itself: expire them now
        for key in store.client.scan_iter(match=f"{store.prefix}:*contract:*"):
            store.client.delete(key)
        recorded = store.record("b" * 64, judged(2, FIVE), now=FIXED_NOW)
    else:
        recorded = store.record("b" * 64, judged(2, FIVE), now=FIXED_NOW + timedelta(minutes=2))

    assert (recorded.contract_drift, recorded.drift) == (False, None)


def test_the_first_required_set_is_read_back_with_its_hash(drift_store: ResultStore) -> None:
    """`gate --store` compares with it: the first valid set stays after a drift from it."""
    drift_store.record("a" * 64, judged(1, THREE), now=FIXED_NOW)
    drift_store.record("b" * 64, judged(2, FIVE), now=LATER)

    assert drift_store.first_required(VERSION, "refund-001") == (sorted(THREE), "a" * 64)
    assert drift_store.first_required(VERSION, "refund-002") is None
    assert drift_store.first_required("support-faq/2026-11", "refund-001") is None
