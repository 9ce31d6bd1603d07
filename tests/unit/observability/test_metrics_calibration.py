"""The message counter's review labels and the previous-rule counter (SPEC §12): `review` is
counted apart from `fail`, at 0 from the start, and an observation window's decisions by the
status the previous rule gave and the status now."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from worker.observability.metrics import Metrics, known_message_labels


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    """Metrics on the default registry, unregistered afterwards (names are registered once)."""
    before = set(REGISTRY._collector_to_names)
    built = Metrics(enabled=True)
    yield built
    for collector in set(REGISTRY._collector_to_names) - before:
        REGISTRY.unregister(collector)


def record(status: str, owner: str | None, **fields: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "event": "evidence_coverage.scored",
        "status": status,
        "cache": "miss",
        "owner": owner,
        "value": 0.83,
        "contract_version": "v1",
        "policy_group": "default",
        "threshold": 0.85,
        "recorded_at": None,
        "grader_name": None,
        **fields,
    }
    return SimpleNamespace(**values)


def messages(status: str, owner: str) -> float | None:
    return REGISTRY.get_sample_value(
        "evidence_coverage_messages_total", {"status": status, "cache": "miss", "owner": owner}
    )


def test_review_labels_are_exported_at_zero(metrics: Metrics) -> None:
    """Every review label set a record can carry is there at 0 before the first record."""
    del metrics
    review = [labels for labels in known_message_labels() if labels[0] == "review"]

    assert review == [
        ("review", cache, owner)
        for cache in ("miss", "hit", "conflict")
        for owner in ("release-rule", "evaluation-data")
    ]
    assert messages("review", "release-rule") == 0.0


def test_a_review_row_counts_as_review_not_as_fail(metrics: Metrics) -> None:
    """A review row raises the review series and leaves the failing one at 0."""
    metrics.observe([record("review", "release-rule")], alerts=0, seconds_per_message=0.001)

    assert (messages("review", "release-rule"), messages("fail", "release-rule")) == (1.0, 0.0)


def test_previous_rule_decisions_are_counted_by_both_statuses(metrics: Metrics) -> None:
    """Three records of an open window: one changed pass -> fail, two stayed pass."""
    metrics.observe(
        [
            record("fail", "release-rule", previous_status="pass"),
            record("pass", None, previous_status="pass"),
            record("pass", None, previous_status="pass"),
            record("pass", None),  # no window: not counted
        ],
        alerts=0,
        seconds_per_message=0.001,
    )

    def decided(previous: str, status: str) -> float | None:
        return REGISTRY.get_sample_value(
            "evidence_coverage_previous_rule_decisions_total",
            {"previous_status": previous, "status": status},
        )

    assert (decided("pass", "fail"), decided("pass", "pass")) == (1.0, 2.0)
