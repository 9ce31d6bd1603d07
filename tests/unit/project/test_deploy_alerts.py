"""deploy/alerts/: Loki and Prometheus rules are complete, fire on the alert records and the
lines of a task failing on a bug, name only agreed metrics, and pass promtool's tests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

import pytest

from contracts.record_models import CONTRACT_DRIFT, NONDETERMINISM
from tests.conftest import ROOT
from tests.unit.project.deploy_files import DEPLOY, yaml_documents
from worker.cli import COMMANDS
from worker.constants import TASK_FAILED, UNRECORDABLE
from worker.observability.logging import SERVICE_NAME
from worker.observability.metrics import LATENCY_BUCKETS

# The metric names agreed with the metrics work (README "Metrics"), with the suffixes a
# histogram's series carry.
METRIC_NAMES = {
    "evidence_coverage_messages_total",
    "evidence_coverage_nondeterminism_alerts_total",
    "evidence_coverage_contract_drift_alerts_total",
    "evidence_coverage_rejected_total",
    "evidence_coverage_store_unavailable",
    "evidence_coverage_ledger_unrecorded",
    "evidence_coverage_regrades_total",
    "evidence_coverage_flips_total",
    *(f"evidence_coverage_scoring_seconds{suffix}" for suffix in ("_bucket", "_sum", "_count")),
}


def rules(name: str) -> list[dict[str, Any]]:
    """The alerting rules (recording rules, which only name a series, left out)."""
    (document,) = yaml_documents(DEPLOY / "alerts" / name)
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


@pytest.mark.parametrize("name", ["loki-rules.yaml", "prometheus-rules.yaml"])
def test_alert_rules_are_complete(name: str) -> None:
    """Every rule has a name, an expression, a severity and a summary; labels it templates
    are ones its expression keeps; commands it suggests exist."""
    for rule in rules(name):
        assert rule["alert"]
        assert rule["expr"]
        assert rule["labels"]["severity"] in {"critical", "warning"}
        text = " ".join(rule["annotations"].values())
        kept = set(re.findall(r"by \(([^)]*)\)", rule["expr"])[-1].replace(" ", "").split(","))
        assert set(re.findall(r"\$labels\.(\w+)", text)) <= kept
        assert set(re.findall(r"evidence-worker (\w+)", text)) <= set(COMMANDS)


@pytest.mark.parametrize(
    ("event", "label"),
    [(NONDETERMINISM, "input_hash"), (CONTRACT_DRIFT, "contract_version, case_id")],
)
def test_loki_rules_fire_on_alert_records(event: str, label: str) -> None:
    """A LogQL rule per alert kind selects the shipped stream, filters on the alert's event
    name and alerts per input hash (nondeterminism) or per case (contract drift)."""
    (rule,) = [r for r in rules("loki-rules.yaml") if f'| event="{event}"' in r["expr"]]
    expression = rule["expr"]
    assert f'{{service_name="{SERVICE_NAME}"}}' in expression
    assert f"sum by ({label}" in expression


def test_a_loki_rule_fires_on_tasks_failing_on_a_bug() -> None:
    """One critical rule per event and task for the lines a task failing on a bug writes."""
    (rule,) = [r for r in rules("loki-rules.yaml") if "task_failed" in r["expr"]]
    selector = re.search(r'\| event=~"([^"]+)"', rule["expr"])
    assert selector is not None
    pattern = re.compile(selector.group(1))
    assert [pattern.fullmatch(event) is not None for event in (TASK_FAILED, UNRECORDABLE)] == [
        True,
        True,
    ]
    assert pattern.fullmatch("evidence_coverage.scored") is None
    assert "sum by (event, task_name)" in rule["expr"]
    assert rule["labels"]["severity"] == "critical"


def test_prometheus_rules_use_only_agreed_metrics() -> None:
    """The counter rule watches the nondeterminism counter; every metric named is agreed."""
    expressions = [rule["expr"] for rule in rules("prometheus-rules.yaml")]
    assert "evidence_coverage_nondeterminism_alerts_total" in expressions[0]
    assert "evidence_coverage_contract_drift_alerts_total" in expressions[1]
    named = {name for expr in expressions for name in re.findall(r"evidence_coverage_\w+", expr)}
    assert named <= METRIC_NAMES


def promtool() -> str:
    """promtool from PROMTOOL or the PATH (.ci/run unpacks Debian's); CI must have it."""
    found = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not on the PATH: .ci/run unpacks it from Debian's prometheus")
        pytest.skip("promtool not found: apt-get download prometheus && dpkg-deb -x it")
    return found


@pytest.mark.parametrize(
    "arguments",
    [["check", "rules", "prometheus-rules.yaml"], ["test", "rules", "prometheus-rules.test.yaml"]],
)
def test_promtool_accepts_the_rules_and_their_tests(arguments: list[str]) -> None:
    """The rule tests pin the alerts' labels and text, that the first alert after a restart
    fires (counters start at 0), and that a counter which appears at 1 would fire nothing."""
    result = subprocess.run(
        [promtool(), *arguments],
        cwd=ROOT / "deploy" / "alerts",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_latency_threshold_is_inside_the_histogram() -> None:
    """histogram_quantile cannot exceed the largest finite bucket, so the threshold must be
    below it or the rule could never fire."""
    (rule,) = [r for r in rules("prometheus-rules.yaml") if "histogram_quantile" in r["expr"]]
    threshold = float(rule["expr"].rsplit(">", 1)[1])
    assert threshold < max(LATENCY_BUCKETS)
