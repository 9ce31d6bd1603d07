"""The Redis store's Lua scripts, kept as .lua files beside this module (package data) and read
once, as the modules that run them are imported.

A file opens with a header of `--` lines (what the script is given and returns), which is not
part of the script: the server is sent only what follows it, so the documentation costs no
bytes on an EVAL and does not change a script's SHA-1. A line `--#include <file>.lua` stands for
that file's script (its own header left out): the parts the one-server and the cluster scripts
share are written once."""

from __future__ import annotations

from importlib.resources import files

INCLUDE = "--#include "

# Every file read, scripts and the parts they include: a test checks that none lies unused.
read: set[str] = set()


def source(name: str) -> str:
    """The script in `<name>.lua`, its includes filled in, without its header."""
    read.add(name)
    text = files("worker.stores.redis").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and lines[start].startswith("--"):
        start += 1
    return "".join(
        source(line[len(INCLUDE) :].strip().removesuffix(".lua"))
        if line.startswith(INCLUDE)
        else line
        for line in lines[start:]
    )
