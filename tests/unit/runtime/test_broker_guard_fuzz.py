"""The BRPOP guard under arbitrary input: whatever a queue item holds (any bytes, any JSON,
any nesting, bad UTF-8, huge strings, wrong types in an envelope's fields), the guard returns
None or a reason and never raises, since in the worker's event loop a raise stops the worker
with the item already popped and gone; and an item it passes is one kombu and Celery take."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_json

from worker.runtime.consumer import (
    MAX_NESTING,
    NOT_AN_ENVELOPE,
    foreign_item_problem,
    guard_brpop_reply,
    wrap_foreign_item,
)

# Small enough that generated items cross it, so the size bound is exercised too.
MAX_ITEM_BYTES = 4_096


class StubChannel:
    """What the guard uses of kombu's Redis channel: its Message class and body codecs."""

    sep = kombu_redis.Channel.sep
    Message = kombu_redis.Channel.Message
    codecs = kombu_redis.Channel.codecs
    decode_body = kombu_redis.Channel.decode_body
    max_item_bytes = MAX_ITEM_BYTES


json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
# A field's value: anything JSON, or what kombu and Celery write there.
field_values = json_values | st.sampled_from(["", "tag-1", "evidence_coverage.score", "base64"])


class Raw(str):
    """JSON text put into an item as it is: nesting too deep for json.dumps to write."""


@st.composite
def nested(draw: st.DrawFn) -> Raw:
    """A list or object nested 1 to 3,000 levels (the issue's item: 100,000, tested alone)."""
    depth = draw(st.integers(1, 3_000))
    shape = draw(st.sampled_from(["lists", "objects", "both"]))
    text = json.dumps(draw(json_scalars))
    for level in range(depth):
        in_list = shape == "lists" or (shape == "both" and level % 2 == 0)
        text = f"[{text}]" if in_list else f'{{"k": {text}}}'
    return Raw(text)


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """A kombu envelope as its Redis transport writes one, some fields replaced, dropped or
    nested deep."""
    envelope: dict[str, Any] = {
        "body": "W1tdLCB7fSwge31d",  # [[], {}, {}] in base64
        "content-type": "application/json",
        "content-encoding": "utf-8",
        "headers": {"task": "evidence_coverage.score", "id": "t-1", "retries": 0},
        "properties": {
            "body_encoding": "base64",
            "delivery_tag": "tag-1",
            "delivery_info": {"exchange": "", "routing_key": "q"},
            "priority": 0,
        },
    }
    fields = [
        ("body",),
        ("content-type",),
        ("content-encoding",),
        ("headers",),
        ("properties",),
        ("headers", "task"),
        ("headers", "id"),
        ("headers", "eta"),
        ("headers", "retries"),
        ("headers", "timelimit"),
        ("properties", "body_encoding"),
        ("properties", "delivery_tag"),
        ("properties", "delivery_info"),
        ("properties", "delivery_info", "exchange"),
        ("properties", "delivery_info", "routing_key"),
    ]
    for path in draw(st.lists(st.sampled_from(fields), max_size=4)):
        parent: Any = envelope
        for key in path[:-1]:
            parent = parent[key] if isinstance(parent.get(key), dict) else {}
        if draw(st.booleans()):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = draw(field_values | nested())
    return envelope


def as_item(value: Any) -> bytes:
    """`value` as JSON, each Raw in it written as it is."""
    raws: list[Raw] = []

    def placeholder(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value)
            return f"\x00raw-{len(raws) - 1}-9f1c\x00"
        if isinstance(value, dict):
            return {key: placeholder(child) for key, child in value.items()}
        if isinstance(value, list):
            return [placeholder(child) for child in value]
        return value

    text = json.dumps(placeholder(value))
    for index, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw-{index}-9f1c\x00"), raw, 1)
    return text.encode()


