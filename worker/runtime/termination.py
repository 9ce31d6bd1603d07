"""A pool process's SIGTERM waits until the message in hand has its record line.

When Celery loses the broker connection it cancels the tasks it cannot acknowledge
("cannot be acknowledged … Terminating it instead": `worker_cancel_long_running_tasks_on_
connection_loss`), which sends SIGTERM to their pool processes. There billiard's handler
(`billiard.common._shutdown_cleanup`, set after Celery's process initializer) raises
SystemExit wherever the process is: between the store's write and the record line, that left
a record with no line (SPEC §6: exactly one), and when the broker lost the message too there
was no redelivery to replay it.

Within `finishing()` (worker/runtime/tasks.py wraps a task's scoring in it) a SIGTERM is held:
a store outage being waited out is given up at its next try (worker/stores/durable.py), and the
handler that was there acts as the block ends, the lines written. Outside, it acts at once, as
before. A message handed back unacknowledged is replayed by its next delivery, which says so
on its line (`redelivered: true`).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from worker.stores import durable

_enabled = False  # install() was called: a pool process
_previous: Any = signal.SIG_DFL  # the SIGTERM handler held calls are handed to
_held = 0  # finishing() blocks open in this process
_pending: tuple[int, FrameType | None] | None = None  # a SIGTERM that came while one was


def install() -> None:
    """Hold SIGTERM in this (pool) process while a message is being finished. The handler is
    put in place as the first block opens: billiard sets its own after the process's
    initializer (where this is called), and the held signal goes to that one."""
    global _enabled  # noqa: PLW0603 - per process by design
    _enabled = True


def _take_over() -> None:
    global _previous  # noqa: PLW0603 - per process by design
    current = signal.getsignal(signal.SIGTERM)
    if current is not _on_sigterm:
        _previous = current
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _pending  # noqa: PLW0603 - a signal handler's one way out
    if not _held:
        _deliver(signum, frame)
        return
    _pending = (signum, frame)
    durable.give_up_waiting()


def _deliver(signum: int, frame: FrameType | None) -> None:
    """Do what the SIGTERM handler before ours would have done."""
    previous = _previous
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    if callable(previous):
        handler: Callable[[int, FrameType | None], Any] = previous
        handler(signum, frame)
    elif previous != signal.SIG_IGN:  # the default action: the process ends
        os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def finishing() -> Iterator[None]:
    """A SIGTERM within this block is acted on only as the block ends."""
    global _held, _pending  # noqa: PLW0603 - per process by design
    if _enabled:
        _take_over()
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if _pending is not None and not _held:
            signum, frame = _pending
            _pending = None
            _deliver(signum, frame)
