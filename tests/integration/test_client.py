"""worker.client: an upstream job looks up outcomes and publishes without Celery imports."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from contracts import AttributionResult, input_hash
from tests.conftest import FIXED_NOW
from tests.integration.worker_harness import REDIS_PORT
from worker.client import EvidenceClient
from worker.pipeline.scoring import Delivery, process
from worker.settings import Settings

pytestmark = pytest.mark.integration

BROKER_DB_URL = f"redis://127.0.0.1:{REDIS_PORT}/13"


@pytest.fixture
def client(redis_url: str, key_prefix: str) -> Iterator[EvidenceClient]:
    queue = f"{key_prefix}-queue"
    settings = Settings(
        broker_url=BROKER_DB_URL, store_url=redis_url, key_prefix=key_prefix, queue=queue
    )
    client = EvidenceClient(settings)
    yield client
    client.close()
    redis.Redis.from_url(BROKER_DB_URL).delete(queue)


def test_lookup_finds_the_first_outcome_from_inputs_alone(
    client: EvidenceClient, message: Callable[..., AttributionResult]
) -> None:
    """Inputs known before grading (no supported IDs) find the outcome stored for them."""
    scored = message()
    process(
        scored,
        store=client.store,
        policy=None,
        clock=lambda: FIXED_NOW,
        delivery=Delivery(task_id="t-1"),
    )

    found = client.lookup(
        contract_version=scored.contract_version,
        answer=scored.answer,
        contexts=[context.model_dump() for context in scored.contexts],
        required_claim_ids=list(reversed(scored.required_claim_ids)),
        grader=scored.grader.model_dump(),
    )

    assert found is not None
    assert (found.case_id, found.value) == ("refund-001", 2 / 3)
    history = client.history(input_hash(scored))
    assert history is not None
    assert history.first == found


def test_lookup_with_the_message_s_expected_evidence_finds_its_outcome(
    client: EvidenceClient, message: Callable[..., AttributionResult]
) -> None:
    """expected_evidence is part of the inputs when given: a lookup must pass it too."""
    evidence = {"refund-method": ["kb-7"]}
    scored = message(expected_evidence=evidence)
    process(scored, store=client.store, policy=None, delivery=Delivery(task_id="t-2"))
    contexts = [context.model_dump() for context in scored.contexts]
    grader = scored.grader.model_dump()

    found = client.lookup(
        contract_version=scored.contract_version,
        answer=scored.answer,
        contexts=contexts,
        required_claim_ids=scored.required_claim_ids,
        grader=grader,
        expected_evidence=evidence,
    )
    without = client.lookup(
        contract_version=scored.contract_version,
        answer=scored.answer,
        contexts=contexts,
        required_claim_ids=scored.required_claim_ids,
        grader=grader,
    )

    assert found is not None
    assert found.task_id == "t-2"
    assert without is None  # the same inputs without it: another hash


def test_lookup_misses_when_the_inputs_differ(
    client: EvidenceClient, message: Callable[..., AttributionResult]
) -> None:
    """A different answer is a different judgement: nothing is found."""
    scored = message()
    process(scored, store=client.store, policy=None, clock=lambda: FIXED_NOW)

    assert (
        client.lookup(
            contract_version=scored.contract_version,
            answer=scored.answer + "!",
            contexts=scored.contexts,
            required_claim_ids=scored.required_claim_ids,
            grader=scored.grader,
        )
        is None
    )


def test_publish_validates_then_sends_one_score_task(
    client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """publish() puts one evidence_coverage.score task carrying the message on the queue."""
    task_id = client.publish(message_dict())

    [raw] = redis.Redis.from_url(BROKER_DB_URL).lrange(client.settings.queue, 0, -1)
    envelope = json.loads(raw)
    assert envelope["headers"]["task"] == "evidence_coverage.score"
    assert envelope["headers"]["id"] == task_id
    [text] = task_args(envelope)
    assert isinstance(text, str)  # the JSON text: the worker validates it without a dict tree
    assert json.loads(text) == message_dict()


def test_publish_notes_the_message_in_the_ledger_and_its_record_closes_it(
    client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """The entry (task id, position 0, case ID, input hash, body) is there before a worker
    takes the task; the worker's record of that task's message closes it."""
    task_id = client.publish(message_dict(case_id="ledgered"))
    future = datetime.now(UTC) + timedelta(hours=1)

    [entry] = client.store.unrecorded(published_before=future)
    model = AttributionResult.model_validate(message_dict(case_id="ledgered"))
    assert (entry.task_id, entry.position, entry.case_id, entry.input_hash) == (
        task_id,
        0,
        "ledgered",
        input_hash(model),
    )
    assert AttributionResult.model_validate_json(entry.body) == model

    process(model, store=client.store, policy=None, delivery=Delivery(task_id=task_id, position=0))

    assert list(client.store.unrecorded(published_before=future)) == []


def test_publish_batch_notes_each_message_at_its_position(
    client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    task_id = client.publish_batch([message_dict(case_id=f"c{n}") for n in range(3)])

    entries = client.store.unrecorded(published_before=datetime.now(UTC) + timedelta(hours=1))
    assert [(e.task_id, e.position, e.case_id) for e in entries] == [
        (task_id, n, f"c{n}") for n in range(3)
    ]


def test_no_ledger_with_a_time_to_live_of_zero(
    redis_url: str, key_prefix: str, message_dict: Callable[..., dict[str, Any]]
) -> None:
    settings = Settings(
        broker_url=BROKER_DB_URL,
        store_url=redis_url,
        key_prefix=key_prefix,
        queue=f"{key_prefix}-queue",
        ledger_ttl_seconds=0,
    )
    client = EvidenceClient(settings)
    try:
        client.publish(message_dict())
        assert client.store.count_unrecorded(published_before=datetime.now(UTC)) == 0
    finally:
        client.close()
        redis.Redis.from_url(BROKER_DB_URL).delete(settings.queue)


def test_publish_rejects_an_invalid_message_before_sending(
    client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """An invalid message raises a validation error and nothing is queued."""
    with pytest.raises(ValueError, match="answer"):
        client.publish(message_dict(answer=None))

    assert redis.Redis.from_url(BROKER_DB_URL).llen(client.settings.queue) == 0


def test_publish_batch_sends_one_score_batch_task(
    client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """publish_batch() sends all messages as one evidence_coverage.score_batch task."""
    client.publish_batch([message_dict(case_id=f"c{n}") for n in range(3)])

    [raw] = redis.Redis.from_url(BROKER_DB_URL).lrange(client.settings.queue, 0, -1)
    envelope = json.loads(raw)
    assert envelope["headers"]["task"] == "evidence_coverage.score_batch"
    [texts] = task_args(envelope)
    assert [json.loads(text)["case_id"] for text in texts] == ["c0", "c1", "c2"]


def test_publish_sends_a_quote_dense_message_near_the_limit_as_an_object(
    redis_url: str, key_prefix: str, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """As text, a message dense with quotes would grow past the limit once the transport escapes
    it; such a message goes as the object instead, so the worker's size check still takes it."""
    queue = f"{key_prefix}-queue"
    ids = [f"c{n}" for n in range(200)]
    heavy = message_dict(required_claim_ids=ids, supported_claim_ids=ids[:3])
    compact = AttributionResult.model_validate(heavy).model_dump_json(exclude_unset=True)
    limit = len(compact) + 10  # the message fits, its escaped text (one backslash a quote) not
    assert len(json.dumps(compact)) > limit
    settings = Settings(
        broker_url=BROKER_DB_URL,
        store_url=redis_url,
        key_prefix=key_prefix,
        queue=queue,
        max_message_bytes=limit,
    )
    client = EvidenceClient(settings)
    try:
        client.publish(heavy)
        client.publish(message_dict())
    finally:
        client.close()

    broker = redis.Redis.from_url(BROKER_DB_URL)
    raws = broker.lrange(queue, 0, -1)
    broker.delete(queue)
    # kombu's Redis transport pushes on the left: the newest task comes first
    [small], [large] = (task_args(json.loads(raw)) for raw in raws)
    assert isinstance(small, str)
    assert large == json.loads(compact)


