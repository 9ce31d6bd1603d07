"""Prometheus metrics of a real worker, scraped over HTTP, with Flower installed (the dev lock
pins it): its Celery CLI plugin imports prometheus_client as `celery` starts, so these workers
get PROMETHEUS_MULTIPROC_DIR in their environment before they start, as deploy/ sets it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.worker_harness import REDIS_PORT
from worker.bench.launch import worker_command
from worker.observability.metrics import MULTIPROC_ENV, SINGLE_PROCESS_PROBLEM, known_message_labels
from worker.runtime.celery_app import create_app
from worker.settings import Settings

pytestmark = pytest.mark.integration

BROKER_URL = f"redis://127.0.0.1:{REDIS_PORT}/12"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape_until(port: int, done: Callable[[Samples], bool], timeout: float = 60) -> Samples:
    """The worker's samples once `done` says so (or the last ones after `timeout`)."""
    deadline = time.monotonic() + timeout
    samples: Samples = {}
    while time.monotonic() < deadline:
        try:
            samples = scrape(port)
        except OSError:
            samples = {}
        if done(samples):
            break
        time.sleep(0.2)
    return samples


def worker_env(redis_url: str, key_prefix: str, queue: str, port: int) -> dict[str, str]:
    """This environment, with the worker's settings and no PROMETHEUS_MULTIPROC_DIR."""
    env = {
        **os.environ,
        "EVIDENCE_BROKER_URL": BROKER_URL,
        "EVIDENCE_STORE_URL": redis_url,
        "EVIDENCE_KEY_PREFIX": key_prefix,
        "EVIDENCE_QUEUE": queue,
        "EVIDENCE_METRICS_PORT": str(port),
    }
    env.pop(MULTIPROC_ENV, None)
    return env


