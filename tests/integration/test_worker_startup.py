"""A worker that cannot work does not start: one line on stderr and exit 2, before `ready`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration import worker_harness
from tests.integration.worker_harness import BROKER_URL, REDIS_PORT, ROOT, Worker, free_port
from worker.bench.launch import worker_command

pytestmark = pytest.mark.integration

START_TIMEOUT_SECONDS = 60

start_worker = worker_harness.start_worker
queue = worker_harness.queue


def start(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the Procfile's worker command with these settings until it exits (or time runs out)."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EVIDENCE_") and key != "MIN_EVIDENCE_COVERAGE"
    }
    return subprocess.run(
        worker_command(f"startup-{tmp_path.name}"),
        cwd=ROOT,
        env={**clean, "EVIDENCE_BROKER_URL": BROKER_URL, **env},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_SECONDS,
        check=False,
    )


def problem_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    """stderr lines that are ours (Celery warns about running as root on its own)."""
    return [line for line in result.stderr.splitlines() if line.startswith("evidence-worker:")]


@pytest.mark.integration
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(
            {"MIN_EVIDENCE_COVERAGE": "1.5"},
            "evidence-worker: configuration error: MIN_EVIDENCE_COVERAGE='1.5' is outside 0.0..1.0",
            id="threshold-out-of-range",
        ),
        pytest.param(
            {"EVIDENCE_STORE_URL": "postgres://db/evidence"},
            "evidence-worker: configuration error: unknown store scheme 'postgres' in store URL "
            "(EVIDENCE_STORE_URL or --store): use sqlite:///path/to.db or redis://host:port/db",
            id="unknown-store-scheme",
        ),
        pytest.param(
            {"EVIDENCE_STORE_URL": f"redis://127.0.0.1:{REDIS_PORT}/99"},
            f"evidence-worker: configuration error: store redis://127.0.0.1:{REDIS_PORT}/99: the "
            "Redis server has no such database: use redis://host:port/db, db a database number the "
            "server has (0-15 by default)",
            id="redis-database-the-server-lacks",
        ),
        pytest.param(
            {"EVIDENCE_STORE_URL": f"redis://127.0.0.1:{REDIS_PORT}/abc"},
            f"evidence-worker: configuration error: EVIDENCE_STORE_URL: redis://127.0.0.1:{REDIS_PORT}/abc:"
            " database 'abc' is not a number: use redis://host:port/db, db a database number the "
            "server has (0-15 by default)",
            id="redis-database-not-a-number",
        ),
        pytest.param(
            {"EVIDENCE_MAX_DELIVERIES": "many"},
            "evidence-worker: configuration error: EVIDENCE_MAX_DELIVERIES: Input should be a "
            "valid integer, unable to parse string as an integer",
            id="bad-setting",
        ),
        pytest.param(
            {"EVIDENCE_TLS_CA_FILE": "/nonexistent/ca.pem"},
            "evidence-worker: configuration error: EVIDENCE_TLS_CA_FILE: Path does not point "
            "to a file",
            id="missing-tls-file",
        ),
    ],
)
def test_unusable_configuration_stops_the_worker_before_ready(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    """The worker exits 2 with one line naming the problem; it never reports ready."""
    result = start(tmp_path, **env)

    assert result.returncode == 2, result.stderr
    assert problem_lines(result) == [expected]
    assert "ready" not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(
            b'version = "v1"\n[groups.default]\nmin_coverage = 0.8\nmax = 1\n',
            ": groups.default.max: unknown key",
            id="unknown-key",
        ),
        pytest.param(
            b"\xff\xfe\x00binary",
            " is not UTF-8 text (invalid start byte at byte 0): save it as UTF-8",
            id="not-utf8",
        ),
    ],
)
def test_bad_policy_file_stops_the_worker(tmp_path: Path, content: bytes, problem: str) -> None:
    """A policy file the worker cannot use is refused at start-up, in one line naming it."""
    policy = tmp_path / "policy.toml"
    policy.write_bytes(content)

    result = start(tmp_path, EVIDENCE_POLICY_FILE=str(policy))

    assert result.returncode == 2, result.stderr
    assert problem_lines(result) == [
        f"evidence-worker: configuration error: policy file {policy}{problem}"
    ]
    assert "ready" not in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.integration
def test_a_store_that_is_only_away_does_not_stop_the_worker(
    start_worker: Callable[..., Worker], queue: str
) -> None:
    """An unreachable store is not a configuration error: the worker starts and retries."""
    worker = start_worker(queue, store_url=f"redis://127.0.0.1:{free_port()}/0")

    worker.wait_ready()
    assert worker.alive()
