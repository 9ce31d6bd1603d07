"""Fault tests on real workers: at least 10,000 arbitrary payloads, each ending as exactly one
record.

Every test checks the product's promise for what it published: one first outcome per input
hash, never overwritten, and exactly the alerts the scenario implies.
"""

from __future__ import annotations

import json
import math
import random
import string
from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from contracts.record_models import REJECTED, SCORED
from tests.conftest import BASE_MESSAGE
from tests.integration import worker_harness as harness
from tests.integration.fault_helpers import MessageFactory
from tests.integration.worker_harness import RECORD_EVENTS, Line, Worker, publish_raw
from worker.constants import SCORE, SCORE_BATCH
from worker.errors import InputError
from worker.pipeline.intake import check_encodable, parse_message
from worker.settings import Settings
from worker.stores.redis.redis_store import RedisStore

pytestmark = pytest.mark.integration

# The harness's factory fixtures, used by name below.
queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
store = harness.store


# Fuzz: at least 10,000 arbitrary payloads through a real worker

FUZZ_SEED = 20261202
BATCHES = 82
BATCH_SIZE = 100
SINGLES = 1_800
DEFAULT_MAX_MESSAGE_BYTES = Settings().max_message_bytes
# What follows a task's args in Celery's task body, as send_task writes it.
ENVELOPE_TAIL = ', {}, {"callbacks": null, "errbacks": null, "chain": null, "chord": null}]'
# Letters, markup, non-ASCII, control characters, and lone surrogates (legal JSON escapes).
ALPHABET = string.ascii_letters + string.digits + ' -_.,:;/\\"{}[]' + "éß✓漢😀\u200b\u202e\x00\x7f"
SURROGATES = "\ud800\udbff\udc00\udfff"
SCALARS: list[Any] = [None, True, False, 0, -1, 1, 2**53 + 1, -(2**63), 10**30, 0.5, -0.0, 1e308]
SCALARS += [math.nan, math.inf]
BASE_FIELDS = [*BASE_MESSAGE, "produced_at", "trace_id", "policy_group", "blocking"]


def random_text(rng: random.Random, longest: int = 12) -> str:
    characters = ALPHABET + SURROGATES if rng.random() < 0.1 else ALPHABET
    return "".join(rng.choice(characters) for _ in range(rng.randint(0, longest)))


def random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 4 or roll < 0.45:
        return rng.choice(SCALARS)
    if roll < 0.65:
        return random_text(rng)
    if roll < 0.82:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    keys = [*BASE_FIELDS, "", "__type__"]
    return {
        (rng.choice(keys) if rng.random() < 0.3 else random_text(rng, 6)): random_json(
            rng, depth + 1
        )
        for _ in range(rng.randint(0, 4))
    }


def random_ids(rng: random.Random) -> list[str]:
    pool = ["refund-window", "refund-method", "support-channel", "C1", "c1", " c1 ", "", "x\u00e9"]
    return [
        rng.choice(pool) if rng.random() < 0.8 else random_text(rng)
        for _ in range(rng.randint(0, 5))
    ]


def valid_message(rng: random.Random, message_dict: MessageFactory, n: int) -> dict[str, Any]:
    """A well-formed message with inputs of its own; its claim lists may be metric-invalid."""
    required = random_ids(rng)
    supported = rng.sample(required, rng.randint(0, len(required))) + (
        [random_text(rng)] if rng.random() < 0.2 else []
    )
    return message_dict(
        case_id=f"fuzz-{n:05d}",
        answer=f"Fuzzed answer {n}: {random_text(rng, 40)}",
        required_claim_ids=required,
        supported_claim_ids=supported,
    )


def near_valid_message(rng: random.Random, message_dict: MessageFactory, n: int) -> dict[str, Any]:
    """A valid message with exactly one thing broken."""
    message = valid_message(rng, message_dict, n)
    mode = rng.randrange(6)
    if mode == 0:
        message[rng.choice(BASE_FIELDS)] = random_json(rng)
    elif mode == 1:
        del message[rng.choice(list(message))]
    elif mode == 2:
        message[random_text(rng, 8) or "unknown"] = random_json(rng)
    elif mode == 3:
        message["contexts"][0][rng.choice(["document_id", "text", "extra"])] = random_json(rng)
    elif mode == 4:
        message["grader"][rng.choice(["name", "version", "model", "prompt", "params", "x"])] = (
            random_json(rng)
        )
    else:
        message["citations"] = [
            {"claim_id": "refund-window", "document_id": "d", "answer_span": random_json(rng)}
        ]
    return message


def arbitrary_payload(rng: random.Random, message_dict: MessageFactory, n: int) -> Any:
    roll = rng.random()
    if roll < 0.3:
        return random_json(rng)
    if roll < 0.75:
        return near_valid_message(rng, message_dict, n)
    return valid_message(rng, message_dict, n)


def expected_event(payload: Any) -> str:
    """What the worker must record for a payload, judged in this process by the same rules."""
    try:
        check_encodable(parse_message(payload, max_bytes=DEFAULT_MAX_MESSAGE_BYTES))
    except InputError:
        return REJECTED
    return SCORED


