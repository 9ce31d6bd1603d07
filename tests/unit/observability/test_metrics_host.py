"""EVIDENCE_METRICS_HOST: the address the metrics endpoint binds, 0.0.0.0 unless set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import prometheus_client
import pytest

from worker.observability import metrics
from worker.settings import Settings


def test_the_default_is_every_interface_as_before() -> None:
    """Unset: 0.0.0.0, which a pod's port needs."""
    assert Settings().metrics_host == "0.0.0.0"


def test_the_variable_sets_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """EVIDENCE_METRICS_HOST=127.0.0.1 keeps the endpoint on this machine."""
    monkeypatch.setenv("EVIDENCE_METRICS_HOST", "127.0.0.1")

    assert Settings().metrics_host == "127.0.0.1"


def test_serve_binds_the_host_it_is_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """serve() hands the host to prometheus_client as the address to listen on."""
    calls: list[tuple[int, dict[str, Any]]] = []
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(
        prometheus_client, "start_http_server", lambda port, **kw: calls.append((port, kw))
    )

    metrics.serve(9464, "127.0.0.1")

    assert [(port, kw["addr"]) for port, kw in calls] == [(9464, "127.0.0.1")]
