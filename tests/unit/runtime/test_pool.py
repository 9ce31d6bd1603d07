"""The worker's pool, without forking: what it sets up before the children start."""

from __future__ import annotations

import gc

import pytest
from celery.concurrency.prefork import TaskPool

from worker.runtime.pool import FIRST_COME_FIRST_SERVED, PrefetchingTaskPool


def test_the_pool_freezes_what_is_imported_before_it_forks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When Celery's prefork start-up (the fork) runs, the imported objects are frozen; the
    collector's thresholds stay CPython's (a young generation of 20,000 cost `score` ~10%)."""
    at_fork: list[tuple[int, int]] = []
    monkeypatch.setattr(
        TaskPool,
        "on_start",
        lambda _: at_fork.append((gc.get_freeze_count(), gc.get_threshold()[0])),
    )
    pool = PrefetchingTaskPool(limit=1)
    assert gc.get_freeze_count() == 0
    try:
        pool.on_start()
    finally:
        gc.unfreeze()

    # Ragas, langchain and pydantic alone leave well over 100,000 objects alive.
    assert len(at_fork) == 1
    assert at_fork[0][0] > 100_000
    assert at_fork[0][1] == 700
    assert pool.options["sched_strategy"] == FIRST_COME_FIRST_SERVED
