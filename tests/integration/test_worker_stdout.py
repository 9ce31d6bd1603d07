"""A worker's stdout is JSON lines from start to warm shutdown: one format for log shippers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration import worker_harness as harness
from tests.integration.worker_harness import Worker

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_warm_shutdown_leaves_only_json_lines_on_stdout(
    start_worker: Callable[..., Worker], queue: str, pool: str
) -> None:
    """Celery's SIGTERM handler would print `worker: Warm shutdown (MainProcess)` as plain
    text; the worker installs it without that line, and still shuts down warm."""
    worker = start_worker(queue, pool=pool)
    worker.wait_ready()

    worker.stop()

    assert worker.process.returncode == 0
    assert worker.unparsed() == []
    assert "worker: Warm shutdown" not in worker.stdout_path.read_text("utf-8")
    assert any(line.get("logger") == "celery.apps.worker" for line in worker.lines())


def test_console_logs_keep_celery_s_shutdown_notice(
    start_worker: Callable[..., Worker], queue: str
) -> None:
    """With EVIDENCE_LOG_FORMAT=console (for people) Celery's own notice stays."""
    worker = start_worker(queue, pool="solo", env={"EVIDENCE_LOG_FORMAT": "console"})
    worker.wait_until(
        lambda _: "ready." in worker.stdout_path.read_text("utf-8"),
        timeout=60.0,
        what="the worker to be ready",
    )

    worker.stop()

    assert "worker: Warm shutdown (MainProcess)" in worker.stdout_path.read_text("utf-8")