def raw_bodies(message_dict: MessageFactory) -> list[bytes]:
    """Bodies no JSON encoder would produce: deep nesting, bad UTF-8, broken envelopes."""
    deep_message = json.dumps(message_dict(case_id="fuzz-deep", answer="Deep params."))
    bodies = []
    for depth in (10, 60, 100, 500, 900, 990, 1_000, 2_000, 5_000):
        bodies.append(f"[[{'[' * depth}{']' * depth}]{ENVELOPE_TAIL}".encode())
        params = '{"a": ' * depth + "1" + "}" * depth
        deep = deep_message.replace('{"temperature": 0.0, "seed": 7}', params)
        bodies.append(f"[[{deep}]{ENVELOPE_TAIL}".encode())
    bodies += [
        b'[["\xff\xfe"], {}, {}]',
        b"\xc3\x28",
        f"[[{deep_message[:-40]}".encode(),
        b'{"args": 1}',
        b"[]",
        b"null",
        b"[[1], 5, {}]",
        f'[["\\ud800"]{ENVELOPE_TAIL}'.encode(),
        f'[[{{"__type__": "datetime", "__value__": "garbage"}}]{ENVELOPE_TAIL}'.encode(),
        b"[[], {}, {}]",
        b'[[1, 2], {"message": 3}, {}]',
    ]
    rng = random.Random(FUZZ_SEED)
    bodies += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 200))) for _ in range(40)]
    return bodies


def huge_messages(message_dict: MessageFactory) -> list[tuple[dict[str, Any], str]]:
    """Huge strings just under and over the default 1 MiB limit, with the expected event."""
    limit = DEFAULT_MAX_MESSAGE_BYTES
    return [
        (message_dict(case_id="fuzz-huge-answer", answer="a" * (limit - 10_000)), SCORED),
        (
            message_dict(
                case_id="fuzz-huge-context", contexts=[{"document_id": "d", "text": "t" * 500_000}]
            ),
            SCORED,
        ),
        (message_dict(case_id="c" * 300_000, answer="Huge case id."), SCORED),
        (
            message_dict(
                case_id="fuzz-huge-id", answer="Huge claim id.", required_claim_ids=["i" * 200_000]
            ),
            SCORED,
        ),
        (message_dict(case_id="fuzz-over-limit", answer="o" * (limit + 10_000)), REJECTED),
    ]


@pytest.mark.timeout(400)
def test_ten_thousand_arbitrary_payloads_each_end_as_exactly_one_record(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    store: RedisStore,
    message_dict: MessageFactory,
) -> None:
    """Random JSON, near-valid, huge, deep and non-UTF-8 payloads: one record each, no crash."""
    rng = random.Random(FUZZ_SEED)
    worker = start_worker(queue)
    app = publisher()
    # task id -> the events its records must have, in order (None: scored or rejected).
    expected: dict[str, list[str | None]] = {}
    sent = 0
    n = 0
    with app.producer_or_acquire() as producer:
        for _ in range(BATCHES):
            batch = []
            for _ in range(BATCH_SIZE):
                batch.append(arbitrary_payload(rng, message_dict, n))
                n += 1
            task_id = app.send_task(SCORE_BATCH, args=[batch], queue=queue, producer=producer).id
            roundtrip = json.loads(json.dumps(batch))
            expected[task_id] = [expected_event(payload) for payload in roundtrip]
            sent += len(batch)
        for _ in range(SINGLES):
            payload = arbitrary_payload(rng, message_dict, n)
            n += 1
            task_id = app.send_task(SCORE, args=[payload], queue=queue, producer=producer).id
            expected[task_id] = [expected_event(json.loads(json.dumps(payload)))]
            sent += 1
        for message, event in huge_messages(message_dict):
            task_id = app.send_task(SCORE, args=[message], queue=queue, producer=producer).id
            expected[task_id] = [event]
            sent += 1
    for body in raw_bodies(message_dict):
        expected[publish_raw(app, queue, body)] = [None]
        sent += 1
    total = sum(len(events) for events in expected.values())

    worker.wait_until(
        lambda lines: (
            sum(line.get("event") in RECORD_EVENTS for line in lines) >= total
            or any(line.get("level") in ("error", "critical") for line in lines)
        ),
        timeout=300,
        what=f"{total} records",
    )
    records = worker.records()
    by_task: dict[str, list[Line]] = {}
    for record in records:
        by_task.setdefault(record["task_id"], []).append(record)
    assert sent >= 10_000
    assert {task_id: len(lines) for task_id, lines in by_task.items()} == {
        task_id: len(events) for task_id, events in expected.items()
    }
    wrong = {
        task_id: [(line["event"], line["reason"][:200]) for line in by_task[task_id]]
        for task_id, events in expected.items()
        if any(
            event not in (None, line["event"])
            for event, line in zip(events, by_task[task_id], strict=True)
        )
    }
    assert wrong == {}
    assert worker.alive()
    assert [line for line in worker.lines() if line.get("level") in ("error", "critical")] == []
    assert store.alerts() == []