@st.composite
def damaged(draw: st.DrawFn, items: st.SearchStrategy[bytes]) -> bytes:
    """An item with bytes that are not UTF-8 put in, or cut short, or padded past the limit."""
    item = draw(items)
    how = draw(st.sampled_from(["bad-utf8", "cut", "huge", "as-is"]))
    if how == "bad-utf8":
        at = draw(st.integers(0, len(item)))
        return (
            item[:at]
            + draw(st.sampled_from([b"\x80", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80"]))
            + item[at:]
        )
    if how == "cut":
        return item[: draw(st.integers(0, len(item)))]
    if how == "huge":
        return (
            item + b" " * (MAX_ITEM_BYTES + 1 - len(item)) if len(item) <= MAX_ITEM_BYTES else item
        )
    return item


queue_items = st.one_of(
    st.binary(max_size=300),
    json_values.map(as_item),
    nested().map(as_item),
    envelopes().map(as_item),
    damaged(envelopes().map(as_item)),
    damaged(json_values.map(as_item)),
    st.text(max_size=200),  # a client with decode_responses hands over text
)

fuzz = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def kombu_and_celery_take(item: bytes | str) -> None:
    """What kombu's Redis transport and Celery's consumer do with an item in the event loop
    before any check of their own; raises where they would."""
    payload = kombu_json.loads(item.decode(errors="replace") if isinstance(item, bytes) else item)
    message = StubChannel.Message(payload, channel=StubChannel())
    info = message.delivery_info
    # kombu files it in the unacked hash under its delivery tag, with its exchange and key.
    unacked = {message.delivery_tag: json.dumps([payload, info["exchange"], info["routing_key"]])}
    headers = message.headers or {}
    # Celery looks its task up by name, and its id up among the revoked.
    strategies: dict[Any, None] = {"evidence_coverage.score": None}
    revoked = {"t-revoked"}
    assert strategies.get(headers.get("task")) is None
    assert headers.get("id") not in revoked
    assert len(unacked) == 1


@fuzz
@given(queue_items)
def test_the_guard_never_raises_and_passes_only_what_kombu_and_celery_take(
    item: bytes | str,
) -> None:
    """None (a message kombu and Celery take) or a reason naming the item for what it is."""
    problem = foreign_item_problem(item, StubChannel(), MAX_ITEM_BYTES)

    if problem is None:
        kombu_and_celery_take(item)
    else:
        assert isinstance(problem, str)
        assert problem.startswith("not a message envelope: the queue item ")


@fuzz
@given(queue_items, st.sampled_from([b"q", b"q\x06\x163", b"\xff"]))
def test_a_guarded_reply_is_the_item_or_a_message_the_guard_passes(
    item: bytes | str, list_name: bytes
) -> None:
    """Whatever the reply held, the guard returns it unchanged or a wrapped item that itself
    passes the guard, carries the item whole and names the problem."""
    name, returned = guard_brpop_reply(StubChannel(), None, [list_name, item])

    assert name == list_name
    if returned is not item:
        assert foreign_item_problem(returned, StubChannel(), None) is None
        payload = json.loads(returned)
        message = StubChannel.Message(payload, channel=StubChannel())
        raw = item if isinstance(item, bytes) else item.encode("utf-8", "surrogatepass")
        assert message.body == raw or isinstance(item, str)
        assert message.headers[NOT_AN_ENVELOPE].startswith("not a message envelope: ")


@fuzz
@given(st.text())
def test_any_text_item_can_be_wrapped(item: str) -> None:
    """Lone surrogates included: wrapping never raises."""
    assert json.loads(wrap_foreign_item(item, "junk", "q"))["headers"] == {NOT_AN_ENVELOPE: "junk"}


def test_an_envelope_whose_headers_nest_a_hundred_thousand_deep_is_named_not_raised() -> None:
    """The issue's item: kombu's JSON raises RecursionError on it, which stopped the worker."""
    item = kombu_item_with_headers("[" * 100_000 + "]" * 100_000)

    assert foreign_item_problem(item, StubChannel(), None) == (
        f"not a message envelope: the queue item nests deeper than {MAX_NESTING} levels"
    )


def test_nesting_just_past_the_bound_is_named_and_at_it_is_not() -> None:
    """A header nested MAX_NESTING levels inside the envelope passes; one more does not."""
    inside = MAX_NESTING - 2  # the envelope and its headers are two levels
    at_bound = kombu_item_with_headers("[" * inside + "]" * inside)
    past = kombu_item_with_headers("[" * (inside + 1) + "]" * (inside + 1))

    assert foreign_item_problem(at_bound, StubChannel(), None) is None
    assert foreign_item_problem(past, StubChannel(), None) == (
        f"not a message envelope: the queue item nests deeper than {MAX_NESTING} levels"
    )


def kombu_item_with_headers(extra: str) -> bytes:
    """A real kombu envelope whose headers carry `extra` (raw JSON) under "x"."""
    envelope = json.dumps(
        {
            "body": "W1tdLCB7fSwge31d",
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "headers": {"task": "evidence_coverage.score", "id": "t-1", "x": None},
            "properties": {
                "body_encoding": "base64",
                "delivery_tag": "tag-1",
                "delivery_info": {"exchange": "", "routing_key": "q"},
            },
        }
    )
    return envelope.replace('"x": null', f'"x": {extra}').encode()
