"""OpenTelemetry export through a real worker: task spans continue the upstream trace, and each
record is a gen_ai.evaluation.result event in its task's span
(worker/observability/telemetry.py)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery

from tests.integration import worker_harness as harness
from tests.integration.otlp_receiver import Receiver, receiving
from tests.integration.worker_harness import Worker
from worker.constants import SCORE

pytestmark = pytest.mark.integration

queue = harness.queue
start_worker = harness.start_worker
publisher = harness.publisher
QUICK_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BLRP_SCHEDULE_DELAY": "100"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_task_span_continues_the_upstream_trace_and_holds_the_evaluation_event(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    message_dict: Callable[..., dict[str, Any]],
    receiver: Receiver,
    pool: str,
) -> None:
    """The upstream job's traceparent (a Celery message header) is the task span's parent;
    the record is one gen_ai.evaluation.result event in that span, with exact attributes,
    and the record's log line names the span."""
    upstream_trace, upstream_span = secrets.token_hex(16), secrets.token_hex(8)
    worker = start_worker(
        queue,
        pool=pool,
        concurrency=1,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, **QUICK_EXPORT},
    )
    worker.wait_ready()

    publisher().send_task(
        SCORE,
        args=[message_dict(case_id="otel-1", supported_claim_ids=["refund-window"])],
        queue=queue,
        headers={"traceparent": f"00-{upstream_trace}-{upstream_span}-01"},
    )
    (record,) = worker.wait_for(1)
    worker.stop()

    (span,) = [span for span in receiver.spans if span.name == f"run/{SCORE}"]
    assert (span.trace_id, span.parent_span_id) == (upstream_trace, upstream_span)
    assert span.resource["service.name"] == "evidence-coverage-worker"
    (event,) = [log for log in receiver.logs if log.name == "gen_ai.evaluation.result"]
    assert (event.trace_id, event.span_id, event.severity_number) == (
        upstream_trace,
        span.span_id,
        9,
    )
    assert event.attributes == {
        "gen_ai.evaluation.name": "evidence_coverage",
        "gen_ai.evaluation.score.value": pytest.approx(1 / 3),
        "gen_ai.evaluation.score.label": "scored",
        "gen_ai.evaluation.explanation": record["reason"],
        "evidence_coverage.case_id": "otel-1",
        "evidence_coverage.input_hash": record["input_hash"],
        "evidence_coverage.contract_version": record["contract_version"],
        "evidence_coverage.metric_version": "evidence_coverage/1",
        "evidence_coverage.policy_group": "default",
        "evidence_coverage.cache": "miss",
        "evidence_coverage.contract_drift": False,
        # The grader (issue 26): gen_ai.evaluation.evaluator.* as GenAI semconv PR #359 proposes.
        "gen_ai.evaluation.evaluator.name": record["grader_name"],
        "gen_ai.evaluation.evaluator.version": record["grader_version"],
        "evidence_coverage.grader_model": record["grader_model"],
    }
    assert (record["grader_name"], record["grader_version"]) == ("claim-attributor", "3.2.0")
    assert (record["trace_id"], record["span_id"]) == (upstream_trace, span.span_id)


def test_without_an_endpoint_nothing_of_opentelemetry_is_loaded(
    start_worker: Callable[..., Worker],
    queue: str,
    publisher: Callable[..., Celery],
    message_dict: Callable[..., dict[str, Any]],
) -> None:
    """With the extra installed but no OTLP endpoint, a worker never loads an exporter or
    Celery's instrumentation, and records carry no span_id. (redis-py imports the API and
    SDK on its own whenever they are installed.)"""
    worker = start_worker(
        queue, pool="solo", env={"PYTHONPROFILEIMPORTTIME": "1"}, options=["--concurrency", "1"]
    )
    worker.wait_ready()
    publisher().send_task(SCORE, args=[message_dict(case_id="plain-1")], queue=queue)
    (record,) = worker.wait_for(1)
    worker.stop()

    assert "span_id" not in record
    imported = worker.stderr_path.read_text("utf-8")
    assert "| celery" in imported  # the import-time table is there to read
    assert "opentelemetry.exporter" not in imported
    assert "opentelemetry.instrumentation" not in imported
