"""Fixtures of the tasks' tests: the store, the clock and the process service the tasks use."""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest

from tests.conftest import FIXED_NOW
from tests.unit.runtime.task_runs import (
    APP,
    MAX_DELIVERIES,
    STORE_WINDOW_SECONDS,
    FakeTime,
    FlakyStore,
)
from worker.observability.logging import get_logger
from worker.pipeline.alert_delivery import AlertSink
from worker.pipeline.service import Service
from worker.runtime import tasks
from worker.settings import Settings
from worker.stores.durable import DurableStore


@pytest.fixture
def store() -> Iterator[FlakyStore]:
    opened = FlakyStore(fakeredis.FakeRedis(), prefix="unit")
    yield opened
    opened.close()


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def runtime(store: FlakyStore, fake_time: FakeTime) -> Iterator[Service]:
    """The tasks' process service, on fakeredis with a fixed clock; reset afterwards. Its
    store waits out an outage for up to STORE_WINDOW_SECONDS of fake time."""
    built = Service(
        settings=Settings(max_deliveries=MAX_DELIVERIES),
        policy=None,
        store=DurableStore(
            store,
            window_seconds=STORE_WINDOW_SECONDS,
            on_wait=lambda error, attempt, delay: get_logger().warning(
                "evidence_coverage.store_unavailable", attempt=attempt
            ),
            sleep=fake_time.sleep,
            clock=lambda: fake_time.now,
            rng=lambda: 0.0,
        ),
        alerts=AlertSink(),
        clock=lambda: FIXED_NOW,
    )
    APP.use_service(built)
    yield built
    APP.use_service(None)


@pytest.fixture
def no_pause(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The pause before an unrecordable message goes back, recorded instead of slept."""
    pauses: list[float] = []
    monkeypatch.setattr(tasks, "sleep", pauses.append)
    return pauses
