"""Prometheus metrics of a real prefork worker, scraped over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from worker.app import create_app
from worker.bench.launch import worker_command
from worker.metrics import SINGLE_PROCESS_PROBLEM, known_message_labels
from worker.settings import Settings

pytestmark = pytest.mark.integration

BROKER_URL = "redis://127.0.0.1:6379/12"


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


@pytest.fixture
def metrics_worker(redis_url: str, key_prefix: str) -> Iterator[tuple[int, str]]:
    """A prefork worker (2 children) with EVIDENCE_METRICS_PORT set; yields (port, queue)."""
    port, queue = free_port(), f"{key_prefix}-metrics"
    env = {
        **os.environ,
        "EVIDENCE_BROKER_URL": BROKER_URL,
        "EVIDENCE_STORE_URL": redis_url,
        "EVIDENCE_KEY_PREFIX": key_prefix,
        "EVIDENCE_QUEUE": queue,
        "EVIDENCE_METRICS_PORT": str(port),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    worker = subprocess.Popen(
        worker_command(queue, pool="prefork", concurrency=2, heartbeat=False),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield port, queue
    finally:
        worker.send_signal(signal.SIGTERM)  # warm shutdown: the main process stops its pool
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        redis.Redis.from_url(BROKER_URL).delete(queue)


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


def test_every_counter_is_exported_at_zero_before_the_first_message(
    metrics_worker: tuple[int, str],
) -> None:
    """increase() needs a sample before the first increment: a counter that appears at 1
    (the first nondeterminism alert after a restart) would never fire an alert."""
    port, _ = metrics_worker
    samples = scrape_until(
        port, lambda got: ("evidence_coverage_nondeterminism_alerts_total", ()) in got
    )

    assert samples[("evidence_coverage_nondeterminism_alerts_total", ())] == 0
    assert samples[("evidence_coverage_contract_drift_alerts_total", ())] == 0
    assert samples[("evidence_coverage_rejected_total", ())] == 0
    assert samples[("evidence_coverage_scoring_seconds_count", ())] == 0
    assert samples[("evidence_coverage_store_unavailable", ())] == 0
    messages = {
        tuple(dict(labels)[key] for key in ("status", "cache", "owner")): value
        for (name, labels), value in samples.items()
        if name == "evidence_coverage_messages_total"
    }
    assert messages == dict.fromkeys(known_message_labels(), 0.0)
    assert ("fail", "miss", "attribution") in messages  # the parser-rollout row's series
    assert ("invalid", "none", "evaluation-data") in messages  # a rejected message's


def test_a_worker_whose_metrics_would_stay_empty_refuses_to_start(key_prefix: str) -> None:
    """A plugin that imports prometheus_client before worker_init (Flower does) leaves it in
    single-process mode: the worker says what to set and exits 2 instead of serving nothing."""
    env = {
        **os.environ,
        "EVIDENCE_BROKER_URL": BROKER_URL,
        "EVIDENCE_KEY_PREFIX": key_prefix,
        "EVIDENCE_METRICS_PORT": str(free_port()),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    celery_argv = worker_command(f"{key_prefix}-refused", heartbeat=False)[2:]  # after "-m"
    code = (
        "import sys, prometheus_client; from celery.__main__ import main; "
        f"sys.argv = {celery_argv!r}; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"evidence-worker: configuration error: {SINGLE_PROCESS_PROBLEM}"
    )
