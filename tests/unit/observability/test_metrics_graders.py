"""The re-grade and flip counters per grader (SPEC §10): a re-grade is a hit or a conflict, a
flip a conflict; a grader's two series are there at 0 from its first record."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from worker.observability.metrics import Metrics

GRADER = {"grader_name": "judge", "grader_version": "1.0", "grader_model": "m-2026"}


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    """Metrics on the default registry, unregistered afterwards (names are registered once)."""
    before = set(REGISTRY._collector_to_names)
    built = Metrics(enabled=True)
    yield built
    for collector in set(REGISTRY._collector_to_names) - before:
        REGISTRY.unregister(collector)


def record(cache: str | None, **fields: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "event": "evidence_coverage.scored",
        "status": "scored",
        "cache": cache,
        "owner": None,
        "value": 0.5,
        "contract_version": "v1",
        "policy_group": "default",
        "threshold": None,
        "recorded_at": None,
        **GRADER,
        **fields,
    }
    return SimpleNamespace(**values)


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels or GRADER)


def test_hits_and_conflicts_are_regrades_and_conflicts_flips(metrics: Metrics) -> None:
    """Two hits and a conflict among four records: three re-grades, one flip."""
    metrics.observe(
        [record("miss"), record("hit"), record("conflict"), record("hit")],
        alerts=1,
        seconds_per_message=0.001,
    )

    assert sample("evidence_coverage_regrades_total") == 3
    assert sample("evidence_coverage_flips_total") == 1


def test_a_grader_s_series_start_at_zero_with_its_first_record(metrics: Metrics) -> None:
    """A first grading makes both series at 0; a record without a grader makes none."""
    metrics.observe([record("miss")], alerts=0, seconds_per_message=0.001)
    metrics.observe(
        [record(None, event="evidence_coverage.rejected", status="invalid", grader_name=None)],
        alerts=0,
        seconds_per_message=0.001,
    )

    assert sample("evidence_coverage_regrades_total") == 0
    assert sample("evidence_coverage_flips_total") == 0
    other = {"grader_name": "other", "grader_version": "1.0", "grader_model": "m-2026"}
    assert sample("evidence_coverage_regrades_total", **other) is None
