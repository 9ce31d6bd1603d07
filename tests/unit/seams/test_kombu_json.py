"""worker/runtime/kombu_json.py against kombu's json (kombu.utils.json): every text read as
kombu's loads reads it, raising where it raises, and every unacked copy spelled so that
kombu's loads reads it back as it reads kombu's own dumps."""

from __future__ import annotations

import json
import math
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import IntEnum
from typing import Any

import orjson
import pytest
from kombu import serialization
from kombu.exceptions import DecodeError
from kombu.utils import json as kombu_utils_json

from worker.runtime import kombu_json

CHECKED_AGAINST = kombu_json.CHECKED_AGAINST

MESSAGE = json.dumps({"case_id": "c-1", "answer": 'café "q" \\ é', "grader": {"params": {}}})
BATCH = json.dumps([[MESSAGE, MESSAGE], {}, {"callbacks": None, "chain": None}])
WHEN = datetime(2026, 12, 7, 12, tzinfo=UTC)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


TEXTS = [
    ("batch", BATCH),
    ("batch-bytes", BATCH.encode()),
    ("batch-memoryview", memoryview(BATCH.encode())),
    ("batch-bytearray", bytearray(BATCH.encode())),
    ("message-as-dict", json.dumps([[json.loads(MESSAGE)], {}, {}])),
    ("empty-containers", '[[], {}, [[]], {"a": {}}]'),
    ("scalars", '[true, false, null, "", 0, -1]'),
    ("int-64", '[[{"seed": 9223372036854775807}], {}, {}]'),
    ("int-64-min", "[-9223372036854775808]"),
    ("int-64-min-less-one", "[-9223372036854775809]"),
    ("uint-64", "[18446744073709551615]"),
    ("uint-64-plus-one", "[18446744073709551616]"),
    ("huge-int", '[[{"seed": 123456789012345678901234567890}], {}, {}]'),
    ("float", '[[{"temperature": 0.1, "tiny": 1e-7}], {}, {}]'),
    ("float-exponents", "[1E5, 2e-3, -0.0, 5e-324, 1.7976931348623157e308]"),
    ("float-huge", "[1e400]"),
    ("float-in-object", '{"deep": {"deeper": [1, 2.5]}}'),
    ("nan", "[NaN, Infinity, -Infinity]"),
    ("non-ascii", '["café", "\\u00e9", "✓", "😀"]'),
    ("lone-surrogate", '["\\ud800"]'),
    ("lone-low-surrogate", '{"k": "x\\udc80y"}'),
    ("lone-surrogate-in-key", '{"\\ud800": 1}'),
    ("surrogate-character-in-str", '["\ud800"]'),
    ("pair", '["\\ud83d\\ude00"]'),
    ("control-escapes", '["\\n\\t\\u0000\\"\\\\\\/"]'),
    ("datetime", kombu_utils_json.dumps([WHEN])),
    ("datetime-naive", kombu_utils_json.dumps({"eta": datetime(2026, 12, 7, 12, 30)})),
    ("date", kombu_utils_json.dumps([date(2026, 12, 7)])),
    ("time", kombu_utils_json.dumps([time(12, 30, 1, 5)])),
    ("uuid", kombu_utils_json.dumps({"id": uuid.UUID(int=7)})),
    ("decimal", kombu_utils_json.dumps([Decimal("0.1")])),
    ("bytes", kombu_utils_json.dumps([b"text"])),
    ("bytes-base64", kombu_utils_json.dumps([b"\xff\x00"])),
    ("type-object-deep", json.dumps([[{"a": [{"__type__": "decimal", "__value__": "1.5"}]}]])),
    ("type-key-alone", '{"__type__": "x"}'),
    ("type-key-and-more", '{"__type__": "decimal", "__value__": "1", "more": 1}'),
    ("duplicate-keys", '{"a": 1, "a": 2}'),
    ("whitespace", ' \n [ 1 , { "a" : 2 } ] \t'),
    ("nesting-500", nested(500)),
    ("nesting-900", nested(900)),
]


def same(read: Any, expected: Any) -> bool:
    """Equal, NaN included, with the same types and key order throughout (walked without
    recursion: some values nest a thousand levels)."""
    pairs = [(read, expected)]
    while pairs:
        one, other = pairs.pop()
        if type(one) is not type(other):
            return False
        if isinstance(other, list):
            if len(one) != len(other):
                return False
            pairs.extend(zip(one, other, strict=True))
        elif isinstance(other, dict):
            if list(one) != list(other):
                return False
            pairs.extend((one[key], other[key]) for key in other)
        elif isinstance(other, float) and math.isnan(other):
            if not math.isnan(one):
                return False
        elif one != other:
            return False
    return True


