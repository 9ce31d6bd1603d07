"""The consumer bootstep behind the heartbeat file (worker/runtime/heartbeat.py), on kombu's own
timer,
the one the consumer's event loop fires."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kombu.asynchronous.timer import Timer
from structlog.testing import capture_logs

from worker.runtime.heartbeat import HeartbeatFileStep
from worker.settings import Settings


def consumer(heartbeat: Path | None) -> Any:
    """What the step reads from Celery's consumer: its app's settings and its timer."""
    settings = Settings(heartbeat_file=heartbeat, heartbeat_seconds=5)
    return SimpleNamespace(app=SimpleNamespace(settings=settings), timer=Timer())


def fire_due(timer: Timer) -> None:
    """Run the entries that are due, as a turn of the event loop does (kombu's Hub)."""
    for _, entry in timer:
        if entry is None:
            return
        entry()


def test_without_a_file_the_step_is_left_out(tmp_path: Path) -> None:
    """EVIDENCE_HEARTBEAT_FILE unset: Celery does not include the step."""
    c = consumer(None)

    assert HeartbeatFileStep(c).include_if(c) is False


def test_a_heartbeat_left_by_an_earlier_run_is_removed_when_the_consumer_is_built(
    tmp_path: Path,
) -> None:
    path = tmp_path / "heartbeat"
    path.touch()

    step = HeartbeatFileStep(consumer(path))

    assert step.include_if(consumer(path)) is True
    assert not path.exists()


def test_the_first_touch_waits_for_the_event_loop(tmp_path: Path) -> None:
    """start() only schedules: the file appears when the loop fires the timer."""
    path = tmp_path / "heartbeat"
    c = consumer(path)
    step = HeartbeatFileStep(c)

    step.start(c)
    assert not path.exists()
    fire_due(c.timer)

    assert path.exists()


def test_stop_cancels_the_touches_and_keeps_the_file(tmp_path: Path) -> None:
    """After stop() (a lost broker, a shutdown) the file stays and ages."""
    path = tmp_path / "heartbeat"
    c = consumer(path)
    step = HeartbeatFileStep(c)
    step.start(c)
    fire_due(c.timer)
    os.utime(path, (1, 1))

    step.stop(c)

    assert c.timer.queue
    assert all(scheduled.entry.canceled for scheduled in c.timer.queue)
    assert path.stat().st_mtime == 1


def test_an_unwritable_heartbeat_is_logged_once_per_outage(tmp_path: Path) -> None:
    """A touch that fails logs one WARNING, not one every few seconds; a success resets it."""
    path = tmp_path / "dir" / "heartbeat"
    step = HeartbeatFileStep(consumer(path))

    with capture_logs() as logs:
        step.beat()
        step.beat()
        path.parent.mkdir()
        step.beat()
        path.parent.joinpath("heartbeat").unlink()
        path.parent.rmdir()
        step.beat()

    warning = {
        "event": "evidence_coverage.heartbeat_unwritable",
        "log_level": "warning",
        "path": str(path),
        "problem": "No such file or directory",
        "why": "health checks will report this worker unhealthy",
    }
    assert logs == [warning, warning]
