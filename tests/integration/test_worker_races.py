"""Fault tests on real workers: two workers racing on one input hash, or on one case with
two required sets, at the same time.

Every test checks the product's promise for what it published: one first outcome per input
hash, never overwritten, and exactly the alerts the scenario implies.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from celery import Celery

from contracts import Alert, ContractDriftAlert
from contracts.record_models import CONTRACT_DRIFT, NONDETERMINISM
from tests.factories import ONE_THIRD_REASON, TWO_THIRDS_REASON
from tests.integration import worker_harness as harness
from tests.integration.fault_helpers import MessageFactory, distinct
from tests.integration.worker_harness import Worker, check_first_outcomes, hash_of
from worker.constants import SCORE
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

# The harness's factory fixtures, used by name below.
make_queue = harness.make_queue
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store


# Two workers, one input hash, two outcomes, at the same time


@pytest.mark.timeout(180)
def test_two_workers_racing_on_one_input_hash_keep_one_first_outcome_and_raise_one_alert(
    start_worker: Callable[..., Worker],
    make_queue: Callable[..., str],
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """One hash sent to two workers at once with different supported IDs: miss and conflict."""
    pairs = 40
    left_queue, right_queue = make_queue(), make_queue()
    left, right = start_worker(left_queue), start_worker(right_queue)
    left.wait_ready()
    right.wait_ready()
    lefts = distinct(message_dict, "race-left", pairs)
    rights = [
        {**message, "case_id": f"race-right-{n:05d}", "supported_claim_ids": ["refund-window"]}
        for n, message in enumerate(lefts)
    ]
    app = publisher()
    with app.producer_or_acquire() as producer:
        for left_message, right_message in zip(lefts, rights, strict=True):
            app.send_task(SCORE, args=[left_message], queue=left_queue, producer=producer)
            app.send_task(SCORE, args=[right_message], queue=right_queue, producer=producer)
    left.wait_for(pairs)
    right.wait_for(pairs)

    records = left.records() + right.records()
    histories = check_first_outcomes(store, lefts + rights, records)
    alerts = store.alerts(limit=1000)
    assert len(histories) == pairs
    assert len(alerts) == pairs
    assert len(left.events(NONDETERMINISM)) + len(right.events(NONDETERMINISM)) == pairs
    for left_message, right_message in zip(lefts, rights, strict=True):
        key = hash_of(left_message)
        assert hash_of(right_message) == key
        caches = sorted(line["cache"] for line in records if line["input_hash"] == key)
        assert caches == ["conflict", "miss"]
        assert histories[key].total_attempts == 2
        (alert,) = [alert for alert in alerts if alert.input_hash == key]
        assert isinstance(alert, Alert)
        assert alert.decision == "kept_first"
        assert alert.first == histories[key].first
        assert {alert.first.case_id, alert.observed.case_id} == {
            left_message["case_id"],
            right_message["case_id"],
        }
        assert {alert.first.reason, alert.observed.reason} == {TWO_THIRDS_REASON, ONE_THIRD_REASON}


def test_two_workers_racing_on_one_case_with_two_required_sets_raise_one_drift_each(
    start_worker: Callable[..., Worker],
    make_queue: Callable[..., str],
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """Per case, one required set to each of two workers at once (same contract version):
    whichever records first keeps its set, the other is contract drift, alerted once, in
    the stream and as one ERROR line, and its record is owned by evaluation data."""
    pairs = 40
    left_queue, right_queue = make_queue(), make_queue()
    left, right = start_worker(left_queue), start_worker(right_queue)
    left.wait_ready()
    right.wait_ready()
    lefts = distinct(message_dict, "drift", pairs)
    rights = [
        {**message, "required_claim_ids": [*message["required_claim_ids"], "refund-fee"]}
        for message in lefts
    ]
    app = publisher()
    with app.producer_or_acquire() as producer:
        for left_message, right_message in zip(lefts, rights, strict=True):
            app.send_task(SCORE, args=[left_message], queue=left_queue, producer=producer)
            app.send_task(SCORE, args=[right_message], queue=right_queue, producer=producer)
    left.wait_for(pairs)
    right.wait_for(pairs)

    records = left.records() + right.records()
    drifted = sorted(r["case_id"] for r in records if r["contract_drift"])
    assert drifted == sorted(message["case_id"] for message in lefts)
    assert {r["owner"] for r in records if r["contract_drift"]} == {"evaluation-data"}
    alerts = store.alerts(limit=1000, kind="contract_drift")
    assert sorted(alert.case_id for alert in alerts if isinstance(alert, ContractDriftAlert)) == (
        drifted
    )
    lines = left.events(CONTRACT_DRIFT) + right.events(CONTRACT_DRIFT)
    assert sorted(line["case_id"] for line in lines) == drifted
    for alert in alerts:
        assert isinstance(alert, ContractDriftAlert)
        assert {*alert.added_claim_ids, *alert.removed_claim_ids} == {"refund-fee"}
        drifted_record = next(
            r for r in records if r["case_id"] == alert.case_id and r["contract_drift"]
        )
        assert drifted_record["input_hash"] == alert.input_hash != alert.first_input_hash