@pytest.mark.parametrize(("name", "text"), TEXTS, ids=[t[0] for t in TEXTS])
def test_it_reads_each_text_as_kombu_does(name: str, text: Any) -> None:
    """loads() returns what kombu's loads returns: the same values of the same types."""
    assert same(kombu_json.loads(text), kombu_utils_json.loads(text))


@pytest.mark.parametrize(("name", "text"), TEXTS, ids=[t[0] for t in TEXTS])
def test_the_guard_s_reading_differs_only_by_integers_beyond_64_bits(name: str, text: Any) -> None:
    """orjson_reading(floats=True), the guard's, is kombu's reading or hands the text over,
    except that an integer beyond 64 bits is a float (which fails the guard's field checks)."""
    read = kombu_json.orjson_reading(text, floats=True)
    expected = kombu_utils_json.loads(text)
    if name in {"int-64-min-less-one", "uint-64-plus-one", "huge-int"}:
        assert not same(read, expected)
        assert json.dumps(read) == json.dumps(json.loads(str(text), parse_int=float))
    else:
        assert read is kombu_json.NOT_THE_SAME or same(read, expected)


def raised(loads: Any, text: Any) -> BaseException:
    try:
        loads(text)
    except Exception as error:  # whatever it is, both must raise it
        return error
    raise AssertionError("did not raise")


RAISES = [
    ("not-utf8", b"\xff[]"),
    ("not-utf8-in-string", b'["caf\xe9"]'),
    ("not-utf8-bytearray", bytearray(b'["\xc3"]')),
    ("not-utf8-memoryview", memoryview(b'{"a": "\xed\xa0\x80"}')),
    ("cut", "[1,"),
    ("empty", ""),
    ("bom", "\ufeff[]"),
    ("trailing-comma", "[1, 2,]"),
    ("single-quotes", "['a']"),
    ("unknown-type-object", '{"__type__": "nope", "__value__": 1}'),
    ("bad-type-value", '{"__type__": "datetime", "__value__": "not a time"}'),
    ("deeper-than-both-go", nested(2000)),
]


@pytest.mark.parametrize(("name", "text"), RAISES, ids=[t[0] for t in RAISES])
def test_it_raises_where_kombu_raises(name: str, text: Any) -> None:
    """loads() raises what kombu's loads raises, with the same message."""
    expected = raised(kombu_utils_json.loads, text)
    error = raised(kombu_json.loads, text)
    assert (type(error), str(error)) == (type(expected), str(expected))


@pytest.fixture
def deep_stack_allowed() -> Iterator[None]:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + 2000)
    yield
    sys.setrecursionlimit(limit)


@pytest.mark.parametrize("depth", [1000, 1024])
def test_past_the_interpreter_s_stack_it_reads_what_kombu_reads_with_more_stack(
    depth: int, deep_stack_allowed: None
) -> None:
    """The one difference, and a known one: kombu's json runs out of the interpreter's stack
    about 1,000 levels down less the caller's depth (RecursionError), where orjson reads up
    to 1,024. It reads what kombu reads given the stack, and the consumer rejects a body
    nested past 64 levels either way."""
    text = nested(depth)

    assert same(kombu_json.loads(text), kombu_utils_json.loads(text))


@pytest.mark.parametrize("depth", [1000, 1024])
def test_kombu_runs_out_of_stack_where_the_fast_path_reads(depth: int) -> None:
    """kombu's own reading of 1,000 to 1,024 levels still raises RecursionError at the
    interpreter's default limit: when kombu reads it, the difference above is gone."""
    assert sys.getrecursionlimit() == 1000
    assert isinstance(raised(kombu_utils_json.loads, nested(depth)), RecursionError)
    assert same(kombu_json.loads(nested(depth)), orjson.loads(nested(depth)))


class Level(IntEnum):
    HIGH = 2


class Reduced:
    def __json__(self) -> dict[str, int]:
        return {"reduced": 1}


def envelope(**headers: Any) -> list[Any]:
    """[payload, exchange, routing key] as kombu's QoS.append keeps a delivered message."""
    payload = {
        "body": '[["{\\"case_id\\": \\"c-1\\", \\"answer\\": \\"caf\\u00e9\\"}"], {}, {}]',
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"id": "t-1", "task": "evidence_coverage.score_batch", **headers},
        "properties": {"delivery_tag": "tag-1", "body_encoding": "utf-8", "priority": 0},
    }
    return [payload, "", "evidence"]


