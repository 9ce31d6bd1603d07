"""`evidence-worker health` against a real worker: unhealthy until it consumes, healthy while it
does, unhealthy again when its broker stops answering though the process lives on, and
healthy once it consumes again.

The fault is the fault proxy dropping every reply from Redis, connections left open: the
worker's process, its pool and its event loop all keep running, and only consuming stops, so a
check that passed here would prove nothing but that the process is alive. The worker runs the
Procfile's command line (heartbeat event on), with short broker timeouts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from tests.integration import worker_harness as harness
from tests.integration.fault_proxy import FaultProxy
from tests.integration.worker_harness import (
    AMQP_URL,
    ROOT,
    Line,
    Worker,
    scored_cases,
    send_scores,
)
from worker.bench.launch import worker_command

pytestmark = pytest.mark.integration
# The machine's RabbitMQ, one module at a time across processes (worker_harness.rabbitmq_turn).
rabbitmq_turn = harness.rabbitmq_turn

queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
proxy = harness.proxy
amqp_queue = harness.amqp_queue

MessageFactory = Callable[..., dict[str, Any]]
BROKER_DB = 12
HEARTBEAT_SECONDS = 0.5
MAX_AGE_SECONDS = 3.0
SHORT_TIMEOUTS = {
    "EVIDENCE_BROKER_SOCKET_TIMEOUT_SECONDS": "2",
    "EVIDENCE_BROKER_HEALTH_CHECK_SECONDS": "2",
    "EVIDENCE_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
}
# The consumer notices a silent broker within about twice the health check; then the file
# ages past max-age. Generous, for a busy machine.
UNHEALTHY_BOUND_SECONDS = 45.0
HEALTHY_BOUND_SECONDS = 60.0
EVIDENCE_WORKER = Path(sys.executable).with_name("evidence-worker")


def health(heartbeat: Path) -> subprocess.CompletedProcess[str]:
    """The probe's command, as the image runs it (the console script)."""
    return subprocess.run(
        [str(EVIDENCE_WORKER), "health", "--max-age", str(MAX_AGE_SECONDS)],
        env={**os.environ, "EVIDENCE_HEARTBEAT_FILE": str(heartbeat)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def health_until(
    heartbeat: Path, worker: Worker, *, healthy: bool, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run the check until it says `healthy` (or not) while the worker lives; fail at the
    deadline with its last answer."""
    deadline = time.monotonic() + timeout
    while True:
        result = health(heartbeat)
        assert worker.alive(), f"the worker exited ({worker.process.returncode})\n{worker}"
        if (result.returncode == 0) == healthy:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"health still {result.returncode} after {timeout:.0f}s: {result.stderr}")
        time.sleep(0.2)


def cannot_connect(lines: list[Line]) -> bool:
    return any("Cannot connect to" in str(line.get("event", "")) for line in lines)


@pytest.mark.timeout(240)
def test_health_follows_consuming_not_the_process(
    proxy: FaultProxy,
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    message_dict: MessageFactory,
    tmp_path: Path,
) -> None:
    """Unhealthy before the first consume (a fresh heartbeat left by an earlier run counts for
    nothing), healthy while consuming, unhealthy within the bound when the broker stops
    answering while the worker lives, and healthy again once it consumes again."""
    heartbeat = tmp_path / "worker.heartbeat"
    heartbeat.touch()  # as a restarted container finds its emptyDir
    proxy.drop_replies()
    hostname = f"{queue}-health@{os.uname().nodename}"
    worker = start_worker(
        queue,
        broker_url=proxy.url(BROKER_DB),
        env={**SHORT_TIMEOUTS, "EVIDENCE_HEARTBEAT_FILE": str(heartbeat)},
        command=worker_command(queue, hostname=hostname, concurrency=2),
    )

    worker.wait_until(cannot_connect, timeout=90, what="a failed connection to the broker")
    before = health(heartbeat)
    assert worker.alive()
    assert (before.returncode, before.stdout, before.stderr) == (
        1,
        "",
        f"evidence-worker: unhealthy: no heartbeat at {heartbeat}: the worker has not started "
        "consuming\n",
    )

    proxy.pass_traffic()
    worker.wait_ready()
    consuming = health_until(heartbeat, worker, healthy=True, timeout=HEALTHY_BOUND_SECONDS)
    assert consuming.stdout.startswith("healthy: last heartbeat ")
    first = message_dict(case_id="health-first")
    send_scores(publisher(), queue, [first])
    worker.wait_until(
        lambda lines: "health-first" in scored_cases(lines), timeout=60, what="the first record"
    )
    assert health(heartbeat).returncode == 0

    proxy.drop_replies()
    stopped = health_until(heartbeat, worker, healthy=False, timeout=UNHEALTHY_BOUND_SECONDS)
    assert stopped.stderr.startswith("evidence-worker: unhealthy: last heartbeat ")
    assert stopped.stderr.endswith(
        f" s ago at {heartbeat}, over the 3 s allowed: the worker's consumer has stopped "
        "consuming\n"
    )
    # Still unhealthy a while later: the consumer is not back while the broker is silent.
    time.sleep(2 * MAX_AGE_SECONDS)
    assert health(heartbeat).returncode == 1

    proxy.pass_traffic()
    health_until(heartbeat, worker, healthy=True, timeout=HEALTHY_BOUND_SECONDS)
    after = message_dict(case_id="health-after", answer="Returns within 30 days. [after]")
    send_scores(publisher(), queue, [after])
    worker.wait_until(
        lambda lines: "health-after" in scored_cases(lines),
        timeout=60,
        what="a record published after recovery",
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("broker", "pool"), [("amqp", "prefork"), ("redis", "solo")], ids=["rabbitmq", "solo-pool"]
)
def test_the_heartbeat_runs_on_every_broker_and_pool(
    broker: str,
    pool: str,
    start_worker: Callable[..., Worker],
    publisher: Callable[..., Celery],
    queue: str,
    message_dict: MessageFactory,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """On RabbitMQ, and with the solo pool (tasks in the consumer's own process), the
    consumer's event loop touches the file once it consumes."""
    heartbeat = tmp_path / "worker.heartbeat"
    broker_url, name = (
        (AMQP_URL, request.getfixturevalue("amqp_queue"))
        if broker == "amqp"
        else (harness.BROKER_URL, queue)
    )
    worker = start_worker(
        name,
        broker_url=broker_url,
        pool=pool,
        env={"EVIDENCE_HEARTBEAT_FILE": str(heartbeat), **SHORT_TIMEOUTS},
    )
    worker.wait_ready()

    health_until(heartbeat, worker, healthy=True, timeout=HEALTHY_BOUND_SECONDS)
    send_scores(publisher(broker_url), name, [message_dict(case_id=f"health-{broker}")])
    worker.wait_until(
        lambda lines: f"health-{broker}" in scored_cases(lines), timeout=60, what="the record"
    )
    time.sleep(2 * MAX_AGE_SECONDS)
    assert health(heartbeat).returncode == 0


@pytest.mark.timeout(120)
def test_a_heartbeat_file_in_a_missing_directory_stops_the_worker(tmp_path: Path) -> None:
    """The worker exits 2 with one line before `ready` rather than run unable to say it is
    healthy (every probe would restart it)."""
    missing = tmp_path / "missing"
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVIDENCE_") and key != "MIN_EVIDENCE_COVERAGE"
    }
    result = subprocess.run(
        worker_command(f"health-{tmp_path.name}"),
        cwd=ROOT,
        env={
            **clean,
            "EVIDENCE_BROKER_URL": harness.BROKER_URL,
            "EVIDENCE_HEARTBEAT_FILE": str(missing / "worker.heartbeat"),
        },
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    assert result.returncode == 2, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("evidence-worker:")] == [
        f"evidence-worker: configuration error: EVIDENCE_HEARTBEAT_FILE: directory {missing} "
        "does not exist"
    ]
    assert "ready" not in result.stdout
