"""The Redis store's Lua scripts, kept as .lua files beside this module (package data) and read
once, as the modules that run them are imported.

A file opens with a header of `--` lines (what the script is given and returns), which is not
part of the script: the server is sent only what follows it, so the documentation costs no
bytes on an EVAL and does not change a script's SHA-1. A line `--#include <file>.lua` stands for
that file's script (its own header left out): the parts the one-server and the cluster scripts
share are written once. `--#include codec` stands for codec_header(): the keys of an attempt's
fields, which worker/stores/codec.py alone defines, as Lua constants."""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files

from worker.stores import codec

INCLUDE = "--#include "

# Every file read, scripts and the parts they include: a test checks that none lies unused.
read: set[str] = set()


def codec_header() -> str:
    """Lua locals for what record.lua writes of an attempt or looks for in a stored one, from
    codec.py's field lists: the keys before a whole attempt's own fields (OWN_KEYS), the
    outcome's first key (VALUE_AT), the key a compact first starts its shared members with
    (COMPACT_KEY) and the pattern that finds them in a stored first (SHARED_START)."""
    own = ", ".join(map(_quoted, codec.OWN_KEYS))
    start, then = codec.SHARED_START_PARTS
    return (
        f"local OWN_KEYS = {{{own}}}\n"
        f"local VALUE_AT = {_quoted(',' + codec.VALUE_KEY)}\n"
        f"local COMPACT_KEY = {_quoted(codec.COMPACT_KEY)}\n"
        f"local SHARED_START = {_quoted(_pattern(start) + '%d+' + _pattern(then))}\n"
    )


def _quoted(text: str) -> str:
    """A Lua string literal of `text` (JSON keys: no quote, backslash or line break to
    escape)."""
    if any(c in text for c in "'\\\n"):
        raise ValueError(f"not a plain Lua string: {text!r}")
    return f"'{text}'"


def _pattern(text: str) -> str:
    """`text` as a Lua pattern that matches it literally."""
    return "".join(f"%{c}" if c in "^$()%.[]*+-?" else c for c in text)


# Parts written by Python rather than read from a file, by the name an include gives.
GENERATED: dict[str, Callable[[], str]] = {"codec": codec_header}


def source(name: str) -> str:
    """The script in `<name>.lua`, its includes filled in, without its header."""
    read.add(name)
    text = files("worker.stores.redis").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and lines[start].startswith("--"):
        start += 1
    return "".join(_part(line) if line.startswith(INCLUDE) else line for line in lines[start:])


def _part(line: str) -> str:
    """What an include line stands for: a generated part, or another file's script."""
    name = line[len(INCLUDE) :].strip()
    if name in GENERATED:
        return GENERATED[name]()
    return source(name.removesuffix(".lua"))
