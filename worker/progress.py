"""Progress on stderr for long runs: at most one line every few seconds, never on stdout."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Prints `<label>: <n> lines (<rate>/s)` when a run has gone on for a while."""

    def __init__(self, label: str, *, every_seconds: float = 2.0, stream: TextIO | None = None):
        self.label = label
        self.every = every_seconds
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._last = self.started
        self.count = 0

    def tick(self, count: int = 1) -> None:
        self.count += count
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            rate = self.count / (now - self.started)
            print(f"{self.label}: {self.count} lines ({rate:,.0f}/s)", file=self.stream)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started