def task_args(envelope: dict[str, Any]) -> list[Any]:
    """The positional arguments of a task in kombu's Redis envelope (body: JSON text)."""
    assert envelope["properties"]["body_encoding"] == "utf-8"
    args, _kwargs, _embed = json.loads(envelope["body"])
    return list(args)


# Sample points (contracts/sampling.py): case-3 0.022, case-2 0.204, refund-002 0.252,
# refund-001 0.495, case-1 0.727, case-7 0.966: at 0.25, case-2 and case-3 are in.
SAMPLED_CASES = ["case-1", "case-2", "case-3", "refund-001", "refund-002", "case-7"]


@pytest.fixture
def sampling_client(redis_url: str, key_prefix: str) -> Iterator[EvidenceClient]:
    """A client at sample rate 0.25, on a queue of the test's own."""
    queue = f"{key_prefix}-queue"
    settings = Settings(
        broker_url=BROKER_DB_URL, store_url=redis_url, key_prefix=key_prefix, queue=queue
    )
    client = EvidenceClient(settings, sample_rate=0.25)
    yield client
    client.close()
    redis.Redis.from_url(BROKER_DB_URL).delete(queue)


def queued_case_ids(queue: str) -> list[list[str]]:
    """Per task on the queue, oldest first, its messages' case IDs."""
    raws = redis.Redis.from_url(BROKER_DB_URL).lrange(queue, 0, -1)
    found = []
    for raw in reversed(raws):
        [payload] = task_args(json.loads(raw))
        texts = payload if isinstance(payload, list) else [payload]
        found.append([json.loads(text)["case_id"] for text in texts])
    return found


