"""admit(): a lone surrogate (a legal JSON escape) is rejected where a store or the hash would
break on it, with the exact reason, and let through where it is harmless. check_encodable's
fast path (one orjson call) must decide every case as the field-by-field checks do."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from contracts import input_hash
from worker.errors import InputError
from worker.pipeline.intake import admit

LONE = "\ud800"
IDS_REASON = "{} contains a lone surrogate: IDs must be valid Unicode"
GRADER_REASON = "grader contains a lone surrogate that cannot be hashed"


def body(data: dict[str, Any]) -> dict[str, Any]:
    """The message as a task argument reaches admit(): decoded by the broker's JSON, which
    (unlike pydantic's JSON parser) turns a \\ud800 escape into a lone surrogate."""
    decoded: dict[str, Any] = json.loads(json.dumps(data))
    return decoded


def grader(**overrides: Any) -> dict[str, Any]:
    return {"name": "g", "version": "1", "model": "m", "prompt": "p", "params": {}, **overrides}


REJECTED = [
    # case_id is a strict string: its schema refuses one before the check sees it
    (
        "case_id",
        lambda m: {**m, "case_id": f"case-{LONE}"},
        "schema: case_id: Input should be a valid string, unable to parse raw data as a "
        "unicode string",
    ),
    (
        "required",
        lambda m: {
            **m,
            "required_claim_ids": [*m["required_claim_ids"], f"c{LONE}"],
        },
        IDS_REASON.format("required_claim_ids"),
    ),
    (
        "supported",
        lambda m: {**m, "supported_claim_ids": [f"c{LONE}"]},
        IDS_REASON.format("supported_claim_ids"),
    ),
    (
        "params-nested-key",
        lambda m: {**m, "grader": grader(params={"outer": {f"k{LONE}": 1}})},
        GRADER_REASON,
    ),
]

ACCEPTED = [
    ("answer", lambda m: {**m, "answer": f"text {LONE} more"}),
    ("grader-prompt", lambda m: {**m, "grader": grader(prompt=f"p{LONE}")}),
    ("grader-name", lambda m: {**m, "grader": grader(name=f"g{LONE}")}),
    ("params-value", lambda m: {**m, "grader": grader(params={"k": f"v{LONE}"})}),
    ("params-top-key", lambda m: {**m, "grader": grader(params={f"k{LONE}": 1})}),
    # orjson refuses an integer beyond 64 bits: the field-by-field checks decide it
    ("params-huge-int", lambda m: {**m, "grader": grader(params={"seed": 2**70})}),
    ("plain", lambda m: m),
]


@pytest.mark.parametrize(("where", "change", "reason"), REJECTED, ids=[r[0] for r in REJECTED])
def test_a_lone_surrogate_where_it_breaks_is_rejected_with_its_reason(
    message_dict: Callable[..., dict[str, Any]],
    where: str,
    change: Callable[[dict[str, Any]], dict[str, Any]],
    reason: str,
) -> None:
    with pytest.raises(InputError) as raised:
        admit(body(change(message_dict())), max_bytes=1_000_000)
    assert str(raised.value) == reason


@pytest.mark.parametrize(("where", "change"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_a_lone_surrogate_where_it_is_harmless_is_admitted_and_hashable(
    message_dict: Callable[..., dict[str, Any]],
    where: str,
    change: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    message = admit(body(change(message_dict())), max_bytes=1_000_000)
    assert len(input_hash(message)) == 64