@pytest.fixture
def start_metrics_worker(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> Iterator[Callable[..., tuple[int, str]]]:
    """Factory: a worker (prefork with 2 children, or `pool`) with EVIDENCE_METRICS_PORT set
    and PROMETHEUS_MULTIPROC_DIR preset to `multiproc_dir` (default: a path under tmp_path
    that does not exist yet, as on a fresh emptyDir); returns (port, queue). Each is stopped
    with a warm shutdown at teardown."""
    started: list[tuple[subprocess.Popen[bytes], str]] = []

    def start(*, pool: str = "prefork", multiproc_dir: Path | None = None) -> tuple[int, str]:
        port, queue = free_port(), f"{key_prefix}-metrics-{len(started)}"
        env = worker_env(redis_url, key_prefix, queue, port)
        env[MULTIPROC_ENV] = str(multiproc_dir or tmp_path / "tmp" / "evidence-coverage-metrics")
        worker = subprocess.Popen(
            worker_command(queue, pool=pool, concurrency=2, heartbeat=False),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        started.append((worker, queue))
        return port, queue

    yield start
    for worker, queue in started:
        worker.send_signal(signal.SIGTERM)  # warm shutdown: the main process stops its pool
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        redis.Redis.from_url(BROKER_URL).delete(queue)


@pytest.fixture
def metrics_worker(start_metrics_worker: Callable[..., tuple[int, str]]) -> tuple[int, str]:
    """A prefork worker (2 children), its multiprocess dir preset; (port, queue)."""
    return start_metrics_worker()


def messages_by_labels(samples: Samples) -> dict[tuple[str, ...], float]:
    """evidence_coverage_messages_total by (status, cache, owner)."""
    return {
        tuple(dict(labels)[key] for key in ("status", "cache", "owner")): value
        for (name, labels), value in samples.items()
        if name == "evidence_coverage_messages_total"
    }


def assert_every_counter_at_zero(samples: Samples) -> None:
    assert samples[("evidence_coverage_nondeterminism_alerts_total", ())] == 0
    assert samples[("evidence_coverage_contract_drift_alerts_total", ())] == 0
    assert samples[("evidence_coverage_rejected_total", ())] == 0
    assert samples[("evidence_coverage_scoring_seconds_count", ())] == 0
    assert samples[("evidence_coverage_store_unavailable", ())] == 0
    assert messages_by_labels(samples) == dict.fromkeys(known_message_labels(), 0.0)


def alerts_exported(samples: Samples) -> bool:
    return ("evidence_coverage_nondeterminism_alerts_total", ()) in samples


def test_counters_sum_over_pool_children(
    metrics_worker: tuple[int, str], message_dict: Callable[..., dict[str, Any]]
) -> None:
    """Messages by status and cache, rejections and alerts add up across both children."""
    port, queue = metrics_worker
    app = create_app(Settings(broker_url=BROKER_URL, queue=queue))
    first = message_dict(case_id="a")
    messages = [
        first,
        message_dict(case_id="b", answer="A different answer."),
        {**first, "case_id": "a-again"},
        {**first, "case_id": "a-changed", "supported_claim_ids": ["refund-window"]},
        message_dict(case_id="bad", answer="Another answer.", supported_claim_ids=["nope"]),
        {**first, "case_id": "typo", "unexpected": 1},
    ]
    for message in messages:
        app.send_task("evidence_coverage.score", args=[message], queue=queue)
        time.sleep(0.05)  # keep hit/conflict order deterministic across the two children

    samples = scrape_until(
        port,
        lambda got: got.get(("evidence_coverage_scoring_seconds_count", ()), 0) >= len(messages),
    )

    def messages_total(status: str, cache: str, owner: str = "none") -> float:
        key = (("cache", cache), ("owner", owner), ("status", status))
        return samples.get(("evidence_coverage_messages_total", key), 0.0)

    assert messages_total("scored", "miss") == 2
    assert messages_total("scored", "hit") == 1
    assert messages_total("scored", "conflict") == 1
    assert messages_total("invalid", "miss", "evaluation-data") == 1
    assert messages_total("invalid", "none", "evaluation-data") == 1
    assert samples[("evidence_coverage_rejected_total", ())] == 1
    assert samples[("evidence_coverage_nondeterminism_alerts_total", ())] == 1
    assert samples[("evidence_coverage_scoring_seconds_count", ())] == 6


def test_a_duplicate_delivery_is_counted_as_a_redelivery_alone(
    metrics_worker: tuple[int, str], message_dict: Callable[..., dict[str, Any]]
) -> None:
    """The same task delivered three times (an at-least-once broker's duplicates): one
    message recorded and counted, two redeliveries, no alert, no rejection."""
    port, queue = metrics_worker
    app = create_app(Settings(broker_url=BROKER_URL, queue=queue))
    for _ in range(3):
        app.send_task(
            "evidence_coverage.score",
            args=[message_dict(case_id="dup")],
            queue=queue,
            task_id="dup-1",
        )
        time.sleep(0.2)  # one after the other: the first records before the others arrive

    samples = scrape_until(
        port, lambda got: got.get(("evidence_coverage_redeliveries_total", ()), 0) >= 2
    )

    messages = messages_by_labels(samples)
    assert messages.pop(("scored", "miss", "none")) == 1
    assert set(messages.values()) == {0.0}
    assert samples[("evidence_coverage_redeliveries_total", ())] == 2
    assert samples[("evidence_coverage_scoring_seconds_count", ())] == 1
    assert samples[("evidence_coverage_rejected_total", ())] == 0
    assert samples[("evidence_coverage_nondeterminism_alerts_total", ())] == 0


def test_every_counter_is_exported_at_zero_before_the_first_message(
    metrics_worker: tuple[int, str],
) -> None:
    """increase() needs a sample before the first increment: a counter that appears at 1
    (the first nondeterminism alert after a restart) would never fire an alert."""
    port, _ = metrics_worker
    samples = scrape_until(port, alerts_exported)

    assert_every_counter_at_zero(samples)
    messages = messages_by_labels(samples)
    assert ("fail", "miss", "attribution") in messages  # the parser-rollout row's series
    assert ("invalid", "none", "evaluation-data") in messages  # a rejected message's


# Pools that run tasks in the worker's main process: Celery's solo pool sends
# worker_process_init itself as it is built; the threads pool sends none.
IN_PROCESS_POOLS = ["solo", "threads"]


@pytest.mark.parametrize("pool", IN_PROCESS_POOLS)
def test_an_in_process_pool_exports_every_counter_at_zero_before_the_first_message(
    start_metrics_worker: Callable[..., tuple[int, str]], pool: str
) -> None:
    """A pool with no processes of its own exports its counters at 0 from worker_init."""
    port, _ = start_metrics_worker(pool=pool)

    samples = scrape_until(port, alerts_exported)

    assert_every_counter_at_zero(samples)


@pytest.mark.parametrize("pool", IN_PROCESS_POOLS)
def test_an_in_process_pool_counts_a_scored_message(
    start_metrics_worker: Callable[..., tuple[int, str]],
    message_dict: Callable[..., dict[str, Any]],
    pool: str,
) -> None:
    """The counters made at start are the ones the worker's tasks count on."""
    port, queue = start_metrics_worker(pool=pool)
    app = create_app(Settings(broker_url=BROKER_URL, queue=queue))
    app.send_task("evidence_coverage.score", args=[message_dict(case_id=pool)], queue=queue)

    samples = scrape_until(
        port, lambda got: got.get(("evidence_coverage_scoring_seconds_count", ()), 0) >= 1
    )

    messages = messages_by_labels(samples)
    assert messages.pop(("scored", "miss", "none")) == 1
    assert set(messages.values()) == {0.0}


def write_earlier_run(directory: Path) -> None:
    """What a killed worker leaves in its multiprocess dir: counted messages and an alert, and
    a live gauge at 1 (it died waiting for the store)."""
    code = (
        "from worker.observability.metrics import Metrics; m = Metrics(enabled=True); "
        "m.alerts.inc(7); m.messages.labels(status='scored', cache='miss', owner='none').inc(5); "
        "m.store_waiting(True)"
    )
    directory.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, MULTIPROC_ENV: str(directory)},
        check=True,
        timeout=60,
    )


