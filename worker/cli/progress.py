"""Progress on stderr for long runs, never on stdout.

On a terminal: one line rewritten in place, with a percentage and an ETA when the input's size
is known. Elsewhere (CI logs, files): a plain line every few seconds, nothing for short runs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from worker.human_counts import counted

if TYPE_CHECKING:
    from worker.cli.inputs import JsonLines

TERMINAL_REFRESH_SECONDS = 0.2


class Progress:
    """Counts lines; `done()` (bytes read so far) and `total` (bytes) give the percentage."""

    def __init__(
        self,
        label: str,
        *,
        every_seconds: float = 2.0,
        stream: TextIO | None = None,
        done: Callable[[], int] | None = None,
        total: Callable[[], int | None] | None = None,
    ) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.terminal = _is_terminal(self.stream)
        self.every = TERMINAL_REFRESH_SECONDS if self.terminal else every_seconds
        self._done = done
        self._total = total
        self.started = time.monotonic()
        self._last = self.started
        self._drawn = False
        self.count = 0

    def tick(self, count: int = 1) -> None:
        self.count += count
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        line = self.line(now)
        if self.terminal:
            self.stream.write(f"\r\x1b[K{line}")
            self.stream.flush()
            self._drawn = True
        else:
            print(line, file=self.stream, flush=True)

    def line(self, now: float) -> str:
        """`<label>: <n> lines (<rate>/s)`, then `, <pct>%, ETA <m:ss>` when the size is known."""
        elapsed = max(now - self.started, 1e-9)
        text = f"{self.label}: {counted(self.count, 'line')} ({self.count / elapsed:,.0f}/s)"
        done = self._done() if self._done else 0
        total = self._total() if self._total else None
        if total and done:
            fraction = min(done / total, 1.0)
            remaining = elapsed * (1 - fraction) / fraction
            text += f", {fraction:.0%}, ETA {_clock(remaining)}"
        return text

    def finish(self) -> None:
        """Clear the terminal line, so the summary starts on a clean line."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def process_elapsed() -> float:
    """Seconds since this process started, as `time` would report a command's run."""
    return time.monotonic() - process_started()


def process_started() -> float:
    """When this process started, on time.monotonic()'s clock (Linux; elsewhere, now)."""
    try:
        with (
            open("/proc/self/stat", encoding="ascii") as stat,
            open("/proc/uptime", encoding="ascii") as uptime,
        ):
            # Fields after the ")" that closes the command name; starttime is the 20th.
            start_ticks = int(stat.read().rpartition(")")[2].split()[19])
            since_boot = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return time.monotonic()
    age = since_boot - start_ticks / os.sysconf("SC_CLK_TCK")
    return time.monotonic() - max(age, 0.0)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def over_input(label: str, source: JsonLines) -> Progress:
    """A Progress over an input file: its percentage is the share of its bytes read."""
    return Progress(label, done=lambda: source.position, total=lambda: source.size)
