"""The consumer bootstep that touches EVIDENCE_HEARTBEAT_FILE while the worker consumes.

Not Celery's heartbeat event (worker/runtime/consumer.py BoundedHeart), which other processes read
over the broker: this one is a file that the container's own probes read (worker/runtime/health.py).

The touch runs on the consumer's timer, which the consumer's event loop fires between its
reads from the broker: a file that stays fresh proves that loop is turning, not only that the
process lives. The step starts after Celery's Tasks step, so its first touch comes once the
task consumer is consuming and the loop runs; when the consumer loses the broker, Celery stops
every step (this one too) and reconnects, so the file ages from the moment consuming stops
until it resumes, and the same happens when the loop itself is stuck.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import bootsteps

from worker.observability.logging import get_logger
from worker.runtime import health


class HeartbeatFileStep(bootsteps.StartStopStep):  # type: ignore[misc]  # celery has no hints
    """Touch the heartbeat file every EVIDENCE_HEARTBEAT_SECONDS while consuming."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        settings = c.app.settings
        self.path: Path | None = settings.heartbeat_file
        self.interval: float = settings.heartbeat_seconds
        self.enabled = self.path is not None
        self._entries: list[Any] = []
        self._failing = False
        super().__init__(c, **kwargs)
        if self.path is not None:
            # Before anything consumes: a file from an earlier run would read as healthy.
            health.forget(self.path)

    def start(self, c: Any) -> None:
        # Both entries fire from the event loop (with no loop, from the timer's thread): the
        # first touch as soon as it turns, after Celery has started the task consumer.
        self._entries = [
            c.timer.call_after(0.0, self.beat),
            c.timer.call_repeatedly(self.interval, self.beat),
        ]

    def stop(self, c: Any) -> None:
        # The file stays: its age is how long the worker has not consumed. Removing it would
        # fail a liveness probe at once, during every broker blip and warm shutdown alike.
        for entry in self._entries:
            entry.cancel()
        self._entries = []

    shutdown = stop

    def beat(self) -> None:
        assert self.path is not None
        try:
            health.touch(self.path)
        except OSError as error:
            # Said once per outage, not every few seconds; the probes report the rest.
            if not self._failing:
                get_logger().warning(
                    "evidence_coverage.heartbeat_unwritable",
                    path=str(self.path),
                    problem=error.strerror,
                    why="health checks will report this worker unhealthy",
                )
            self._failing = True
            return
        self._failing = False
