"""The worker's start line: the same facts whether logs are JSON or console lines."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery.concurrency.solo import TaskPool
from structlog.testing import capture_logs

from worker.runtime import signals
from worker.runtime.celery_app import create_app
from worker.settings import Settings


@pytest.mark.parametrize(
    ("log_format", "banner_off"), [("json", True), ("console", False)], ids=["json", "console"]
)
def test_the_start_line_carries_the_same_facts_in_both_formats(
    log_format: str, banner_off: bool
) -> None:
    """With console logs and --quiet (the Procfile's) the worker still says which broker,
    store, queues, concurrency and pool it runs with; only JSON turns Celery's banner off."""
    app = create_app(
        Settings(
            log_format=log_format,
            broker_url="redis://user:secret@broker:6379/0",
            store_url="sqlite:///store.sqlite3",
        )
    )
    instance = SimpleNamespace(app=app, pool_cls=TaskPool, concurrency=1, quiet=False)

    with capture_logs() as logs:
        signals.banner_as_json_line("host-1", instance)

    (line,) = logs
    assert {key: line[key] for key in ("event", "hostname", "broker", "store", "pool")} == {
        "event": "evidence_coverage.worker_starting",
        "hostname": "host-1",
        "broker": "redis://user:**@broker:6379/0",
        "store": "sqlite:///store.sqlite3",
        "pool": "solo",
    }
    assert instance.quiet is banner_off
