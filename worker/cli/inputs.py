"""JSON-lines input for the one-process commands: numbered lines, clear errors, bytes kept raw;
and how messages name an input (source_name)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from worker.errors import InputError
from worker.settings import display_path

UTF8_BOM = b"\xef\xbb\xbf"


class JsonLines:
    """The non-blank lines of PATH (stdin for '-') as (1-based line number, line bytes).

    Bytes, not text: a line that is not UTF-8 becomes that line's invalid row instead of
    stopping the whole run. `size` and `position` (bytes) let a long run show how far it is.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.size: int | None = None
        self.position = 0

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        if self.path == "-":
            if sys.stdin is None:  # started with stdin closed (<&-)
                raise InputError("cannot read stdin: it is closed; pass a file instead of -")
            yield from self._numbered(sys.stdin.buffer)
            return
        file = Path(self.path)
        if file.is_dir():
            raise InputError(f"cannot read {display_path(self.path)}: it is a directory")
        try:
            handle = file.open("rb")
        except OSError as error:
            raise InputError(f"cannot read {display_path(self.path)}: {error.strerror}") from None
        with handle:
            yield from self._numbered(handle)

    def _numbered(self, handle: BinaryIO) -> Iterator[tuple[int, bytes]]:
        self.size = _regular_file_size(handle)
        try:
            for number, raw in enumerate(handle, start=1):
                self.position += len(raw)
                # A leading BOM (editors on Windows like to add one) is not part of the first row.
                line = raw.removeprefix(UTF8_BOM) if number == 1 else raw
                if line.strip():
                    # The terminator is not part of the message: without it a truncated line's
                    # parse error points into that line ("column 26"), not at "line 2 column 0".
                    yield number, line.rstrip(b"\r\n")
        except OSError as error:
            raise InputError(f"cannot read {display_path(self.path)}: {error.strerror}") from None


def _regular_file_size(handle: BinaryIO) -> int | None:
    """The size of a regular file (stdin redirected from one included); None for pipes."""
    try:
        info = os.fstat(handle.fileno())
    except (OSError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def read_jsonl(path: str) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, line bytes) for the non-blank lines of PATH, or stdin."""
    return iter(JsonLines(path))


def source_name(path: str) -> str:
    """How messages name an input: '-' reads as stdin."""
    return "stdin" if path == "-" else display_path(path)
