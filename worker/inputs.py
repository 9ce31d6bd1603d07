"""JSON-lines input for the one-process commands: numbered lines, clear errors, bytes kept raw."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from worker.errors import InputError

UTF8_BOM = b"\xef\xbb\xbf"


def read_jsonl(path: str) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, line bytes) for non-blank lines of PATH, or stdin for '-'.

    Bytes, not text: a line that is not UTF-8 becomes that line's invalid row instead of
    stopping the whole run.
    """
    if path == "-":
        yield from _numbered(sys.stdin.buffer)
        return
    file = Path(path)
    if file.is_dir():
        raise InputError(f"cannot read {path}: it is a directory")
    try:
        handle = file.open("rb")
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    with handle:
        yield from _numbered(handle)


def _numbered(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(lines, start=1):
        # A leading BOM (editors on Windows like to add one) is not part of the first row.
        line = raw.removeprefix(UTF8_BOM) if number == 1 else raw
        if line.strip():
            # The terminator is not part of the message: without it a truncated line's
            # parse error points into that line ("column 26"), not at "line 2 column 0".
            yield number, line.rstrip(b"\r\n")
