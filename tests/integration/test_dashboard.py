"""deploy/grafana's dashboard against a real Prometheus (Debian's server, which .ci/services
unpacks beside promtool) scraping a real worker that has scored the example twice: every
panel's query returns data, and the numbers are the worker's own records'."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import worker_harness as harness
from tests.integration.test_publish_cli import BROKER_URL, run_console
from tests.integration.worker_harness import ROOT, Line, Worker, free_port
from worker.constants import RECONCILE
from worker.observability.metrics import MULTIPROC_ENV
from worker.runtime.celery_app import create_app
from worker.settings import Settings

pytestmark = pytest.mark.integration

start_worker = harness.start_worker
queue = harness.queue

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "evidence-coverage.json"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yaml"
RULES = ROOT / "deploy" / "alerts" / "prometheus-rules.yaml"
EXAMPLE = "contracts/examples/attribution-results.jsonl"
EXAMPLES = ROOT / "contracts" / "examples"
POLICY = EXAMPLES / "policy.toml"
# Grafana's own variables, as it would fill them in: windows that hold every sample of the
# test (a few seconds), so rate() and increase() see both batches.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "10m"}
SCRAPE_INTERVAL = "1s"
WAIT_SECONDS = 60.0


def prometheus_binary() -> str:
    """The server from PROMETHEUS or the PATH (.ci/services copies Debian's into .venv/bin)."""
    found = os.environ.get("PROMETHEUS") or shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not on the PATH: .ci/services unpacks it from Debian's")
        pytest.skip("the prometheus server was not found: run `make services` (.ci/services)")
    return found


class Prometheus:
    """A Prometheus server process and its HTTP query API."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector `expression` evaluates to now (a failed query fails the test)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expression}
        )
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", (expression, answer)
        assert answer["data"]["resultType"] == "vector", expression
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def values(self, expression: str, *labels: str) -> dict[tuple[str, ...], float]:
        """Each series' value, keyed by the values of `labels`."""
        return {
            tuple(series["metric"].get(label, "") for label in labels): float(series["value"][1])
            for series in self.query(expression)
        }

    def wait_for(self, expression: str, expected: float) -> None:
        """Poll until `expression` (one series) has scraped `expected`, or fail saying so."""
        deadline = time.monotonic() + WAIT_SECONDS
        got: dict[tuple[str, ...], float] = {}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited:\n{self.log.read_text()[-2000:]}")
            try:
                got = self.values(expression)
            except OSError:  # not listening yet
                got = {}
            if got == {(): expected}:
                return
            time.sleep(0.2)
        pytest.fail(f"{expression} never became {expected} (last: {got})")


def observing_policy(folder: Path) -> Path:
    """The example policy with an observation window open for a month from today (UTC), the
    example's previous policy beside it: the previous-rule panel has data to show."""
    until = (datetime.now(UTC).date() + timedelta(days=30)).isoformat()
    shutil.copy(EXAMPLES / "policy-2026-11.toml", folder / "policy-2026-11.toml")
    policy = folder / "policy.toml"
    policy.write_text(
        POLICY.read_text("utf-8")
        + f'\n[observe]\nprevious = "policy-2026-11.toml"\nuntil = "{until}"\n',
        "utf-8",
    )
    return policy


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[int], Prometheus]]:
    """Factory: Prometheus on a free port with deploy/'s config, scraping the worker on
    `metrics_port` every second and loading deploy/'s alert rules; stopped at teardown."""
    binary = prometheus_binary()
    started: list[subprocess.Popen[bytes]] = []

    def start(metrics_port: int) -> Prometheus:
        config: dict[str, Any] = yaml.safe_load(PROMETHEUS_CONFIG.read_text("utf-8"))
        config["global"].update(scrape_interval=SCRAPE_INTERVAL, evaluation_interval="1s")
        config["rule_files"] = [str(RULES)]
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": [f"127.0.0.1:{metrics_port}"]}]
        path = tmp_path / "prometheus.yaml"
        path.write_text(yaml.safe_dump(config), "utf-8")
        port, log = free_port(), tmp_path / "prometheus.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={path}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(process)
        return Prometheus(process, port, log)

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel, Grafana's variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expression = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expression = expression.replace(variable, value)
            queries.append((panel["title"], expression))
    return queries


