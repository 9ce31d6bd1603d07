"""A fast path for kombu's JSON (kombu.utils.json): read and written by orjson wherever that
gives what kombu's json gives.

kombu reads and writes JSON with the standard library's json, with an object hook and an
encoder of its own: "__type__" objects stand for datetimes, UUIDs, decimals and the like. In
the worker that is done on every task's 250 KB body, in Celery's main process and in the pool
process: a batch's body took 254 µs to decode, against 65 µs for orjson (best of 5,
2026-12-07), and its unacknowledged copy's json.dumps was 9% of the main process in `bench`.

orjson reads and writes the same as kombu's json for all but a few things, which go to
kombu's json so that nothing is read or written differently:
- kombu's "__type__" objects: a decoded object with a "__type__" key is read by kombu, and
  only plain JSON values (str, int, finite float, bool, None, lists, str-keyed dicts) are
  written by orjson;
- an integer beyond 64 bits, which orjson 3.13 reads as a float (a decoded float of any kind
  is read by kombu, where the reader needs the value exact) and refuses to write;
- what orjson refuses to read (NaN and the infinities, a lone surrogate escape, nesting past
  1,024 levels) or to write (a lone surrogate): kombu decides, and raises where it raises.

`install()` registers `loads` as kombu's "json" decoder in this process (the worker's main
process, before the pool forks: worker/runtime/signals.py), keeping kombu's encoder. The
consumer's guard reads queue items with `orjson_reading` (worker/runtime/consumer.py), and
the unacknowledged copies are spelled with `dumps` (worker/runtime/kombu_qos.py).

The contract test (tests/unit/seams/test_kombu_json.py) reads and writes a table of inputs,
every case above included, with kombu's json and with this module, and fails on any
difference: run it on upgrading kombu or orjson (docs/development.md).
"""

from __future__ import annotations

import math
from typing import Any, Final

import orjson
from kombu import serialization
from kombu.utils import json as kombu_utils_json

CONTENT_TYPE = "application/json"

# The versions the contract test last passed with; it fails, naming the installed ones, until
# they are the locked ones (docs/development.md, "Upgrading kombu, Celery or structlog").
CHECKED_AGAINST: Final = {"kombu": "5.7.0", "orjson": "3.13.0"}

NOT_THE_SAME = object()  # orjson_reading(): kombu's json must read this text


def orjson_reading(text: Any, *, floats: bool = False) -> Any:
    """orjson's reading of `text`, or NOT_THE_SAME where kombu's json would read it otherwise
    or must decide: no "__type__" object, nothing orjson refuses and, unless `floats`, no
    float (which may be an integer beyond 64 bits: a reader that would catch such a value
    anyway, as the guard's field checks do, passes floats=True)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return NOT_THE_SAME
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is list:
            stack.extend(item)
        elif kind is dict:
            if "__type__" in item:
                return NOT_THE_SAME
            stack.extend(item.values())
        elif kind is float and not floats:
            return NOT_THE_SAME
    return value


def loads(text: Any) -> Any:
    """What kombu's json `loads` returns for `text` (str, bytes, bytearray or memoryview)."""
    value = orjson_reading(text)
    if value is NOT_THE_SAME:
        return kombu_utils_json.loads(text)  # type: ignore[no-untyped-call]
    return value


def dumps(value: Any) -> bytes | str:
    """`value` as JSON that kombu's `loads` reads back as it reads kombu's own `dumps` of it
    (orjson writes non-ASCII text as UTF-8 where kombu escapes it)."""
    if _plain(value):
        try:
            return orjson.dumps(value)
        except orjson.JSONEncodeError:
            pass
    return str(kombu_utils_json.dumps(value))  # type: ignore[no-untyped-call]


def _plain(value: Any) -> bool:
    """Whether `value` is made of str, int, finite float, bool, None, lists and str-keyed
    dicts (orjson writes NaN and the infinities as null, kombu's json as NaN...)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is float:
            if not math.isfinite(item):
                return False
            continue
        if kind is list:
            stack.extend(item)
        elif kind is dict:
            if not all(type(key) is str for key in item):
                return False
            stack.extend(item.values())
        else:
            return False
    return True


def install() -> None:
    """Decode kombu's "json" content with loads() in this process (and its forks)."""
    serialization.register(  # type: ignore[no-untyped-call]
        "json",
        kombu_utils_json.dumps,
        loads,
        content_type=CONTENT_TYPE,
        content_encoding="utf-8",
    )