def open_entries(client: EvidenceClient) -> list[tuple[str, int, str]]:
    future = datetime.now(UTC) + timedelta(hours=1)
    return sorted(
        (e.task_id, e.position, e.case_id) for e in client.store.unrecorded(published_before=future)
    )


def test_a_sampling_client_sends_only_sampled_case_ids_and_notes_only_those(
    sampling_client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """publish() returns the task id of a sampled message and None for one left out, which is
    neither queued nor in the ledger."""
    task_ids = {case: sampling_client.publish(message_dict(case_id=case)) for case in SAMPLED_CASES}

    assert [case for case, task_id in task_ids.items() if task_id is not None] == [
        "case-2",
        "case-3",
    ]
    assert queued_case_ids(sampling_client.settings.queue) == [["case-2"], ["case-3"]]
    assert open_entries(sampling_client) == sorted(
        [(str(task_ids["case-2"]), 0, "case-2"), (str(task_ids["case-3"]), 0, "case-3")]
    )


def test_a_sampling_client_s_batch_holds_only_sampled_case_ids(
    sampling_client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """One score_batch task of the sampled messages, in order, at positions 0 and 1."""
    task_id = sampling_client.publish_batch([message_dict(case_id=case) for case in SAMPLED_CASES])

    assert task_id is not None
    assert queued_case_ids(sampling_client.settings.queue) == [["case-2", "case-3"]]
    assert open_entries(sampling_client) == [(task_id, 0, "case-2"), (task_id, 1, "case-3")]


def test_a_batch_the_sample_leaves_empty_is_not_sent(
    sampling_client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """None, no task, no entry: an empty score_batch task would only cost the worker."""
    left_out = ["case-1", "refund-001", "case-7"]

    assert sampling_client.publish_batch([message_dict(case_id=case) for case in left_out]) is None
    assert queued_case_ids(sampling_client.settings.queue) == []
    assert open_entries(sampling_client) == []


def test_a_sampling_client_still_refuses_an_invalid_message_it_would_leave_out(
    sampling_client: EvidenceClient, message_dict: Callable[..., dict[str, Any]]
) -> None:
    """Validation comes first: case-7 is out of the sample, its bad message still raises."""
    with pytest.raises(ValueError, match="answer"):
        sampling_client.publish(message_dict(case_id="case-7", answer=None))
