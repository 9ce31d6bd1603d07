"""A worker's stdout is JSON lines from start to warm shutdown: one format for log shippers."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from tests.ecs import ecs_conflicts
from tests.integration import worker_harness as harness
from tests.integration.worker_harness import REDIS_PORT, Worker, send_scores
from worker.bench.launch import worker_command
from worker.constants import RECONCILE

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_failed_task_and_a_warm_shutdown_leave_only_json_lines_on_stdout(
    start_worker: Callable[..., Worker], queue: str, publisher: Callable[..., Celery], pool: str
) -> None:
    """A task's exception reaches the log through Celery's ExceptionInfo (in a prefork pool a
    billiard traceback proxy, not a traceback): the line still carries the type, message and
    frames as text. Celery's SIGTERM handler prints `worker: Warm shutdown (MainProcess)` as
    plain text; with JSON logs it is a JSON line, and the worker still shuts down warm. (One
    worker for both: each had its own.)"""
    worker = start_worker(queue, pool=pool)
    worker.wait_ready()

    publisher().send_task(RECONCILE, kwargs={"older_than_seconds": "soon"}, queue=queue)

    lines = worker.wait_until(
        lambda lines: any("exception.type" in line for line in lines),
        timeout=60.0,
        what="the task's failure",
    )
    (line,) = [line for line in lines if "exception.type" in line]
    assert (line["level"], line["logger"]) == ("error", "celery.app.trace")
    assert line["exception.type"] == "TypeError"
    assert line["exception.message"] == "unsupported type for timedelta seconds component: str"
    stack = line["exception.stacktrace"]
    assert stack.startswith("Traceback (most recent call last):\n")
    assert 'worker/runtime/tasks.py", line' in stack
    assert "in reconcile\n" in stack
    assert worker.unparsed() == []

    worker.stop()

    assert worker.process.returncode == 0
    assert worker.unparsed() == []
    (notice,) = worker.events("worker: Warm shutdown (MainProcess)")
    assert (notice["level"], notice["logger"]) == ("warning", "celery.apps.worker")


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


def loud_command(queue: str, pool: str = "prefork") -> list[str]:
    """The Procfile's command line without --quiet: Celery would print its banner."""
    command = worker_command(queue, hostname=f"{queue}@loud", pool=pool, concurrency=2)
    return [part for part in command if part != "--quiet"]


def wait_exit(worker: Worker, timeout: float = 30.0) -> int:
    try:
        return worker.process.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not exit within {timeout:.0f}s\n{worker}")


def test_without_quiet_the_banner_is_one_json_line(
    start_worker: Callable[..., Worker], queue: str
) -> None:
    """Celery's banner is plain text on stdout; in JSON mode it is one line with its facts."""
    worker = start_worker(queue, command=loud_command(queue))
    worker.wait_ready()

    worker.stop()

    assert worker.unparsed() == []
    (starting,) = worker.events("evidence_coverage.worker_starting")
    assert starting["hostname"] == f"{queue}@loud"
    assert starting["queues"] == [queue]
    assert starting["concurrency"] == 2
    assert starting["pool"] == "prefork"
    assert starting["broker"] == f"redis://127.0.0.1:{REDIS_PORT}/12"
    assert starting["store"] == f"redis://127.0.0.1:{REDIS_PORT}/14"
    assert "celery_version" in starting


@pytest.mark.parametrize(
    ("number", "notice", "exit_code"),
    [
        (signal.SIGINT, "worker: Warm shutdown (MainProcess)", 1),
        # Celery ends a cold shutdown with exit code 0, a Ctrl-C's warm one with 1.
        (signal.SIGQUIT, "worker: Cold shutdown (MainProcess)", 0),
    ],
)
def test_ctrl_c_and_quit_notices_are_json_lines(
    start_worker: Callable[..., Worker],
    queue: str,
    number: signal.Signals,
    notice: str,
    exit_code: int,
) -> None:
    """Ctrl-C and SIGQUIT make Celery say what it does: as JSON lines. (A second Ctrl-C races
    the warm shutdown it interrupts, so its notice and exit code are not pinned here.)"""
    worker = start_worker(queue, command=loud_command(queue))
    worker.wait_ready()

    worker.process.send_signal(number)

    assert wait_exit(worker) == exit_code
    assert worker.unparsed() == []
    notices = [
        line["event"] for line in worker.lines() if line.get("logger") == "celery.apps.worker"
    ]
    assert notice in notices
    assert [line["level"] for line in worker.events(notice)] == ["warning"]


def test_a_sigterm_before_ready_leaves_only_json_lines(
    start_worker: Callable[..., Worker], queue: str
) -> None:
    """A worker still waiting for its broker (so before `ready` and the handlers installed
    then) that is stopped says so in JSON too."""
    nobody = f"redis://127.0.0.1:{harness.free_port()}/0"
    worker = start_worker(queue, broker_url=nobody, command=None)
    worker.wait_until(
        lambda lines: any("Cannot connect" in str(line.get("event")) for line in lines),
        timeout=60.0,
        what="the worker to retry its broker",
    )

    worker.process.send_signal(signal.SIGTERM)

    wait_exit(worker)
    assert worker.unparsed() == []
    assert "Warm shutdown" not in worker.stderr_path.read_text("utf-8")


def test_with_ecs_every_line_of_a_worker_s_life_is_an_ecs_document(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """EVIDENCE_LOG_SCHEMA=ecs through a real worker: start-up, a record, shutdown; every line
    is an ECS document that an index with ECS's mappings takes."""
    worker = start_worker(queue, command=loud_command(queue), env={"EVIDENCE_LOG_SCHEMA": "ecs"})

    def actions(lines: list[dict[str, Any]]) -> list[str]:
        return [str(line.get("event", {}).get("action")) for line in lines]

    worker.wait_until(
        lambda lines: any(action.endswith(" ready.") for action in actions(lines)),
        timeout=90.0,
        what="the worker to be ready",
    )
    send_scores(publisher(), queue, [message_dict(case_id="ecs-1")])
    worker.wait_until(
        lambda lines: "evidence_coverage.scored" in actions(lines),
        timeout=60.0,
        what="the record",
    )
    worker.stop()

    documents = worker.lines()
    assert worker.unparsed() == []
    assert {"evidence_coverage.worker_starting", "evidence_coverage.scored"} <= set(
        actions(documents)
    )
    assert "worker: Warm shutdown (MainProcess)" in actions(documents)
    (record,) = [
        line for line in documents if line["event"]["action"] == "evidence_coverage.scored"
    ]
    assert (record["case_id"], record["log"]["logger"], record["message"]) == (
        "ecs-1",
        "evidence_coverage",
        "evidence_coverage.scored",
    )
    for document in documents:
        assert ecs_conflicts(document) == [], document["message"]