def deep(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


VALUES = [
    # (name, value, spelled by orjson)
    ("plain", envelope(retries=0, timelimit=[None, None], eta=None), True),
    ("empty", [[], {}, ""], True),
    ("non-ascii", envelope(origin="gen1@höst", argsrepr="'é' ✓ 😀"), True),
    ("control-characters", envelope(argsrepr='"\n\t\x00\\/'), True),
    ("float", envelope(expires=1.5e-05), True),
    ("float-edges", [0.1, -0.0, 5e-324, 1.7976931348623157e308, 1e16, 123456789.125], True),
    ("int-64", envelope(retries=2**63 - 1, low=-(2**63)), True),
    ("uint-64", envelope(retries=2**64 - 1), True),
    ("int-beyond-64", envelope(retries=2**64), False),
    ("int-below-64", envelope(retries=-(2**63) - 1), False),
    ("huge-int", envelope(retries=2**70), False),
    ("nan", envelope(expires=float("nan")), False),
    ("infinity", envelope(expires=float("inf")), False),
    ("minus-infinity", envelope(expires=float("-inf")), False),
    ("lone-surrogate", envelope(origin="\ud800"), False),
    ("lone-surrogate-key", envelope(stamps={"\udc80": 1}), False),
    ("pair", envelope(origin="\U0001f600"), True),
    ("datetime", envelope(eta=datetime(2026, 12, 7, 12, 0, tzinfo=UTC)), False),
    ("datetime-naive", envelope(eta=datetime(2026, 12, 7, 12, 0)), False),
    ("date", envelope(day=date(2026, 12, 7)), False),
    ("time", envelope(at=time(12, 30)), False),
    ("uuid", envelope(root_id=uuid.UUID(int=7)), False),
    ("decimal", envelope(weight=Decimal("0.1")), False),
    ("bytes", envelope(raw=b"text"), False),
    ("bytes-not-utf8", envelope(raw=b"\xff\x00"), False),
    ("type-key-as-data", envelope(meta={"__type__": "x"}), True),
    ("type-object-as-data", envelope(meta={"__type__": "decimal", "__value__": "1"}), True),
    ("tuple", envelope(timelimit=(None, None)), False),
    ("int-key", envelope(stamps={1: "x"}), False),
    ("bool-key", envelope(stamps={True: "x"}), False),
    ("none-key", envelope(stamps={None: "x"}), False),
    ("float-key", envelope(stamps={1.5: "x"}), False),
    ("int-enum", envelope(priority=Level.HIGH), False),
    ("str-subclass", envelope(origin=type("Name", (str,), {})("n")), False),
    ("json-reducer", envelope(reduced=Reduced()), False),
    ("nesting-200", deep(200), True),
]


@pytest.mark.parametrize(("name", "value", "fast"), VALUES, ids=[case[0] for case in VALUES])
def test_the_copy_reads_back_as_kombu_s_own(name: str, value: Any, fast: bool) -> None:
    """dumps() spells what kombu's loads reads back as it reads kombu's dumps of the same value
    (same values, same types, same key order); orjson spells only the plain values."""
    spelled = kombu_json.dumps(value)

    assert isinstance(spelled, bytes) is fast
    assert same(
        kombu_utils_json.loads(spelled), kombu_utils_json.loads(kombu_utils_json.dumps(value))
    )


@pytest.mark.parametrize(
    "value",
    [{1, 2}, object(), envelope(bad=complex(1, 2))],
    ids=["set", "object", "complex-in-envelope"],
)
def test_the_copy_raises_where_kombu_raises(value: Any) -> None:
    """What kombu's dumps cannot spell raises the same error."""
    expected = raised(kombu_utils_json.dumps, value)
    error = raised(kombu_json.dumps, value)
    assert (type(error), str(error)) == (type(expected), str(expected))


@pytest.fixture
def installed() -> Iterator[None]:
    before = serialization.registry._decoders["application/json"]
    kombu_json.install()
    yield
    serialization.registry._decoders["application/json"] = before


@pytest.mark.usefixtures("installed")
def test_installed_it_decodes_kombu_s_json_content_and_keeps_its_encoder() -> None:
    """install() makes loads() kombu's "json" decoder and keeps kombu's encoder."""
    assert serialization.registry._decoders["application/json"] is kombu_json.loads
    content_type, encoding, body = serialization.dumps({"eta": datetime(2026, 1, 1)}, "json")
    assert (content_type, encoding) == ("application/json", "utf-8")
    assert serialization.loads(body, content_type, encoding) == {"eta": datetime(2026, 1, 1)}
    assert serialization.loads(BATCH, content_type, encoding) == json.loads(BATCH)
    with pytest.raises(DecodeError):
        serialization.loads("[1,", content_type, encoding)
