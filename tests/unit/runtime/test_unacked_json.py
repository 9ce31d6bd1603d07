"""json_codec.dumps, which spells the unacknowledged copy of a message: it reads back, through
kombu's own loads, exactly as kombu's dumps would have it read back; orjson spells only what
it spells the same."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from kombu.utils import json as kombu_json

from worker.runtime.consumer import GuardedRedisChannel, UnackedJsonQoS
from worker.runtime.json_codec import dumps

BODY = '[["{\\"case_id\\": \\"c-1\\", \\"answer\\": \\"caf\\u00e9 \\\\u00e9\\"}"], {}, {}]'


def raw(**headers: Any) -> list[Any]:
    """[payload, exchange, routing key] as kombu's QoS.append keeps a delivered message."""
    payload = {
        "body": BODY,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"id": "t-1", "task": "evidence_coverage.score_batch", **headers},
        "properties": {"delivery_tag": "tag-1", "body_encoding": "utf-8", "priority": 0},
    }
    return [payload, "", "evidence"]


CASES = [
    # (name, value, spelled by orjson)
    ("plain", raw(retries=0, timelimit=[None, None], eta=None), True),
    ("non-ascii", raw(origin="gen1@höst", argsrepr="'é'"), True),
    ("float", raw(expires=1.5e-05), True),
    ("nan", raw(expires=float("nan")), False),
    ("infinity", raw(expires=float("inf")), False),
    ("huge-int", raw(retries=2**70), False),
    ("lone-surrogate", raw(origin="\ud800"), False),
    ("datetime", raw(eta=datetime(2026, 12, 7, 12, 0, tzinfo=UTC)), False),
    ("uuid", raw(root_id=uuid.UUID(int=7)), False),
    ("decimal", raw(weight=Decimal("0.1")), False),
    ("tuple", raw(timelimit=(None, None)), False),
    ("int-key", raw(stamps={1: "x"}), False),
]


@pytest.mark.parametrize(("name", "value", "fast"), CASES, ids=[case[0] for case in CASES])
def test_the_copy_reads_back_as_kombu_s_own(name: str, value: Any, fast: bool) -> None:
    spelled = dumps(value)

    assert isinstance(spelled, bytes) is fast
    expected = kombu_json.loads(kombu_json.dumps(value))
    read = kombu_json.loads(spelled)
    if name == "nan":  # NaN != NaN: compare its spelling instead
        assert kombu_json.dumps(read) == kombu_json.dumps(expected)
    else:
        assert read == expected


def test_the_worker_s_redis_channel_keeps_its_copies_through_json_codec() -> None:
    assert GuardedRedisChannel.QoS is UnackedJsonQoS
