"""worker/observability/telemetry.py without a worker: when it is on, and what a record's event
says."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from contracts.record_models import ScoreRecord
from tests import factories
from tests.conftest import FIXED_NOW
from worker.observability import telemetry
from worker.observability.telemetry import configured, evaluation_attributes
from worker.pipeline.scoring import rejected_record


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:4318/v1/logs"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_export_is_on_only_with_an_otlp_endpoint(environ: dict[str, str], on: bool) -> None:
    """The standard endpoint variables turn it on (the extra is installed for the tests)."""
    assert configured(environ) is on


def record(message_dict: Callable[..., dict[str, Any]], **fields: Any) -> ScoreRecord:
    return ScoreRecord.model_validate(factories.expected_scored(message_dict(), **fields))


def test_a_failing_row_is_a_scored_evaluation_with_its_owner_and_policy(
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """Value, decision as the label, reason as the explanation; our provenance beside them."""
    failing = record(
        message_dict,
        status="fail",
        policy_version="2026-12-01",
        threshold=0.85,
        owner="attribution",
        cache="hit",
        observed_value=2 / 3,
        observed_reason=factories.TWO_THIRDS_REASON,
    )

    assert evaluation_attributes(failing) == {
        "gen_ai.evaluation.name": "evidence_coverage",
        "gen_ai.evaluation.score.value": 2 / 3,
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": factories.TWO_THIRDS_REASON,
        "gen_ai.evaluation.evaluator.name": "claim-attributor",
        "gen_ai.evaluation.evaluator.version": "3.2.0",
        "evidence_coverage.case_id": failing.case_id,
        "evidence_coverage.input_hash": failing.input_hash,
        "evidence_coverage.contract_version": failing.contract_version,
        "evidence_coverage.metric_version": "evidence_coverage/1",
        "evidence_coverage.policy_version": "2026-12-01",
        "evidence_coverage.policy_group": "default",
        "evidence_coverage.threshold": 0.85,
        "evidence_coverage.owner": "attribution",
        "evidence_coverage.cache": "hit",
        "evidence_coverage.contract_drift": False,
        "evidence_coverage.grader_model": "gpt-4o-mini-2024-07-18",
    }


def test_an_invalid_row_has_no_score_value_and_an_error_type(
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """Invalid is not zero: no score value at all, error.type says why there is none."""
    invalid = record(
        message_dict,
        value=None,
        reason="required_claim_ids must not be empty",
        status="invalid",
        owner="evaluation-data",
    )

    attributes = evaluation_attributes(invalid)

    assert "gen_ai.evaluation.score.value" not in attributes
    assert (attributes["gen_ai.evaluation.score.label"], attributes["error.type"]) == (
        "invalid",
        "invalid",
    )
    assert attributes["evidence_coverage.owner"] == "evaluation-data"


def test_a_rejected_message_is_an_evaluation_error_of_type_rejected() -> None:
    """A message that never reached the metric: error.type rejected, its reason explained."""
    rejected = rejected_record("schema: answer: Field required", recorded_at=FIXED_NOW)

    attributes = evaluation_attributes(rejected)

    assert attributes == {
        "gen_ai.evaluation.name": "evidence_coverage",
        "gen_ai.evaluation.score.label": "invalid",
        "gen_ai.evaluation.explanation": "schema: answer: Field required",
        "error.type": "rejected",
        "evidence_coverage.metric_version": "evidence_coverage/1",
        "evidence_coverage.owner": "evaluation-data",
        "evidence_coverage.contract_drift": False,
    }


def test_telemetry_starts_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The solo pool's main process hears worker_init and worker_process_init: the second
    start returns the first's providers instead of installing another set."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    first = telemetry.start()
    try:
        assert telemetry.start() is first
        assert telemetry.active() is first
    finally:
        first.shutdown()
    assert telemetry.active() is None