def test_an_earlier_run_s_files_in_a_preset_dir_do_not_count(
    start_metrics_worker: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    """A restarted container keeps its emptyDir: the worker empties the dir at start, so its
    counters start at 0, not at the dead run's values, and its gauge is not stuck at 1."""
    directory = tmp_path / "kept-emptydir"
    write_earlier_run(directory)
    earlier = sorted(path.name for path in directory.iterdir())
    kinds = ["counter", "gauge_livemax", "gauge_mostrecent", "histogram"]
    assert [name.rsplit("_", 1)[0] for name in earlier] == kinds  # each named by the dead pid

    port, _ = start_metrics_worker(multiproc_dir=directory)
    samples = scrape_until(port, alerts_exported)

    assert_every_counter_at_zero(samples)
    assert not set(earlier) & {path.name for path in directory.iterdir()}


def test_flower_s_plugin_imports_prometheus_client_as_celery_starts() -> None:
    """The premise of these tests: Flower is installed, and loading Celery's command line
    (what `celery worker` does before any worker code runs) imports prometheus_client."""
    code = (
        "import sys; import celery.bin.celery; "
        "print(sorted(m for m in ('flower.command', 'prometheus_client') if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert result.stdout.split("\n")[-2] == "['flower.command', 'prometheus_client']"


def test_a_worker_whose_metrics_would_stay_empty_refuses_to_start(
    redis_url: str, key_prefix: str
) -> None:
    """With Flower installed and no PROMETHEUS_MULTIPROC_DIR in its environment, prometheus_client
    is in single-process mode before worker_init: the worker says what to set and exits 2
    instead of serving nothing."""
    queue = f"{key_prefix}-refused"
    result = subprocess.run(
        worker_command(queue, heartbeat=False),
        env=worker_env(redis_url, key_prefix, queue, free_port()),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )

    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"evidence-worker: configuration error: {SINGLE_PROCESS_PROBLEM}"
    )
