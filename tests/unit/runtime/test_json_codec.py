"""json_codec.loads reads every text as kombu's own json loads does (orjson where that is the
same), raises where kombu raises, and is what a worker's kombu decodes task bodies with."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from kombu import serialization
from kombu.exceptions import DecodeError
from kombu.utils import json as kombu_json

from worker.runtime import json_codec

MESSAGE = json.dumps({"case_id": "c-1", "answer": 'café "q" \\ é', "grader": {"params": {}}})
BATCH = json.dumps([[MESSAGE, MESSAGE], {}, {"callbacks": None, "chain": None}])

TEXTS = [
    ("batch", BATCH),
    ("batch-bytes", BATCH.encode()),
    ("batch-memoryview", memoryview(BATCH.encode())),
    ("batch-bytearray", bytearray(BATCH.encode())),
    ("message-as-dict", json.dumps([[json.loads(MESSAGE)], {}, {}])),
    ("huge-int", '[[{"seed": 123456789012345678901234567890}], {}, {}]'),
    ("int-64", '[[{"seed": 9223372036854775807}], {}, {}]'),
    ("float", '[[{"temperature": 0.1, "tiny": 1e-7}], {}, {}]'),
    ("float-huge", "[1e400]"),
    ("nan", "[NaN, Infinity, -Infinity]"),
    ("lone-surrogate", '["\\ud800"]'),
    ("pair", '["\\ud83d\\ude00"]'),
    ("datetime", kombu_json.dumps([datetime(2026, 12, 7, 12, tzinfo=UTC)])),
    ("uuid", kombu_json.dumps({"id": uuid.UUID(int=7)})),
    ("decimal", kombu_json.dumps([Decimal("0.1")])),
    ("type-key-alone", '{"__type__": "x"}'),
    ("duplicate-keys", '{"a": 1, "a": 2}'),
]


def same(read: Any, expected: Any) -> bool:
    """Equal, NaN included, and of the same types throughout."""
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(read, float) and math.isnan(read)
    if isinstance(expected, list):
        return (
            type(read) is list
            and len(read) == len(expected)
            and all(same(a, b) for a, b in zip(read, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            type(read) is dict
            and read.keys() == expected.keys()
            and all(same(read[k], expected[k]) for k in expected)
        )
    return type(read) is type(expected) and read == expected


@pytest.mark.parametrize(("name", "text"), TEXTS, ids=[t[0] for t in TEXTS])
def test_it_reads_each_text_as_kombu_does(name: str, text: Any) -> None:
    assert same(json_codec.loads(text), kombu_json.loads(text))


def raised(loads: Any, text: Any) -> BaseException:
    try:
        loads(text)
    except Exception as error:  # whatever it is, both must raise it
        return error
    raise AssertionError("did not raise")


@pytest.mark.parametrize(
    "text",
    [b"\xff[]", "[1,", "", "\ufeff[]", "[" * 2000 + "]" * 2000],
    ids=["not-utf8", "cut", "empty", "bom", "deeper-than-both-go"],
)
def test_it_raises_where_kombu_raises(text: Any) -> None:
    expected = raised(kombu_json.loads, text)
    error = raised(json_codec.loads, text)
    assert (type(error), str(error)) == (type(expected), str(expected))


@pytest.fixture
def installed() -> Iterator[None]:
    before = serialization.registry._decoders["application/json"]
    json_codec.install()
    yield
    serialization.registry._decoders["application/json"] = before


@pytest.mark.usefixtures("installed")
def test_installed_it_decodes_kombu_s_json_content_and_keeps_its_encoder() -> None:
    assert serialization.registry._decoders["application/json"] is json_codec.loads
    content_type, encoding, body = serialization.dumps({"eta": datetime(2026, 1, 1)}, "json")
    assert (content_type, encoding) == ("application/json", "utf-8")
    assert serialization.loads(body, content_type, encoding) == {"eta": datetime(2026, 1, 1)}
    assert serialization.loads(BATCH, content_type, encoding) == json.loads(BATCH)
    with pytest.raises(DecodeError):
        serialization.loads("[1,", content_type, encoding)