def publish_example(worker_queue: str, key_prefix: str) -> None:
    """`evidence-worker publish` of the example: exit 2, its one invalid line is not sent."""
    run = run_console([EXAMPLE], queue=worker_queue, key_prefix=key_prefix)
    assert run.code == 2, run.stderr


def by_version_and_group(records: list[Line]) -> dict[tuple[str, ...], float]:
    """Valid records (with a value) counted per (contract_version, policy_group)."""
    counts = Counter(
        (record["contract_version"], record["policy_group"] or "none")
        for record in records
        if record.get("value") is not None
    )
    return {key: float(count) for key, count in counts.items()}


def test_every_panel_query_returns_the_worker_s_data(
    start_worker: Callable[..., Worker],
    start_prometheus: Callable[[int], Prometheus],
    queue: str,
    key_prefix: str,
    tmp_path: Path,
) -> None:
    """The example published twice (misses, then hits) and one body rejected: each panel's
    query has data in Prometheus, and counts, coverage values, thresholds and alerts are
    those of the worker's own records."""
    metrics_port = free_port()
    # On the broker run_console publishes to (the harness flushes the queue there).
    worker = start_worker(
        queue,
        broker_url=BROKER_URL,
        env={
            "EVIDENCE_METRICS_PORT": str(metrics_port),
            MULTIPROC_ENV: str(tmp_path / "metrics"),
            "EVIDENCE_POLICY_FILE": str(observing_policy(tmp_path)),
        },
    )
    worker.wait_ready()
    prometheus = start_prometheus(metrics_port)
    prometheus.wait_for('sum(up{job="evidence-coverage-worker"})', 1)

    # Two batches, each scraped before the next: a labelled series (coverage per version and
    # group) first appears with the first batch, and rate() needs it to grow after that.
    publish_example(queue, key_prefix)
    first = len(worker.wait_for(9))
    prometheus.wait_for("sum(evidence_coverage_messages_total)", first)
    publish_example(queue, key_prefix)
    app = create_app(Settings(broker_url=BROKER_URL))
    harness.publish_raw(app, queue, b'{"case_id": "not-a-message"}')
    records = worker.wait_for(2 * first + 1)
    # The beat's reconcile task, sent by hand: it sets the never-recorded gauge.
    app.send_task(RECONCILE, queue=queue)
    worker.wait_for(1, events=["evidence_coverage.reconcile"])
    app.close()
    prometheus.wait_for("sum(evidence_coverage_messages_total)", len(records))
    prometheus.wait_for("max(evidence_coverage_ledger_unrecorded)", 0)

    empty = []
    for title, expression in panel_queries():
        values = [float(series["value"][1]) for series in prometheus.query(expression)]
        if not values or any(math.isnan(value) for value in values):
            empty.append((title, expression, values))
    assert empty == []

    assert prometheus.values(
        "sum by (contract_version, policy_group) (evidence_coverage_value_count)",
        "contract_version",
        "policy_group",
    ) == by_version_and_group(records)
    assert prometheus.values("evidence_coverage_threshold", "policy_group") == {
        (group,): threshold
        for group, threshold in {
            (r["policy_group"], r["threshold"]) for r in records if r["threshold"] is not None
        }
    }
    # Every message `publish` sent carries its publish time; the raw body does not.
    assert prometheus.values("sum(evidence_coverage_publish_to_record_seconds_count)") == {
        (): 2 * first
    }
    alerts = len(worker.events("evidence_coverage.nondeterminism"))
    assert alerts == 1
    assert prometheus.values("sum(evidence_coverage_nondeterminism_alerts_total)") == {(): 1}
    assert prometheus.values("sum(evidence_coverage_rejected_total)") == {(): 1}
