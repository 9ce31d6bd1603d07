"""deploy/logging/vector.toml: the shipping pipeline is wired, Loki gets the raw line, and
the Elasticsearch transform turns every line (otel, ECS or not JSON) into an ECS document."""

from __future__ import annotations

import io
import json
import os
import tomllib
from typing import Any

import pytest

from tests.ecs import ecs_conflicts
from tests.unit.project.deploy_files import DEPLOY
from worker.observability.logging import SERVICE_NAME, configure_logging, get_logger


def vector() -> dict[str, Any]:
    return tomllib.loads((DEPLOY / "logging" / "vector.toml").read_text(encoding="utf-8"))


def test_vector_pipeline_is_wired() -> None:
    """Every component's inputs exist; Loki and Elasticsearch sinks both receive worker lines."""
    config = vector()
    components = {*config["sources"], *config.get("transforms", {})}
    for section in ("transforms", "sinks"):
        for name, component in config.get(section, {}).items():
            assert set(component["inputs"]) <= components, name
    sinks = {component["type"] for component in config["sinks"].values()}
    assert sinks == {"loki", "elasticsearch"}


def test_vector_sends_loki_the_raw_line_under_the_service_label() -> None:
    """Loki gets the JSON line as written, under the service name the worker logs."""
    loki = vector()["sinks"]["loki"]
    assert loki["encoding"]["codec"] == "text"
    assert loki["labels"] == {"service_name": SERVICE_NAME}


def vector_remap() -> Any:
    """The Elasticsearch transform's VRL, compiled by Vector's own VRL (pyvrl); CI must have it."""
    try:
        import pyvrl
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("pyvrl is missing: it is in requirements-dev (x86_64, Python 3.11)")
        pytest.skip("pyvrl (Vector's VRL for Python) is not installed on this platform")
    source = vector()["transforms"]["worker_documents"]["source"]
    return pyvrl.Transform(source + "\n.\n")  # the program's value: the whole document


OTEL_LINE = {
    "timestamp": "2026-12-06T00:09:40.098131Z",
    "level": "info",
    "event": "evidence_coverage.scored",
    "severity_text": "INFO",
    "severity_number": 9,
    "service.name": SERVICE_NAME,
    "logger": "evidence_coverage",
    "case_id": "refund-001",
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "value": 0.5,
}
DOCKER_META = {
    "host": "node-1",
    "container_id": "9f2c1e",
    "container_name": "evidence-coverage-worker-1",
    "image": "evidence-coverage-worker:0.1.0",
    "stream": "stdout",
    "timestamp": "2026-12-06T00:09:40.1Z",
    "source_type": "docker_logs",
}
POD_META = {
    "kubernetes": {
        "pod_name": "worker-7d9f-x2",
        "pod_namespace": "evidence",
        "pod_node_name": "node-2",
        "container_name": "worker",
        "container_image": "evidence-coverage-worker:0.1.0",
        "pod_labels": {"app.kubernetes.io/name": SERVICE_NAME},
    },
    "file": "/var/log/pods/evidence_worker-7d9f-x2/worker/0.log",
    "stream": "stdout",
    "timestamp": "2026-12-06T00:09:40.1Z",
    "source_type": "kubernetes_logs",
}


def test_vector_gives_a_default_line_ecs_names_and_keeps_the_container() -> None:
    """An otel line from Docker: the event name moves to event.action (ECS maps `event` as an
    object), the envelope gets ECS's twins, and the container's metadata stays, as ECS names."""
    document = vector_remap().remap({"message": json.dumps(OTEL_LINE), **DOCKER_META})

    assert document["event"] == {
        "action": "evidence_coverage.scored",
        "dataset": "evidence_coverage",
    }
    assert (document["@timestamp"], document["log.level"], document["message"]) == (
        "2026-12-06T00:09:40.098131Z",
        "info",
        "evidence_coverage.scored",
    )
    assert document["log"] == {"logger": "evidence_coverage"}
    assert document["service"] == {"name": SERVICE_NAME}
    assert document["trace"] == {"id": "4bf92f3577b34da6a3ce929d0e0e4736"}
    assert document["container"] == {
        "id": "9f2c1e",
        "name": "evidence-coverage-worker-1",
        "image": {"name": "evidence-coverage-worker:0.1.0"},
    }
    assert document["host"] == {"name": "node-1"}
    assert (document["case_id"], document["value"]) == ("refund-001", 0.5)
    assert ecs_conflicts(document) == []


def test_vector_keeps_an_ecs_line_and_the_pod_it_came_from() -> None:
    """An ECS document (EVIDENCE_LOG_SCHEMA=ecs) from Kubernetes passes through whole, with
    the pod's metadata as orchestrator.*, container.* and host.name, and Vector's own
    kubernetes object kept."""
    stream = io.StringIO()
    configure_logging(stream=stream, schema="ecs")
    get_logger().info("evidence_coverage.scored", case_id="refund-001", value=0.5)
    line = stream.getvalue().strip()

    document = vector_remap().remap({"message": line, **POD_META})

    assert {key: document[key] for key in ("case_id", "value", "message")} == {
        "case_id": "refund-001",
        "value": 0.5,
        "message": "evidence_coverage.scored",
    }
    assert document["@timestamp"] == json.loads(line)["@timestamp"]
    assert document["orchestrator"] == {
        "type": "kubernetes",
        "namespace": "evidence",
        "resource": {"type": "pod", "name": "worker-7d9f-x2"},
    }
    assert document["container"] == {
        "name": "worker",
        "image": {"name": "evidence-coverage-worker:0.1.0"},
    }
    assert document["host"] == {"name": "node-2"}
    assert document["kubernetes"] == POD_META["kubernetes"]
    assert document["log"] == {
        "logger": "evidence_coverage",
        "file": {"path": "/var/log/pods/evidence_worker-7d9f-x2/worker/0.log"},
    }
    assert ecs_conflicts(document) == []


def test_vector_keeps_a_line_that_is_not_json_as_an_error_message() -> None:
    """A stray traceback line is kept as text, with the time the source saw it."""
    document = vector_remap().remap({"message": "Traceback (most recent call last):", **POD_META})

    assert (document["message"], document["log.level"], document["@timestamp"]) == (
        "Traceback (most recent call last):",
        "error",
        "2026-12-06T00:09:40.1Z",
    )
    assert document["event"] == {"dataset": "evidence_coverage"}
    assert ecs_conflicts(document) == []
