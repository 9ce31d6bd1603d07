"""deploy/grafana and deploy/prometheus: compose mounts what exists, the provisioning files
agree with compose, and the dashboard asks only for metrics the worker exports.
(tests/integration/test_dashboard.py evaluates every query on a real Prometheus.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.project.deploy_files import COMPOSE, DEPLOY, compose
from worker.observability import metrics

GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "evidence-coverage.json"


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document


def mounts(service: str) -> dict[Path, str]:
    """A service's bind mounts: source (resolved from deploy/) to target."""
    found = {}
    for volume in compose()["services"][service]["volumes"]:
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            found[(COMPOSE.parent / source).resolve()] = target
    return found


def dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return document


def exported_metrics() -> set[str]:
    """Every series name the worker's Metrics class declares, with a histogram's suffixes."""
    source = Path(metrics.__file__).read_text(encoding="utf-8")
    names: set[str] = set()
    for kind, name in re.findall(r'(Counter|Gauge|Histogram)\(\s*"(\w+)"', source):
        suffixes = {
            "Counter": ["_total"],
            "Gauge": [""],
            "Histogram": ["_bucket", "_sum", "_count"],
        }[kind]
        names.update(name + suffix for suffix in suffixes)
    return names


@pytest.mark.parametrize("service", ["prometheus", "grafana"])
def test_compose_mounts_files_that_exist(service: str) -> None:
    """Every bind mount of Prometheus and Grafana names a file or folder in the repository."""
    assert [source for source in mounts(service) if not source.exists()] == []


def test_prometheus_scrapes_the_worker_s_metrics_port_and_loads_the_rules() -> None:
    config = load(DEPLOY / "prometheus" / "prometheus.yaml")
    port = compose()["services"]["worker"]["environment"]["EVIDENCE_METRICS_PORT"]
    (job,) = config["scrape_configs"]
    assert job["static_configs"] == [{"targets": [f"worker:{port}"]}]
    prometheus = mounts("prometheus")
    (rules,) = config["rule_files"]
    assert prometheus[(DEPLOY / "alerts" / "prometheus-rules.yaml").resolve()] == rules


def test_grafana_is_provisioned_with_compose_s_prometheus_and_the_dashboards() -> None:
    (datasource,) = load(GRAFANA / "provisioning" / "datasources" / "prometheus.yaml")[
        "datasources"
    ]
    assert (datasource["type"], datasource["url"]) == ("prometheus", "http://prometheus:9090")
    assert "prometheus" in compose()["services"]
    (provider,) = load(GRAFANA / "provisioning" / "dashboards" / "evidence-coverage.yaml")[
        "providers"
    ]
    assert mounts("grafana")[(GRAFANA / "dashboards").resolve()] == provider["options"]["path"]


def test_every_panel_uses_the_dashboard_s_datasource_variable() -> None:
    """No datasource uid of one Grafana is baked in: the JSON imports anywhere."""
    document = dashboard()
    (variable,) = document["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    panels = [panel for panel in document["panels"] if panel["type"] != "row"]
    assert {json.dumps(panel["datasource"]) for panel in panels} == {
        json.dumps({"type": "prometheus", "uid": "${datasource}"})
    }
    assert len({panel["id"] for panel in document["panels"]}) == len(document["panels"])


def test_the_dashboard_names_only_metrics_the_worker_exports() -> None:
    expressions = [
        target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", [])
    ]
    named = {name for expr in expressions for name in re.findall(r"evidence_coverage_\w+", expr)}
    assert named <= exported_metrics()
    # What the issue asks to see over time, each in some panel.
    for wanted in (
        "evidence_coverage_value_sum",
        "evidence_coverage_threshold",
        "evidence_coverage_rejected_total",
        "evidence_coverage_messages_total",
        "evidence_coverage_nondeterminism_alerts_total",
        "evidence_coverage_contract_drift_alerts_total",
        "evidence_coverage_publish_to_record_seconds_bucket",
        "evidence_coverage_store_unavailable",
        "evidence_coverage_regrades_total",
        "evidence_coverage_flips_total",
        "evidence_coverage_previous_rule_decisions_total",
    ):
        assert wanted in named, wanted


def test_review_rows_are_decided_rows_drawn_apart_from_failures() -> None:
    """The decided-rows panel counts `review` (SPEC §12) in its denominator and draws its
    share as a series of its own, never inside the failing share."""
    (panel,) = [p for p in dashboard()["panels"] if p["id"] == 3]
    decided = 'status=~"pass|fail|review"'
    assert [(t["legendFormat"], t["expr"].count(decided)) for t in panel["targets"]] == [
        ("failing", 1),
        ("in review", 1),
    ]
    assert [
        ('status="fail"' in t["expr"], 'status="review"' in t["expr"]) for t in panel["targets"]
    ] == [
        (True, False),
        (False, True),
    ]


def test_the_previous_rule_panel_splits_by_both_statuses() -> None:
    """The observation window's panel shows each (previous_status, status) as its own series."""
    (panel,) = [p for p in dashboard()["panels"] if p["id"] == 19]
    (target,) = panel["targets"]
    assert target["expr"] == (
        "sum by (previous_status, status) "
        "(rate(evidence_coverage_previous_rule_decisions_total[$__rate_interval]))"
    )
